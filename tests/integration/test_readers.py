#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Reader threads per CPU group: CpusPerReader=1 on this machine gives one thread per CPU,
pinned to it, and each thread reads exactly the records of its own CPU: a producer pinned to one
CPU at a time (perfrelay-bench) emits a known number of records, and GetStats() must show
exactly those on that CPU's ring and that CPU's reader, none on the other, and the --stdout
client must have received them from that CPU."""
import json
import os
import re
import subprocess

import pytest

from prtest import check, check_eq, daemon_binary, main, skip, wait_for

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
BENCH = os.path.join(BUILDDIR, "bench", "perfrelay-bench")
BENCH_PRODUCER = 16  # PERFRELAY_PRODUCER_BENCH in bpf/event.h
ONLINE = sorted(os.sched_getaffinity(0))
if len(ONLINE) < 2:
    skip("needs at least 2 online CPUs")


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, stats_bus):
    global bus
    bus = stats_bus
    # No probes: the benchmark's producer is the only one, so every count is known exactly.
    d = make_daemon("readers", config="[Readers]\nCpusPerReader=1\n[Probes]\nProbes=none\n", start=False)
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup



def threads(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            comm = f.read().strip()
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            allowed = re.search(r"Cpus_allowed_list:\s*(\S+)", f.read()).group(1)
        out[comm] = allowed
    return out


def emit_on(d, cpu):
    """A burst of the benchmark's records from a producer pinned to `cpu`; returns how many the
    kernel took (attempts - failures)."""
    r = subprocess.run([BENCH, "--mode", "daemon", "--pin-root", d.pin_path, "--clients", "0",
                        "--duration", "0.5", "--rate", "20000", "--settle-ms", "0",
                        "--producer-cpus", str(cpu), "--consumer-cpu", "-1"], capture_output=True, text=True, timeout=60)
    check_eq(r.returncode, 0, f"perfrelay-bench exit status ({r.stderr.strip()})")
    load = json.loads(r.stdout)
    check(load["attempts"] > 0, f"the producer emitted on CPU {cpu}")
    return load["attempts"] - load["failures"]


def per_cpu_and_reader():
    st = bus.stats()
    cpus = {c["cpu"]: c for c in st["cpus"]}
    readers = {r["id"]: r for r in st["readers"]}
    return cpus, readers


def test_one_reader_per_cpu(d):
    d.start()
    t = threads(d.proc.pid)
    for i, cpu in enumerate(ONLINE):
        check_eq(t.get(f"perfrelay-r{i}"), str(cpu), f"reader {i} pinned to CPU {cpu}")
    cpus, readers = per_cpu_and_reader()
    check_eq(sorted(readers), list(range(len(ONLINE))), "one reader per CPU")
    for i, cpu in enumerate(ONLINE):
        check_eq(readers[i]["cpus"], str(cpu), f"reader {i} serves CPU {cpu} only")
        check_eq(cpus[cpu]["reader"], i, f"CPU {cpu}'s ring belongs to reader {i}")

    expect = {cpu: 0 for cpu in ONLINE}
    for cpu in ONLINE[:2]:
        expect[cpu] += emit_on(d, cpu)
        # Exact: the ring of the CPU the producer ran on, and that CPU's reader, read every
        # record it took; the other CPUs' rings and readers none.
        cpus, readers = wait_for(lambda: (lambda c, r: all(c[x]["received"] == expect[x] for x in ONLINE) and (c, r))(
            *per_cpu_and_reader()), f"the readers took the records emitted on CPU {cpu} (expected {expect})")
        for i, x in enumerate(ONLINE):
            check_eq(readers[i]["events"], expect[x], f"reader {i} (CPU {x}) read exactly CPU {x}'s records")

    # The client's own count: the records arrived tagged with the CPU they were emitted on.
    check_eq(d.stop(), 0, "clean exit")
    got = {cpu: 0 for cpu in ONLINE}
    for e in d.events:
        if e.get("producer") == BENCH_PRODUCER:
            got[e["cpu"]] = got.get(e["cpu"], 0) + 1
    check_eq(got, expect, "records per CPU the --stdout client received")



def sched(pid, tid):
    """(policy, rt_priority) of a thread: /proc/PID/task/TID/stat fields 41 and 40."""
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[38]), int(fields[37])


def test_reader_priority(make_daemon):
    """ReaderPriority=: the readers run at SCHED_FIFO with that priority; a flood that keeps a
    reader busy for more than its ReaderPriorityBudget= of 100 ms sends it back to SCHED_OTHER
    for the rest of the window (GetStats() readers[].rt_demotions), and it gets its priority
    back afterwards."""
    # A budget of 1 ms per 100 ms, which the flood below spends in every window.
    d = make_daemon("readers-rt", config="[Readers]\nCpusPerReader=1\nReaderPriority=1\nReaderPriorityBudget=1\n"
                                         "[Probes]\nProbes=none\n")
    readers = {}
    for tid in os.listdir(f"/proc/{d.proc.pid}/task"):
        with open(f"/proc/{d.proc.pid}/task/{tid}/comm") as f:
            if f.read().strip().startswith("perfrelay-r"):
                readers[tid] = sched(d.proc.pid, tid)
    check(readers and all(v == (1, 1) for v in readers.values()), f"every reader at SCHED_FIFO 1: {readers}")
    # The benchmark's producer flat out on CPU 0, every record encoded as JSON for --stdout by
    # reader 0 on the same CPU: far more than 1 ms of work in each window.
    r = subprocess.run([BENCH, "--mode", "daemon", "--pin-root", d.pin_path, "--clients", "0",
                        "--duration", "1", "--settle-ms", "0", "--producer-cpus", str(ONLINE[0]),
                        "--consumer-cpu", "-1"], capture_output=True, text=True, timeout=60)
    check_eq(r.returncode, 0, f"perfrelay-bench exit status ({r.stderr.strip()})")
    st = bus.stats()
    check(st["readers"][0]["rt_demotions"] > 0, f"reader 0 spent its budget: {st['readers']}")
    wait_for(lambda: all(sched(d.proc.pid, t) == (1, 1) for t in readers),
             "the readers back at SCHED_FIFO once the flood is over")
    d.stop()


if __name__ == "__main__":
    main(__file__)
