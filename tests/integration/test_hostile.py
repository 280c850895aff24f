#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A hostile third-party producer opens the pinned array by path and writes garbage, truncated
headers, wrong magic, huge sizes, a wrong version, an out-of-range producer id, a built-in type
with a wrong size, a forged loss report, and valid records of an unknown type, at full speed.
The daemon rejects each malformed record, counts it per reason and per producer, publishes the
valid ones with their payload, and stays up."""
import base64
import json
import os
import re
import subprocess
import sys

from prtest import Daemon, check, check_eq, require_root_and_bpf, run_tests

BINARY = sys.argv[1]
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
PRODUCER = os.path.join(BUILDDIR, "tests", "integration", "hostile-producer")
N = 20000  # records of each kind
# Kinds in hostile.bpf.c's order, and the decoder's reason for each (None: valid).
KINDS = ["garbage", "truncated header", "wrong magic", "huge size", "wrong version", "bad producer id",
         "wrong size for a built-in type", "forged loss report", "valid unknown type"]
REASON = ["bad-magic", "truncated", "bad-magic", "truncated", "bad-version", "bad-producer", "bad-size",
          "reserved-type", None]
# Which malformed kinds name producer 301 in a header the decoder could read that far.
NAMES_PRODUCER = [False, True, True, True, True, False, True, True, False]

require_root_and_bpf()
# Big rings, so that the kernel takes every record (what it did not take is counted anyway).
d = Daemon(BINARY, "hostile", config="[Probes]\nProbes=none\n[Ring]\nPagesPerCpu=512\n")


def test_hostile_producer():
    d.start()
    pid = d.proc.pid
    r = subprocess.run([PRODUCER, d.pin_path, str(N), "0"], capture_output=True, text=True, timeout=120)
    check_eq(r.returncode, 0, f"hostile producer ran: {r.stderr}")
    counts = json.loads(r.stdout)
    sent = counts["sent"]
    check(all(s > 0 for s in sent), f"the kernel took records of every kind: {counts}")
    check_eq(sum(sent) + sum(counts["failed"]), N * len(KINDS), "every attempt accounted for")

    valid = d.wait_events(lambda e: e.get("type_id") == 0x8123 and e.get("producer") == 300, sent[8],
                          "the valid records of the unknown type", timeout=60)
    check(d.proc.poll() is None and d.proc.pid == pid, "the daemon stayed up")
    check_eq(d.stop(), 0, "clean exit")

    check_eq(len([e for e in d.events if e.get("type_id") == 0x8123]), sent[8], "each valid record published once")
    for e in valid[:100]:
        check_eq(e["type"], "unknown", "an unknown type is published as such")
        check_eq(base64.b64decode(e["payload"]), b"\xab" * 16, "its payload, in base64")
    check(not any(e.get("type") == "lost" or e.get("type_id") == 0x7fff for e in d.events),
          "a forged loss report is never published")
    check(not any(e.get("producer") == 301 for e in d.events), "no malformed record is published")

    # The exit statistics: rejections per reason (summed over readers) and per producer.
    log = d.stderr()
    reasons = {}
    for m in re.finditer(r"Reader \d+: (\d+) records rejected: ([\w-]+)", log):
        reasons[m.group(2)] = reasons.get(m.group(2), 0) + int(m.group(1))
    want = {}
    for k, reason in enumerate(REASON):
        if reason:
            want[reason] = want.get(reason, 0) + sent[k]
    check_eq(reasons, want, "records rejected per reason")
    producers = {int(m.group(1)): (int(m.group(2)), int(m.group(3)))
                 for m in re.finditer(r"Producer (\d+): (\d+) received, (\d+) malformed", log)}
    check_eq(producers.get(300), (sent[8], 0), "producer 300: its valid records, nothing malformed")
    check_eq(producers.get(301), (0, sum(s for s, named in zip(sent, NAMES_PRODUCER) if named)),
             "producer 301: every malformed record that names it")
    malformed_cpu = sum(int(m.group(1)) for m in re.finditer(r"CPU \d+: \d+ received, \d+ lost, (\d+) malformed", log))
    check_eq(malformed_cpu, sum(want.values()), "per-CPU malformed counters add up")


try:
    run_tests([test_hostile_producer])
finally:
    d.cleanup()
