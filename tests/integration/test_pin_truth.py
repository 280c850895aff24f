#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Pins that tell the truth: one daemon per pin root (a second one and --cleanup are refused
while it serves), stale links are unpinned at start, a link is reused only when its program uses
the pinned maps (a replaced "counters" is not left counting into an orphan).

Not tested here: that slots of CPUs without a ring are emptied. On current kernels a perf event
whose ring nobody maps any more already fails every output (counted by the producer), so the
emptying frees the dead events but changes nothing a test could observe; the kernel does not
let user space read a perf event array's slots."""
import os
import subprocess

import pytest

from prtest import bpftool_json, check, check_eq, Daemon, daemon_binary, main, producer_counters, run_true

BINARY = daemon_binary()
PRODUCER_EXEC = 1



@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf):
    pass


def wait_execs(d, pids):
    for pid in pids:
        d.wait_event(lambda e, pid=pid: e["type"] == "exec" and e["pid"] == pid, f"exec of pid {pid}")


def pinned_map_id(path):
    return bpftool_json("map", "show", "pinned", path)["id"]


def link_prog_maps(path):
    """The map ids of the program that the link pinned at path runs."""
    link = bpftool_json("link", "show", "pinned", path)
    prog = bpftool_json("prog", "show", "id", str(link["prog_id"]))
    return set(prog.get("map_ids", []))


def test_one_daemon_per_pin_root():
    d = Daemon(BINARY, "pin-lock", config="[Probes]\nProbes=exec\n")
    other = Daemon(BINARY, "pin-lock-2", pin_path=d.pin_path, config="[Probes]\nProbes=exec\n")
    try:
        d.start()
        r = subprocess.run([BINARY, "--config", other.config_path], capture_output=True, text=True, timeout=60)
        check(r.returncode != 0, "a second daemon on the same pin root is refused")
        check("serves" in r.stderr, f"the refusal says why: {r.stderr.strip()}")

        r = subprocess.run([BINARY, "--config", d.config_path, "--cleanup"], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode != 0, "--cleanup is refused while the daemon serves the pin root")
        for pin in ("events", "counters", "links/handle_exec"):
            check(os.path.exists(os.path.join(d.pin_path, pin)), f"{pin} is still pinned after the refused --cleanup")
        wait_execs(d, [run_true()])  # the daemon still serves

        check_eq(d.stop(), 0, "daemon exit status")
        r = subprocess.run([BINARY, "--config", d.config_path, "--cleanup"], capture_output=True, text=True,
                           timeout=60)
        check_eq(r.returncode, 0, f"--cleanup once the daemon is gone ({r.stderr.strip()})")
        check(not os.path.exists(d.pin_path), "--cleanup removed the pin root")

        # A daemon that crashed holds no lock: the next one starts.
        d.start()
        d.proc.kill()
        d.proc.wait()
        d.proc = None
        d.start()
    finally:
        d.stop()
        d.cleanup()
        other.cleanup()


def test_stale_link_removed_at_start():
    d = Daemon(BINARY, "stale-link", config="[Probes]\nProbes=exec\n")
    try:
        d.start()
        check_eq(d.stop(), 0, "daemon exit status")
        # A link pinned under a name this build has no program for, as an upgrade that renamed
        # a probe leaves it.
        stale = os.path.join(d.pin_path, "links", "handle_renamed_probe")
        link = bpftool_json("link", "show", "pinned", os.path.join(d.pin_path, "links", "handle_exec"))
        subprocess.run(["bpftool", "link", "pin", "id", str(link["id"]), stale], check=True)
        check(os.path.exists(stale), "the stale link is pinned")

        d.start()
        check(not os.path.exists(stale), "the stale link was unpinned at start")
        check(os.path.exists(os.path.join(d.pin_path, "links", "handle_exec")), "the current link stays")
        wait_execs(d, [run_true()])
    finally:
        d.stop()
        d.cleanup()


def test_replaced_counters_not_orphaned():
    d = Daemon(BINARY, "counters-replaced", config="[Probes]\nProbes=exec\n")
    counters = os.path.join(d.pin_path, "counters")
    link = os.path.join(d.pin_path, "links", "handle_exec")
    try:
        d.start()
        check_eq(d.stop(), 0, "daemon exit status")
        old = pinned_map_id(counters)
        check(old in link_prog_maps(link), "the link's program counts into the pinned counters")
        # The counters pin goes (removed by hand, or replaced as incompatible): the next daemon
        # makes a new one, and the pinned link's program still counts into the old map.
        os.unlink(counters)

        d.start()
        new = pinned_map_id(counters)
        check(new != old, "a new counters map was made")
        maps = link_prog_maps(link)
        check(new in maps and old not in maps,
              f"the exec link runs a program that counts into the new counters (maps {sorted(maps)}, new {new}, "
              f"old {old})")
        before, _ = producer_counters(d.pin_path, PRODUCER_EXEC)
        pids = [run_true() for _ in range(5)]
        wait_execs(d, pids)
        after, _ = producer_counters(d.pin_path, PRODUCER_EXEC)
        check(after - before >= len(pids), f"the pinned counters count our {len(pids)} execs ({before} -> {after})")
    finally:
        d.stop()
        d.cleanup()


if __name__ == "__main__":
    main(__file__)
