#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Nothing is lost uncounted: under deliberate overload (one-page rings, clients that do not read)
the benchmark producer's attempts equal what the readers received plus the output failures,
PERF_RECORD_LOST never exceeds the failures, and every client's offered = sent + dropped, each
figure read from GetStats() (perfrelayctl stats --json) and checked against a second,
independent source."""
import json
import os
import socket
import struct
import subprocess
import time

import pytest

from prtest import Daemon, Failure, check, check_eq, daemon_binary, main
import event_abi

BINARY = daemon_binary()
# perfrelay-bench is built beside the daemon: <build>/bench/perfrelay-bench.
BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(BINARY))), "bench", "perfrelay-bench")
PRODUCER = event_abi.PRODUCER_BENCH
TYPE_LOST = 0x7FFF
HDR = struct.Struct("<HBBHHIIQQ")  # struct perfrelay_hdr

if not os.access(BENCH, os.X_OK):
    raise Failure(f"{BENCH} is missing (meson compile builds it with the daemon)")


@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf, stats_bus):
    global BUS
    BUS = stats_bus


class SlowClient:
    """A subscriber that reads its hello and then nothing until told to, so that its queue
    overflows; afterwards it reads to the end of what the daemon owes it."""

    def __init__(self, path, fmt):
        self.fmt = fmt
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # A small receive buffer: the daemon's queue for us fills sooner.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(path)
        self.sock.sendall(json.dumps({"subscribe": {"types": ["bench"]}, "format": fmt}).encode() + b"\n")
        self.buf = b""
        hello = json.loads(self._line(10))
        check_eq(hello["type"], "hello", "first line")
        self.id = hello["client_id"]
        self.events = 0
        self.lost = 0

    def _fill(self, deadline):
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = self.sock.recv(1 << 16)
        except socket.timeout:
            return
        if not data:
            raise Failure(f"client {self.id}: the daemon closed the stream")
        self.buf += data

    def _line(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            if time.monotonic() > deadline:
                raise Failure("no hello line")
            self._fill(deadline)
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def _consume(self):
        if self.fmt == "json":
            *lines, self.buf = self.buf.split(b"\n")
            for line in lines:
                ev = json.loads(line)
                if ev["type"] == "lost":
                    self.lost += ev["count"]
                else:
                    check_eq(ev["type"], "bench", "event type")
                    self.events += 1
            return
        while len(self.buf) >= 4:
            (length,) = struct.unpack_from("<I", self.buf)
            if len(self.buf) < 4 + length:
                break
            rec = self.buf[4:4 + length]
            self.buf = self.buf[4 + length:]
            magic, _, _, typ, size, *_ = HDR.unpack_from(rec)
            check_eq((magic, size), (0x5250, length), "frame header")
            if typ == TYPE_LOST:
                self.lost += struct.unpack_from("<Q", rec, HDR.size)[0]
            else:
                self.events += 1

    def drain(self, expected, timeout=60):
        """Reads until events + reported losses account for `expected` records; never sleeps:
        the daemon reports the last losses when room returns (at the latest FlushIntervalMs)."""
        deadline = time.monotonic() + timeout
        self._consume()
        while self.events + self.lost < expected:
            if time.monotonic() > deadline:
                raise Failure(f"client {self.id} ({self.fmt}): {self.events} events + {self.lost} lost of "
                              f"{expected} within {timeout}s")
            self._fill(deadline)
            self._consume()
        check_eq(self.events + self.lost, expected, f"client {self.id}: events + lost")

    def close(self):
        self.sock.close()


def fence(path):
    """A connection whose hello proves the daemon's main thread attached every subscriber whose
    hello came before: it serves connections one callback at a time."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(b'{"subscribe":{"types":["exec"]}}\n')
    s.settimeout(10)
    data = b""
    while b"\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            raise Failure("fence connection closed without a hello")
        data += chunk
    s.close()


def test_accounting_under_overload():
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    d = Daemon(BINARY, "accounting", stdout=False,
               config="[Ring]\nPagesPerCpu=1\n[Probes]\nProbes=none\n[Socket]\nClientQueueBytes=64K\n")
    try:
        d.start()
        clients = [SlowClient(d.socket_path, "json"), SlowClient(d.socket_path, "binary")]
        fence(d.socket_path)

        # The load: every CPU emits as fast as it can into one-page rings. perfrelay-bench exits
        # (and so detaches the producer) before the counts are compared: they are final.
        r = subprocess.run([BENCH, "--mode", "daemon", "--pin-root", d.pin_path, "--clients", "0",
                            "--duration", "0.5", "--settle-ms", "0", "--producer-cpus", cpus,
                            "--consumer-cpu", "-1"], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise Failure(f"perfrelay-bench failed ({r.returncode}): {r.stderr}")
        load = json.loads(r.stdout)
        attempts, failures = load["attempts"], load["failures"]
        check(attempts > 0, "the producer emitted")
        check(failures > 0, f"one-page rings overflowed ({attempts} attempts, no failure): no overload")

        # Each client must account for every record the readers received: attempts - failures.
        for c in clients:
            c.drain(attempts - failures)
        # Both clients have read everything the daemon owed them: the counters are final.
        st = BUS.stats()
        p = next((p for p in st["producers"] if p["id"] == PRODUCER), None)
        check(p is not None, f"GetStats lists producer {PRODUCER}")
        check_eq((p["attempts"], p["failures"]), (attempts, failures),
                 "GetStats: the producer's attempts and failures, as the producer counted them")
        check_eq(p["malformed"], 0, "malformed benchmark records")
        check_eq(p["crash_lost"], 0, "no daemon died")
        check_eq(p["received"], attempts - failures, "received by readers = attempts - output failures")
        check_eq(p["received_session"], p["received"], "a fresh pin root: this daemon received them all")
        ring_lost = sum(c["lost"] for c in st["cpus"])
        check_eq(ring_lost, st["ring_lost"], "ring_lost is the sum over CPUs")
        check(0 < ring_lost <= failures,
              f"PERF_RECORD_LOST total {ring_lost} must be positive and at most the {failures} failures")
        listed = {c["id"]: c for c in st["client_list"]}
        for c in clients:
            cs = listed.get(c.id)
            check(cs is not None, f"GetStats lists client {c.id}")
            check_eq(cs["offered"], p["received"], f"client {c.id} ({c.fmt}): offered = received by readers")
            check_eq(cs["offered"], cs["sent"] + cs["dropped"], f"client {c.id} ({c.fmt}): offered = sent + dropped")
            check_eq(c.events, cs["sent"], f"client {c.id} ({c.fmt}): events read = sent")
            check_eq(c.lost, cs["dropped"], f"client {c.id} ({c.fmt}): lost notices = dropped")
            check(cs["dropped"] > 0, f"client {c.id} ({c.fmt}) did not read and must have lost events")
        for c in clients:
            c.close()
        check_eq(d.stop(), 0, "daemon exit status")
    finally:
        d.cleanup()


if __name__ == "__main__":
    main(__file__)
