#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Nothing is lost uncounted: under deliberate overload (one-page rings, clients that do not read)
the benchmark producer's attempts equal what the readers received plus the output failures,
PERF_RECORD_LOST never exceeds the failures, and every client's offered = sent + dropped, each
figure read from GetStats() (perfrelayctl stats --json) and checked against a second,
independent source."""
import json
import os
import struct
import subprocess

import pytest

from prtest import check, check_eq, Daemon, daemon_binary, Failure, main, SocketClient, wait_for
from prtest import event_abi

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


class SlowClient(SocketClient):
    """A subscriber that reads its hello and then nothing until drain(), so that its queue
    overflows; drain() then reads to the end of what the daemon owes it, JSON lines or binary
    frames, counting events and reported losses."""

    def __init__(self, path, fmt):
        super().__init__(path, {"subscribe": {"types": ["bench"]}, "format": fmt}, read=False, rcvbuf=4096)
        self.fmt = fmt
        self.id = self.hello()["client_id"]
        self.consumed = self.data.index(b"\n") + 1
        self.events = 0
        self.lost = 0

    def _consume(self):
        with self.cond:
            buf = bytes(self.data[self.consumed:])
        if self.fmt == "json":
            end = buf.rfind(b"\n") + 1
            for line in buf[:end].split(b"\n")[:-1]:
                ev = json.loads(line)
                if ev["type"] == "lost":
                    self.lost += ev["count"]
                else:
                    check_eq(ev["type"], "bench", "event type")
                    self.events += 1
            self.consumed += end
            return
        pos = 0
        while len(buf) - pos >= 4:
            (length,) = struct.unpack_from("<I", buf, pos)
            if len(buf) - pos < 4 + length:
                break
            rec = buf[pos + 4:pos + 4 + length]
            pos += 4 + length
            magic, _, _, typ, size, *_ = HDR.unpack_from(rec)
            check_eq((magic, size), (0x5250, length), "frame header")
            if typ == TYPE_LOST:
                self.lost += struct.unpack_from("<Q", rec, HDR.size)[0]
            else:
                self.events += 1
        self.consumed += pos

    def drain(self, expected, timeout=60):
        """Reads until events + reported losses account for `expected` records; never sleeps:
        the daemon reports the last losses when room returns (at the latest FlushIntervalMs)."""
        self.start()

        def accounted():
            self._consume()
            if self.eof and self.events + self.lost < expected:
                raise Failure(f"client {self.id}: the daemon closed the stream")
            return self.events + self.lost >= expected

        wait_for(accounted, f"client {self.id} ({self.fmt}): events + lost reach {expected}", timeout)
        check_eq(self.events + self.lost, expected, f"client {self.id}: events + lost")


def fence(path):
    """A connection whose hello proves the daemon's main thread attached every subscriber whose
    hello came before: it serves connections one callback at a time."""
    c = SocketClient(path, {"subscribe": {"types": ["exec"]}})
    c.hello()
    c.close()


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
