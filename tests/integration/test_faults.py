#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Faults at start and at random moments: a tiny RLIMIT_NOFILE, SIGKILL at random points of 50
restarts (pins reused every time, no growth of pins, links or programs, events flow after each),
tracefs missing, and a CPU group naming a CPU that is not online."""
import os
import random
import signal
import subprocess
import time

import pytest

from prtest import Daemon, bpftool_json, check, check_eq, daemon_binary, main

BINARY = daemon_binary()


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon):
    d = make_daemon("faults", start=False)
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup



def ours(d):
    """Links and programs of this test's daemon: those using any map pinned under its pin root."""
    map_ids = {bpftool_json("map", "show", "pinned", f"{d.pin_path}/{m}")["id"] for m in os.listdir(d.pin_path)
               if m not in ("links", "perf-counters")}
    mine = [p for p in bpftool_json("prog", "show") if map_ids & set(p.get("map_ids", []))]
    progs = {p["id"] for p in mine}
    tick_progs = {p["id"] for p in mine if p.get("name") == "handle_counters_tick"}
    all_links = [l for l in bpftool_json("link", "show") if l.get("prog_id") in progs]
    # The counters' tick links live with each daemon, not pinned (docs/counters.md): apart.
    ours.ticks = sum(1 for l in all_links if l.get("prog_id") in tick_progs)
    links = {l["id"] for l in all_links if l.get("prog_id") not in tick_progs}
    events_id = bpftool_json("map", "show", "pinned", f"{d.pin_path}/events")["id"]
    return events_id, progs, links


@pytest.fixture(autouse=True)
def isolated(d):
    """A failed test must not leave its daemon running into the next one."""
    yield
    if d.proc is not None:
        d.stop(signal.SIGKILL)
    d.write_config("")


def pins(d):
    out = []
    for root, _, files in os.walk(d.pin_path):
        out += [os.path.relpath(os.path.join(root, f), d.pin_path) for f in files]
    return sorted(out)


def exec_flows(d, tag):
    p = subprocess.Popen(["/bin/true", tag])
    p.wait()
    d.wait_event(lambda e: e["type"] == "exec" and e["pid"] == p.pid, f"exec after {tag}")


def test_sigkill_at_random_moments(d):
    d.start()
    exec_flows(d, "first start")
    map_id, progs, links = ours(d)
    first_pins = pins(d)
    # exec, exit, fork; open and connect: enter, exit and the thread-exit reaper each; the
    # counters' sched_switch program and reaper (pinned), and their tick on each online CPU
    # (a perf event link that lives with the daemon: docs/counters.md).
    online = 0
    for part in open("/sys/devices/system/cpu/online").read().strip().split(","):
        lo, _, hi = part.partition("-")
        online += int(hi or lo) - int(lo) + 1
    check_eq(len(links), 9 + 2, "one pinned link per probe and counters program")
    check_eq(ours.ticks, online, "and a tick per online CPU")
    d.stop(signal.SIGKILL)
    _, progs, _ = ours(d)
    check_eq(len(progs), 9 + 2, "after the kill, only the pinned programs remain")

    rng = random.Random(1234)  # reproducible moments
    for i in range(50):
        # Killed somewhere between exec and well after READY: loading, pin checks, attaching,
        # mapping rings, or serving ... The same command as d.start(): a start without --stdout
        # wants no open records and rightly detaches that probe (OnDemand=), unpinning its links.
        proc = subprocess.Popen(d.command(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, 0.3))  # the fault injection itself, not a wait for a condition
        proc.send_signal(signal.SIGKILL)
        check_eq(proc.wait(), -signal.SIGKILL, f"restart {i} killed")
        check_eq(pins(d), first_pins, f"pins after kill {i}")
        # ... and the start after it serves events, before it is killed in turn.
        d.start()
        exec_flows(d, f"kill {i}")
        d.stop(signal.SIGKILL)

    d.start()
    exec_flows(d, "50 random kills")
    map_id2, _, links2 = ours(d)
    check_eq(map_id2, map_id, "the same array throughout")
    check_eq(links2, links, "the same links throughout: none added, none lost")
    check_eq(d.stop(), 0, "clean exit")
    # A running daemon keeps its own loaded copies (to attach probes later); once it is gone,
    # only the linked programs remain: no killed start left any behind.
    _, progs2, _ = ours(d)
    check_eq(progs2, progs, "no program left behind by a killed start")


def test_low_nofile_at_start(d):
    # Too few descriptors for the maps and rings: a clear error and exit 1, never a crash.
    r = subprocess.run(["prlimit", "--nofile=12:12", BINARY, "--config", d.config_path],
                       capture_output=True, text=True, timeout=60)
    check_eq(r.returncode, 1, f"exit status with RLIMIT_NOFILE=12 (stderr: {r.stderr[-500:]})")
    check("Too many open files" in r.stderr, f"the error says why: {r.stderr[-500:]}")
    # The next start is unharmed.
    d.start()
    exec_flows(d, "a failed start")
    check_eq(d.stop(), 0, "clean exit")


def test_tracefs_missing():
    # A private mount namespace without tracefs, and a fresh pin root, so tracepoints must be
    # attached anew: the error names tracefs and how to mount it.
    t = Daemon(BINARY, "notracefs")
    try:
        script = ("umount /sys/kernel/tracing 2>/dev/null; umount /sys/kernel/debug/tracing 2>/dev/null; "
                  "umount /sys/kernel/debug 2>/dev/null; exec \"$0\" --config \"$1\"")
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, BINARY,
                            t.config_path], capture_output=True, text=True, timeout=60)
        check_eq(r.returncode, 1, f"exit status without tracefs (stderr: {r.stderr[-500:]})")
        check("tracefs is not mounted" in r.stderr and "mount -t tracefs" in r.stderr,
              f"the error names tracefs: {r.stderr[-500:]}")
        check(os.path.ismount("/sys/kernel/tracing"), "the host's tracefs is untouched")
    finally:
        t.cleanup()


def test_offline_cpu_in_group(d):
    online = sorted(os.sched_getaffinity(0))
    absent = max(online) + 5
    groups = " ".join(str(c) for c in online) + f" {absent}"
    d.write_config(f"[Readers]\nCpuGroups={groups}\n")
    d.start()
    exec_flows(d, "a group with an offline CPU")
    check_eq(d.stop(), 0, "clean exit")
    check(any(f"CPU {absent} is not online, skipping it" in l for l in d.stderr_lines), "a warning names the CPU")
    check(any(f"{len(online)} reader threads serving {len(online)} CPUs" in l for l in d.stderr_lines),
          "one reader per online CPU of the config")


if __name__ == "__main__":
    main(__file__)
