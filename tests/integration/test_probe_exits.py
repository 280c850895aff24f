#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The exit probe reports a process once, when its last thread dies, with the status wait()
reports: not when a non-leader thread's execve() replaces the old leader (de_thread), and not
when the leader leaves with pthread_exit() while other threads run."""
import os
import subprocess
import time

import pytest

from prtest import Daemon, Failure, check, check_eq, daemon_binary, main

BINARY = daemon_binary()
# exit-helper is built beside this test: <build>/tests/integration/exit-helper.
HELPER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(BINARY))), "tests", "integration",
                      "exit-helper")

if not os.access(HELPER, os.X_OK):
    raise Failure(f"{HELPER} is missing (meson compile builds it)")


@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf):
    pass

# Every process of a case runs on one CPU, and the fence after it too: its records then share
# one ring, which the reader delivers in order, so once the fence's exit is seen every exit the
# case's process could have produced has been seen as well.
CPU = min(os.sched_getaffinity(0))


def pin_to_cpu():
    os.sched_setaffinity(0, {CPU})


def run_case(d, mode, status):
    p = subprocess.Popen([HELPER, mode, str(status)], preexec_fn=pin_to_cpu)
    rc = p.wait(30)
    fence = subprocess.Popen([HELPER, "exit", "0"], preexec_fn=pin_to_cpu)
    check_eq(fence.wait(30), 0, "fence exit status")
    d.wait_event(lambda e: e["type"] == "exit" and e["pid"] == fence.pid, f"the fence's exit ({mode})")
    exits = [e for e in d.events if e["type"] == "exit" and e["pid"] == p.pid]
    return rc, exits


def check_one_exit(mode, rc, exits, status):
    check_eq(rc, status, f"{mode}: the helper's exit status (wait())")
    check_eq(len(exits), 1, f"{mode}: exit events for the process ({exits})")
    check_eq((exits[0]["exit_code"], exits[0]["signal"]), (status, 0), f"{mode}: reported status")


def test_dethread_exec():
    d = Daemon(BINARY, "exits-dethread", config="[Probes]\nProbes=exec exit\n")
    try:
        d.start()
        rc, exits = run_case(d, "dethread", 37)
        check_one_exit("dethread", rc, exits, 37)
        # The exec itself is reported under the process id the execing thread took over.
        pid = exits[0]["pid"]
        check(any(e["type"] == "exec" and e["pid"] == pid for e in d.events), "the de_thread exec was reported")
    finally:
        d.stop()
        d.cleanup()


def test_leader_pthread_exit():
    d = Daemon(BINARY, "exits-leader", config="[Probes]\nProbes=exit\n")
    try:
        d.start()
        # The group ends with exit_group(41) from the surviving thread.
        rc, exits = run_case(d, "leader-exit", 41)
        check_one_exit("leader-exit", rc, exits, 41)
        # The group ends with a plain thread exit of the last thread.
        rc, exits = run_case(d, "leader-exit-thread", 43)
        check_one_exit("leader-exit-thread", rc, exits, rc)
    finally:
        d.stop()
        d.cleanup()


def test_killed_multithreaded_process():
    d = Daemon(BINARY, "exits-killed", config="[Probes]\nProbes=exit\n")
    try:
        d.start()
        p = subprocess.Popen([HELPER, "leader-exit-park", "0"], preexec_fn=pin_to_cpu)
        # Waits for the leader to be gone, so the survivor is the one the signal kills.
        task = f"/proc/{p.pid}/task/{p.pid}/stat"
        while True:
            with open(task) as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    break
            time.sleep(0.001)  # polls for the state; nothing races with it
        p.kill()
        check_eq(p.wait(30), -9, "the process died of SIGKILL")
        fence = subprocess.Popen([HELPER, "exit", "0"], preexec_fn=pin_to_cpu)
        fence.wait(30)
        d.wait_event(lambda e: e["type"] == "exit" and e["pid"] == fence.pid, "the fence's exit")
        exits = [e for e in d.events if e["type"] == "exit" and e["pid"] == p.pid]
        check_eq(len(exits), 1, f"exit events for the killed process ({exits})")
        check_eq((exits[0]["exit_code"], exits[0]["signal"]), (0, 9), "reported status")
    finally:
        d.stop()
        d.cleanup()


if __name__ == "__main__":
    main(__file__)
