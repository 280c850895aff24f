#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Every record the kernel accepts is received or counted (issue 10): a third-party producer
built with producer.bpf.h emits at a steady rate and counts the records the kernel accepted,
independently of perfrelay's maps, while the daemon is stopped with SIGTERM and restarted 20
times (accepted = received, exactly; attempts = received + failures), and killed with SIGKILL
10 times (accepted = received + crash_lost; attempts = received + failures + crash_lost,
crash_lost > 0). Under ring overflow, and with a client too slow for its events, the
sequence-gap detector's seq_gaps equals the loss the producer's counters explain. Between daemons the idle flag makes the probes count attempts
as failures, reported apart; an incompatible
"received" pin is refused; a failed start loses nothing; perfrelay_emit() refuses records
larger than a perf sample can carry. Every figure comes from GetStats() (perfrelayctl stats --json)
or the pinned maps."""
import json
import os
import signal
import socket
import subprocess
import tempfile

import pytest

from prtest import Daemon, bpftool_json, check, check_eq, daemon_binary, main, producer_counters
from prtest import wait_for
from prtest.steady import SteadyProducer

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
PRODUCER = 310  # steady.bpf.c
STEADY_TYPE = 0x8310
PRODUCER_EXEC = 1
RATE = 10000    # records a second during the restarts
FLAT_OUT = 10000000  # more than the producer can make: it emits as fast as it can
IDLE_RESTARTS = 200
CPU = min(os.sched_getaffinity(0))



@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf, stats_bus):
    global BUS
    BUS = stats_bus


def Steady(pin_path):
    return SteadyProducer(BUILDDIR, pin_path, CPU)


def restarts(tag, sig, n, rate=RATE):
    """Runs the producer through n stops by `sig` and restarts; returns its final counts and the
    producer's GetStats() entry read by a last daemon after everything was drained."""
    d = Daemon(BINARY, tag, stdout=False, config="[Probes]\nProbes=none\n")
    prod = None
    try:
        d.start()
        prod = Steady(d.pin_path)
        prod.cmd(f"rate {rate}")
        for i in range(n):
            # Each daemon serves while records flow: stop it only once it has read some.
            wait_for(lambda: (BUS.producer(PRODUCER, listed=True) or {}).get("received_session", 0) >= RATE // 50,
                     f"daemon {i + 1} reads the producer's records", timeout=20)
            rc = d.stop(sig)
            check_eq(rc, 0 if sig == signal.SIGTERM else -sig, f"stop {i + 1} by {sig.name}")
            d.start()
            if i == 0:
                p = BUS.producer(PRODUCER, listed=True)
                check(p is not None and p["failures_downtime"] > 0,
                      f"after a restart the downtime's failures are reported apart: {p}")
                check_eq(p["failures_serving"] + p["failures_downtime"], p["failures"],
                         "failures = failures while serving + before")
        # The last attempts happen while a daemon serves: with 64-page rings at this rate every
        # one is read, so no failure or loss hides behind the last seq the detector saw.
        prod.cmd("rate 0")
        counts = prod.counts()
        prod.close()
        # A clean stop drains everything; the next daemon reads the lifetime totals from the
        # pinned maps, with nothing in flight.
        check_eq(d.stop(), 0, "last stop by SIGTERM")
        d.start()
        p = BUS.producer(PRODUCER, listed=True)
        check(p is not None, f"GetStats lists producer {PRODUCER}")
        check_eq(d.stop(), 0, "clean exit")
        print(f"{tag}: producer {counts}, GetStats {json.dumps(p, sort_keys=True)}")
        return counts, p
    finally:
        if prod:
            prod.close()
        d.cleanup()


