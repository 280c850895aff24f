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
import subprocess

import pytest

from prtest import check, check_eq, daemon_binary, main, wait_for

BINARY = daemon_binary()
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



@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, stats_bus):
    global BUS
    BUS = stats_bus
    # Big rings, so that the kernel takes every record (what it did not take is counted anyway).
    d = make_daemon("hostile", config="[Probes]\nProbes=none\n[Ring]\nPagesPerCpu=512\n", start=False)
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup



def test_hostile_producer(d):
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

    # The statistics (GetStats through perfrelayctl stats --json): rejections per reason (summed
    # over readers) and per producer. Every record was written on one CPU, in order, and the
    # last one was valid and is published: the batch that read it has been read, and its
    # counters are stored at the end of that batch, so they are waited for, not slept for.
    want = {}
    for k, reason in enumerate(REASON):
        if reason:
            want[reason] = want.get(reason, 0) + sent[k]
    named = sum(s for s, n in zip(sent, NAMES_PRODUCER) if n)

    def settled():
        st = BUS.stats()
        return st if sum(c["malformed"] for c in st["cpus"]) >= sum(want.values()) else None
    st = wait_for(settled, "the per-CPU malformed counters of the last batch", timeout=10)

    reasons = {}
    for rd in st["readers"]:
        for reason, n in rd["malformed_by_reason"].items():
            reasons[reason] = reasons.get(reason, 0) + n
    check_eq(reasons, want, "records rejected per reason")
    producers = {p["id"]: p for p in st["producers"]}
    p300, p301 = producers.get(300, {}), producers.get(301, {})
    check_eq((p300.get("received_session"), p300.get("malformed_session")), (sent[8], 0),
             "producer 300: its valid records, nothing malformed")
    check_eq((p301.get("received_session"), p301.get("malformed_session")), (0, named),
             "producer 301: every malformed record that names it")
    check_eq(p301.get("malformed"), named, "producer 301: the pinned ledger counts them too")
    want301 = {}
    for k, reason in enumerate(REASON):
        if reason and NAMES_PRODUCER[k]:
            want301[reason] = want301.get(reason, 0) + sent[k]
    check_eq(p301.get("malformed_by_reason"), want301, "producer 301: rejected per reason")
    check_eq(sum(c["malformed"] for c in st["cpus"]), sum(want.values()), "per-CPU malformed counters add up")

    check_eq(d.stop(), 0, "clean exit")
    check_eq(len([e for e in d.events if e.get("type_id") == 0x8123]), sent[8], "each valid record published once")
    for e in valid[:100]:
        check_eq(e["type"], "unknown", "an unknown type is published as such")
        check_eq(base64.b64decode(e["payload"]), b"\xab" * 16, "its payload, in base64")
    # (A lost line of count 0 with "kernel" is the daemon's own notice of the flood's loss.)
    check(not any(e.get("type") == "lost" and "kernel" not in e or e.get("type_id") == 0x7fff for e in d.events),
          "a forged loss report is never published")
    check(not any(e.get("producer") == 301 for e in d.events), "no malformed record is published")


if __name__ == "__main__":
    main(__file__)
