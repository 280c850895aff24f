#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A syscall the open probe cannot hold until it returns (its pending map is full) is counted as
an attempt and a failure of the open producer, so that attempts = received + failures holds
exactly for it."""
import os
import signal
import platform
import threading
import time

import pytest

from prtest import bpftool_json, check, Daemon, daemon_binary, Failure, link_ids, main, producer_counters, skip

BINARY = daemon_binary()
PRODUCER_OPEN = 4
PENDING = 16      # PendingSyscalls= of the test daemon
BLOCKED = 48      # threads parked in openat() at once: more than the map holds
OPENAT = {"x86_64": 257, "aarch64": 56}.get(platform.machine())

if OPENAT is None:
    skip(f"the openat syscall number of {platform.machine()} is not known to this test")


@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf):
    pass


def in_openat(tid):
    with open(f"/proc/self/task/{tid}/syscall") as f:
        return f.read().split()[0] == str(OPENAT)


def link_exists(link_id):
    try:
        return bpftool_json("link", "show", "id", str(link_id))["id"] == link_id
    except Failure:
        return False


def received_open(d):
    """Open records the daemon received: events on its standard output plus those it reported
    lost there (the JSON "lost" lines)."""
    with d.cond:
        events = sum(1 for e in d.events if e["type"] == "open" and e["producer"] == PRODUCER_OPEN)
        lost = sum(e["count"] for e in d.events if e["type"] == "lost")
    return events + lost


def test_full_pending_map_is_counted():
    d = Daemon(BINARY, "pending", config=f"[Probes]\nProbes=open\nPendingSyscalls={PENDING}\n")
    fifo = os.path.join(d.dir, "fifo")
    try:
        d.start()
        os.mkfifo(fifo)
        tids, fds, lock = [], [], threading.Lock()

        def reader():
            with lock:
                tids.append(threading.get_native_id())
            fd = os.open(fifo, os.O_RDONLY)  # blocks in openat() until a writer opens
            with lock:
                fds.append(fd)

        threads = [threading.Thread(target=reader) for _ in range(BLOCKED)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while True:
            with lock:
                ready = len(tids) == BLOCKED and all(in_openat(t) for t in tids)
            if ready:
                break
            if time.monotonic() > deadline:
                raise Failure("the reader threads did not all block in openat()")
            time.sleep(0.01)  # polls the threads' state; nothing races with it
        # At most PENDING of them hold an entry: the others' records cannot be made.
        w = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        for t in threads:
            t.join(30)
        for fd in fds + [w]:
            os.close(fd)

        # Detach the probe (reload with Probes=none) and wait for its links to be gone: then
        # no attempt is added, and the counts become final once the rings are drained.
        ids = list(link_ids(d.pin_path, "handle_open").values())
        check(len(ids) > 0, "the open probe's links are pinned")
        d.write_config(f"[Probes]\nProbes=none\nPendingSyscalls={PENDING}\n")
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while any(link_exists(i) for i in ids):
            if time.monotonic() > deadline:
                raise Failure("the open probe was not detached after the reload")
            time.sleep(0.01)

        deadline = time.monotonic() + 20
        while True:
            attempts, failures = producer_counters(d.pin_path, PRODUCER_OPEN)
            received = received_open(d)
            if attempts == received + failures:
                break
            if time.monotonic() > deadline:
                raise Failure(f"open producer: attempts {attempts} != received {received} + failures {failures}")
            time.sleep(0.05)  # the last records are on their way through the readers' flush
        print(f"open producer: {attempts} attempts, {received} received, {failures} failures")
        check(failures >= BLOCKED - PENDING,
              f"at least {BLOCKED - PENDING} opens found the pending map full: {failures} failures counted")
        ours = [e for e in d.events if e["type"] == "open" and e["pid"] == os.getpid() and e["path"] == fifo
                and e["flags"] & 3 == os.O_RDONLY]
        check(0 < len(ours) <= PENDING, f"{len(ours)} of our blocked opens were reported (at most {PENDING})")
    finally:
        d.stop()
        d.cleanup()


if __name__ == "__main__":
    main(__file__)