def test_sigterm_restarts():
    counts, p = restarts("exact-term", signal.SIGTERM, 20)
    check(counts["accepted"] >= 20 * RATE // 50, f"every daemon read records: {counts}")
    check_eq(p["attempts"], counts["calls"], "attempts = the producer's own calls")
    check_eq(p["received"], counts["accepted"], "received (lifetime) = records the kernel accepted")
    check_eq(p["attempts"], p["received"] + p["failures"], "attempts = received + failures")
    check(p["failures"] > 0, "the producer emitted while no daemon ran: failures are expected")
    check_eq((p["crash_lost"], p["malformed"]), (0, 0), "no crash, nothing malformed")
    check_eq(p["seq_gaps"], p["failures"], "seq_gaps = failures: the detector sees every failed attempt")


def test_idle_hammered_restarts():
    """200 restarts by SIGTERM under a producer that emits flat out: between two daemons it
    counts failed attempts as fast as it can, and each start settles its accounts while it does
    (issue 24: a read between the two increments added a phantom record to crash_lost, for
    good). Nothing was killed, so nothing is crash_lost, and the invariant is exact."""
    counts, p = restarts("exact-idle", signal.SIGTERM, IDLE_RESTARTS, rate=FLAT_OUT)
    check_eq(p["crash_lost"], 0, "crash_lost after ordinary restarts")
    check_eq(p["attempts"], counts["calls"], "attempts = the producer's own calls")
    check_eq(p["received"], counts["accepted"], "received (lifetime) = records the kernel accepted")
    check_eq(p["attempts"], p["received"] + p["failures"], "attempts = received + failures")
    check(p["failures_downtime"] > IDLE_RESTARTS, f"the idle path was taken between the daemons: {p}")


def test_sigkill_restarts():
    counts, p = restarts("exact-kill", signal.SIGKILL, 10)
    check(counts["accepted"] >= 10 * RATE // 50, f"every daemon read records: {counts}")
    check_eq(p["attempts"], counts["calls"], "attempts = the producer's own calls")
    check(p["crash_lost"] > 0, f"records were in the rings of killed daemons: crash_lost {p['crash_lost']}")
    check_eq(p["received"] + p["crash_lost"], counts["accepted"],
             "received + crash_lost = records the kernel accepted")
    check_eq(p["attempts"], p["received"] + p["failures"] + p["crash_lost"],
             "attempts = received + failures + crash_lost")
    check_eq(p["malformed"], 0, "nothing malformed")
    check_eq(p["seq_gaps"], p["failures"] + p["crash_lost"], "seq_gaps = failures + crash_lost")


def test_seq_gaps_under_overflow():
    d = Daemon(BINARY, "exact-overflow", stdout=False, config="[Probes]\nProbes=none\n[Ring]\nPagesPerCpu=1\n")
    prod = None
    try:
        d.start()
        prod = Steady(d.pin_path)
        # The readers run at ReaderNice=-10 with a short slice and may keep up with a burst even
        # on a one-page ring: stopped for the burst, they cannot, and the ring overflows for sure.
        d.proc.send_signal(signal.SIGSTOP)
        try:
            prod.cmd("burst 200000")
        finally:
            d.proc.send_signal(signal.SIGCONT)

        def settled():
            p = BUS.producer(PRODUCER, listed=True)
            return p if p and p["attempts"] == p["received"] + p["failures"] else None
        p = wait_for(settled, "the readers read what the kernel accepted", timeout=20)
        check(p["failures_serving"] > 0, f"a one-page ring overflowed: {p}")
        # One more record into the emptied ring: the detector learns the last seq, so every
        # failed attempt before it is a gap.
        prod.cmd("burst 1")
        p = wait_for(lambda: (lambda q: q if q["received"] == p["received"] + 1 else None)(BUS.producer(PRODUCER, listed=True)),
                     "the last record", timeout=10)
        counts = prod.counts()
        check_eq(p["attempts"], counts["calls"], "attempts = the producer's own calls")
        check_eq(p["received"], counts["accepted"], "received = records the kernel accepted")
        check_eq((p["crash_lost"], p["malformed"]), (0, 0), "no crash, nothing malformed")
        check_eq(p["seq_gaps"], p["failures"], "seq_gaps = failures, the loss the producer's counters explain")
        st = BUS.stats()
        print(f"overflow: producer {counts}, GetStats {json.dumps(p, sort_keys=True)}, ring_lost {st['ring_lost']}")
        check(0 < st["ring_lost"] <= p["failures"], f"PERF_RECORD_LOST {st['ring_lost']} within the failures")
        prod.close()
        check_eq(d.stop(), 0, "clean exit")
    finally:
        if prod:
            prod.close()
        d.cleanup()


def test_seq_gaps_with_a_slow_client():
    """A client that does not read loses its own events, counted for it, and never the ring's:
    the detector's seq_gaps stays equal to what the producer's counters explain, and once the
    client is gone its offered = sent + dropped exactly."""
    d = Daemon(BINARY, "exact-slow", stdout=False,
               config="[Probes]\nProbes=none\n[Socket]\nClientQueueBytes=64K\n")
    prod = client = None
    try:
        d.start()
        client = socket.socket(socket.AF_UNIX)
        client.connect(d.socket_path)
        client.sendall(json.dumps({"subscribe": {"types": [STEADY_TYPE]}}).encode() + b"\n")
        check(client.makefile("rb").readline().startswith(b'{"type":"hello"'), "the slow client subscribes")
        prod = Steady(d.pin_path)
        prod.cmd("rate 20000")
        # Far more than 64 KiB of queue and a socket buffer hold: the client must lose events.
        p = wait_for(lambda: (lambda q: q if q and q["received_session"] >= 30000 else None)(BUS.producer(PRODUCER, listed=True)),
                     "the daemon reads 30000 records", timeout=30)
        prod.cmd("rate 0")
        counts = prod.counts()
        p = wait_for(lambda: (lambda q: q if q["received"] + q["failures"] == q["attempts"] else None)(BUS.producer(PRODUCER, listed=True)),
                     "the readers read what the kernel accepted", timeout=10)
        check_eq(p["attempts"], counts["calls"], "attempts = the producer's own calls")
        check_eq(p["received"], counts["accepted"], "received = records the kernel accepted")
        check_eq(p["seq_gaps"], p["failures"], "seq_gaps = failures: a slow client costs the ring nothing")
        st = BUS.stats()
        check(st["clients"]["dropped"] > 0, f"the slow client lost events, counted for it: {st['clients']}")
        client.close()
        client = None
        st = wait_for(lambda: (lambda s: s if s["clients"]["connected"] == 0 else None)(BUS.stats()),
                      "the slow client is gone", timeout=10)
        c = st["clients"]
        print(f"slow client: producer {json.dumps(p, sort_keys=True)}, clients {c}")
        check_eq(c["offered"], p["received_session"], "the client was offered every record of the type")
        check_eq(c["offered"], c["delivered"] + c["dropped"], "offered = sent + dropped once the client is gone")
        prod.close()
        check_eq(d.stop(), 0, "clean exit")
    finally:
        if client:
            client.close()
        if prod:
            prod.close()
        d.cleanup()


def idle_flag(pin_path):
    out = bpftool_json("map", "lookup", "pinned", f"{pin_path}/idle", "key", "0", "0", "0", "0")
    v = out["value"]
    return v if isinstance(v, int) else int.from_bytes(bytes(int(b, 16) for b in v), "little")


def test_downtime_is_counted_cheaply():
    """Between daemons the idle flag is set and the built-in probes count each attempt as a
    failure without building a record; the next daemon reports those failures apart."""
    d = Daemon(BINARY, "exact-idle", stdout=False, config="[Probes]\nProbes=exec\n")
    try:
        d.start()
        check_eq(idle_flag(d.pin_path), 0, "idle flag while a daemon serves")
        check_eq(d.stop(), 0, "clean exit")
        check_eq(idle_flag(d.pin_path), 1, "idle flag after the daemon stopped")
        a0, f0 = producer_counters(d.pin_path, PRODUCER_EXEC)
        for _ in range(20):
            subprocess.run(["/bin/true"], check=True)
        a1, f1 = producer_counters(d.pin_path, PRODUCER_EXEC)
        check(a1 - a0 >= 20, f"the exec probe counted our 20 execs as attempts: {a1 - a0}")
        check_eq(f1 - f0, a1 - a0, "every attempt while no daemon serves is a failure")
        d.start()
        p = next(p for p in BUS.stats()["producers"] if p["id"] == PRODUCER_EXEC)
        check(p["failures_downtime"] >= f1, f"GetStats: failures before this daemon ({p['failures_downtime']}) "
              f"include the downtime's {f1 - f0}")
        check_eq(p["failures_downtime"] + p["failures_serving"], p["failures"], "failures split in two")
        check_eq(d.stop(), 0, "clean exit")
    finally:
        d.cleanup()


def test_failed_start_loses_nothing():
    """A start that fails after its rings were installed and its readers started (here: the
    socket cannot be made) quiesces like a stop: records the kernel accepted meanwhile are read,
    none is lost uncounted, and the idle flag is left set."""
    bad = tempfile.mkdtemp(prefix="perfrelay-exact-fail-")
    with open(os.path.join(bad, "file"), "w"):
        pass
    d = Daemon(BINARY, "exact-fail", stdout=False, config="[Probes]\nProbes=none\n")
    bad_conf = os.path.join(bad, "perfrelay.conf")
    with open(bad_conf, "w") as f:
        f.write(f"[Daemon]\nPinPath={d.pin_path}\n[Socket]\nSocketPath={bad}/file/events.sock\n"
                "[Probes]\nProbes=none\n[History]\nHistory=no\n")
    prod = None
    try:
        d.start()
        prod = Steady(d.pin_path)
        prod.cmd(f"rate {RATE * 5}")
        check_eq(d.stop(), 0, "clean exit")
        for i in range(5):
            r = subprocess.run([BINARY, "--config", bad_conf], capture_output=True, text=True, timeout=60)
            check(r.returncode != 0 and "Failed to set up the event socket" in r.stderr,
                  f"start {i + 1} fails for its socket: {r.stderr[-300:]}")
            check_eq(idle_flag(d.pin_path), 1, f"failed start {i + 1} left the idle flag set")
        d.start()
        prod.cmd("rate 0")
        counts = prod.counts()
        prod.close()
        check_eq(d.stop(), 0, "clean exit")
        d.start()
        p = BUS.producer(PRODUCER, listed=True)
        check_eq(d.stop(), 0, "clean exit")
        print(f"failed starts: producer {counts}, GetStats {json.dumps(p, sort_keys=True)}")
        check_eq(p["attempts"], counts["calls"], "attempts = the producer's own calls")
        check_eq(p["crash_lost"], 0, "nothing was left unread in the failed starts' rings")
        check_eq(p["received"], counts["accepted"], "received = records the kernel accepted")
        check_eq(p["attempts"], p["received"] + p["failures"], "attempts = received + failures")
    finally:
        if prod:
            prod.close()
        d.cleanup()
        subprocess.run(["rm", "-rf", bad])


def test_ledger_made_beside_old_counters():
    """A pin root from a version without the "received" ledger (here: its pin removed): the new
    ledger takes the old history as received, so it shows up neither as crash loss nor as gaps,
    and the equation holds from then on."""
    d = Daemon(BINARY, "exact-adopt", stdout=False, config="[Probes]\nProbes=none\n")
    prod = None
    try:
        d.start()
        prod = Steady(d.pin_path)
        prod.cmd("burst 3000")
        wait_for(lambda: (BUS.producer(PRODUCER, listed=True) or {}).get("received", 0) == prod.counts()["accepted"],
                 "the daemon read the burst", timeout=10)
        check_eq(d.stop(), 0, "clean exit")
        os.unlink(f"{d.pin_path}/received")
        prod.cmd("burst 500")  # while no daemon serves: failures
        d.start()
        prod.cmd("burst 300")
        counts = prod.counts()
        p = wait_for(lambda: (lambda q: q if q and q["received"] == counts["accepted"] else None)(BUS.producer(PRODUCER, listed=True)),
                     "the daemon read the last burst", timeout=10)
        check_eq(p["attempts"], counts["calls"], "attempts = the producer's own calls")
        check_eq(p["crash_lost"], 0, "the old history is not crash loss")
        check_eq(p["attempts"], p["received"] + p["failures"], "attempts = received + failures")
        check_eq(p["seq_gaps"], p["failures"], "seq_gaps = failures")
        check(p["failures"] >= 500, f"the downtime's failures are counted: {p['failures']}")
        prod.close()
        check_eq(d.stop(), 0, "clean exit")
    finally:
        if prod:
            prod.close()
        d.cleanup()


def test_emit_size_limit():
    """perfrelay_emit() takes the largest record a perf sample can carry (65516 bytes) and
    refuses a larger one, counting the attempt and its failure."""
    d = Daemon(BINARY, "exact-size", stdout=False, config="[Probes]\nProbes=none\n")
    prod = None
    try:
        d.start()
        prod = Steady(d.pin_path)
        prod.cmd("big 65516")
        counts = prod.counts()
        check_eq(counts, {"calls": 1, "accepted": 1}, "a 65516-byte record is accepted")
        p = wait_for(lambda: (lambda q: q if q and q["received"] == 1 else None)(BUS.producer(PRODUCER, listed=True)),
                     "the daemon reads the 65516-byte record", timeout=10)
        check_eq((p["attempts"], p["failures"], p["malformed"]), (1, 0, 0), "one attempt, received whole")
        prod.cmd("big 65517")
        check_eq(prod.counts(), {"calls": 2, "accepted": 1}, "a 65517-byte record is refused")
        p = BUS.producer(PRODUCER, listed=True)
        check_eq((p["attempts"], p["failures"], p["received"]), (2, 1, 1), "the refusal counts as a failure")
        prod.close()
        check_eq(d.stop(), 0, "clean exit")
    finally:
        if prod:
            prod.close()
        d.cleanup()


def test_incompatible_received_pin():
    d = Daemon(BINARY, "exact-pin", stdout=False, config="[Probes]\nProbes=none\n")
    try:
        os.makedirs(d.pin_path, exist_ok=True)
        subprocess.run(["bpftool", "map", "create", f"{d.pin_path}/received", "type", "array", "key", "4",
                        "value", "8", "entries", "1", "name", "received"], check=True)
        r = subprocess.run([BINARY, "--config", d.config_path], capture_output=True, text=True, timeout=60)
        check(r.returncode != 0, "an incompatible received pin stops the start")
        check(f"Pinned map {d.pin_path}/received is incompatible" in r.stderr and "value_size is 8, expected 48"
              in r.stderr, f"the error names the pin and the difference: {r.stderr[-400:]}")
    finally:
        d.cleanup()


if __name__ == "__main__":
    main(__file__)
