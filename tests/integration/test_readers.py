#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Reader threads per CPU group: CpusPerReader=1 on this machine gives one thread per CPU,
pinned to it, and each thread receives exactly the events of its own CPUs."""
import os
import re
import sys

from prtest import Daemon, check, check_eq, require_root_and_bpf, run_tests

BINARY = sys.argv[1]
require_root_and_bpf()
ONLINE = sorted(os.sched_getaffinity(0))
if len(ONLINE) < 2:
    from prtest import skip
    skip("needs at least 2 online CPUs")

d = Daemon(BINARY, "readers", config="[Readers]\nCpusPerReader=1\n")


def threads(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            comm = f.read().strip()
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            allowed = re.search(r"Cpus_allowed_list:\s*(\S+)", f.read()).group(1)
        out[comm] = allowed
    return out


def burst_on(cpu, n, tag):
    """n opens of a marker path from a child pinned to one CPU."""
    pid = os.fork()
    if pid == 0:
        os.sched_setaffinity(0, {cpu})
        for i in range(n):
            try:
                os.open(f"/nonexistent-perfrelay-{tag}-{i}", os.O_RDONLY)
            except OSError:
                pass
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_one_reader_per_cpu():
    d.start()
    t = threads(d.proc.pid)
    for i, cpu in enumerate(ONLINE):
        check_eq(t.get(f"perfrelay-r{i}"), str(cpu), f"reader {i} pinned to CPU {cpu}")

    n = 500
    pids = {cpu: burst_on(cpu, n, f"cpu{cpu}") for cpu in ONLINE[:2]}
    for cpu, pid in pids.items():
        got = d.wait_events(lambda e, pid=pid: e["type"] == "open" and e["pid"] == pid, n, f"burst on CPU {cpu}")
        check(all(e["cpu"] == cpu for e in got), f"burst pinned to CPU {cpu} arrives from CPU {cpu}")
    check_eq(d.stop(), 0, "clean exit")
    # stop() joined the stderr reader, so every line the daemon logged is here.
    check(any(f"{len(ONLINE)} reader threads serving {len(ONLINE)} CPUs" in l for l in d.stderr_lines),
          "daemon reports one reader per CPU")

    # Each reader's own event count equals the sum of its CPUs' rings: no reader saw another's CPU.
    readers = {}
    cpus = {}
    for line in d.stderr_lines:
        m = re.search(r"Reader (\d+) \(CPUs ([\d,-]+)\): (\d+) events", line)
        if m:
            readers[int(m.group(1))] = (m.group(2), int(m.group(3)))
        m = re.search(r"CPU (\d+): (\d+) received", line)
        if m:
            cpus[int(m.group(1))] = int(m.group(2))
    check_eq(len(readers), len(ONLINE), "one stats line per reader")
    for i, cpu in enumerate(ONLINE):
        check_eq(readers[i][0], str(cpu), f"reader {i} serves CPU {cpu} only")
        check_eq(readers[i][1], cpus[cpu], f"reader {i} events == CPU {cpu} ring's records")
    for cpu in ONLINE[:2]:
        check(cpus[cpu] >= n, f"CPU {cpu} ring received the burst")


try:
    run_tests([test_one_reader_per_cpu])
finally:
    d.cleanup()
