#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The flight recorder (docs/recorder.md): commands run, then a snapshot (D-Bus Snapshot()
through perfrelayctl snapshot) holds their exec and exit events, oldest first with correct
fields and nothing newer than the snapshot; a recorder filled past its size keeps exactly the
newest records and says how many it overwrote; only root and ControlGroups= members may take one;
the live stream's accounting is untouched."""
import base64
import json
import os
import signal
import struct
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from prtest import UnitCgroup, bpftool_json, cgroup2_mount, check, check_eq, daemon_binary, delegate_cgroup, main
from prtest import wait_for
from prtest.steady import STEADY_TYPE, SteadyProducer, payload_checks_out
from prtest.busclient import BusPeer

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
EXAMPLE = os.path.join(BUILDDIR, "examples", "example-producer")
STEADY = os.path.join(BUILDDIR, "tests", "integration", "steady-producer")
STEADY_PRODUCER = 310
CPU = min(os.sched_getaffinity(0))



@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, stats_bus):
    global bus
    bus = stats_bus

    def daemon(tag, config=""):
        # Every type recorded: the snapshots here look for opens, which RecorderTypes= leaves
        # out by default (test_demand.py checks the default).
        return make_daemon(tag, config="[Recorder]\nRecorderTypes=all\n" + config, stdout=False, start=False)

    d_full = daemon("recorder")
    d_small = daemon("recorder-small", "[Probes]\nProbes=none\n[Recorder]\nRecorderPagesPerCpu=1\n")
    d_held = daemon("recorder-held", "[Probes]\nProbes=none\n[Recorder]\nRecorderPagesPerCpu=1\n")
    d_busy = daemon("recorder-busy", "[Probes]\nProbes=none\n")
    d_off = daemon("recorder-off", "[Recorder]\nRecorder=no\n")
    d_crash = daemon("recorder-crash")
    d_tear = daemon("recorder-tear", "[Probes]\nProbes=none\n[Recorder]\nRecorderPagesPerCpu=16\n")
    d_written = daemon("recorder-written", "[Probes]\nProbes=none\n[Recorder]\nRecorderPagesPerCpu=16\n")
    # Records only of execs, and room for minutes of them: the failed unit's exec outlives the test's own.
    d_flood = daemon("recorder-flood", "[Probes]\nProbes=exec\n[Recorder]\nRecorderPagesPerCpu=1024\n")
    return {"d_full": d_full, "d_small": d_small, "d_busy": d_busy, "d_off": d_off, "d_crash": d_crash, "d_tear": d_tear, "d_written": d_written, "d_flood": d_flood, "d_held": d_held}


@pytest.fixture(scope="module", name="d_full")
def _fixture_d_full(_setup):
    return _setup["d_full"]


@pytest.fixture(scope="module", name="d_small")
def _fixture_d_small(_setup):
    return _setup["d_small"]


@pytest.fixture(scope="module", name="d_busy")
def _fixture_d_busy(_setup):
    return _setup["d_busy"]


@pytest.fixture(scope="module", name="d_off")
def _fixture_d_off(_setup):
    return _setup["d_off"]


@pytest.fixture(scope="module", name="d_crash")
def _fixture_d_crash(_setup):
    return _setup["d_crash"]


@pytest.fixture(scope="module", name="d_tear")
def _fixture_d_tear(_setup):
    return _setup["d_tear"]


@pytest.fixture(scope="module", name="d_written")
def _fixture_d_written(_setup):
    return _setup["d_written"]


@pytest.fixture(scope="module", name="d_flood")
def _fixture_d_flood(_setup):
    return _setup["d_flood"]


@pytest.fixture(scope="module", name="d_held")
def _fixture_d_held(_setup):
    return _setup["d_held"]
TEAR_SNAPSHOTS = 200


def snapshot(*args, user=None):
    cmd = [bus.ctl, "snapshot", "--json", *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return r, [json.loads(line) for line in r.stdout.splitlines()] if r.returncode == 0 else []


def test_commands_then_snapshot(d_full):
    d = d_full
    d.start()
    marker = f"perfrelay-rec-{uuid.uuid4().hex[:8]}"
    pids = []
    for i in range(3):
        p = subprocess.run(["/bin/sh", "-c", f"exec 3</etc/hostname; exit {i + 3}", marker], timeout=30)
        check_eq(p.returncode, i + 3, "the marker command ran")
    # The probes' records reach the recorder when they are emitted: nothing to wait for but
    # the commands themselves, which have exited.
    r, lines = snapshot()
    after = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    check_eq(r.returncode, 0, f"perfrelayctl snapshot (stderr: {r.stderr.strip()})")
    summary = lines[-1]
    events = lines[:-1]
    check_eq(summary["type"], "snapshot", "the last line is the summary")
    check_eq(summary["events"], len(events), "the summary counts the lines")
    ts = [e["ts"] for e in events]
    check_eq(ts, sorted(ts), "events oldest first")
    check(all(t <= after for t in ts), "nothing newer than the snapshot")
    execs = [e for e in events if e["type"] == "exec" and marker in e.get("argv", [])]
    check_eq(len(execs), 3, f"the three marker execs are in the snapshot ({len(events)} events)")
    for i, e in enumerate(execs):
        check_eq((e["filename"], e["argv"]),
                 ("/bin/sh", ["/bin/sh", "-c", f"exec 3</etc/hostname; exit {i + 3}", marker]), "the exec's fields")
        pids.append(e["pid"])
    exits = {e["pid"]: e for e in events if e["type"] == "exit" and e["pid"] in pids}
    check_eq(sorted(exits), sorted(pids), "and their exits")
    opens = {e["pid"]: e for e in events if e["type"] == "open" and e["pid"] in pids and e["path"] == "/etc/hostname"}
    check_eq(sorted(opens), sorted(pids), "and each one's open of /etc/hostname")
    for i, pid in enumerate(pids):
        check_eq(exits[pid]["exit_code"], i + 3, "the exit's code")
        check(execs[i]["ts"] < opens[pid]["ts"] < exits[pid]["ts"], "exec, open, exit in that order")
        check(opens[pid]["result"] >= 0, "the open succeeded")
    for c in summary["cpus"]:
        check(c["pause_ns"] < 50_000_000, f"CPU {c['cpu']} paused {c['pause_ns']} ns")
        check_eq(c["records"] + c["overwritten"], c["written"], f"CPU {c['cpu']}: written = kept + overwritten")

    # Filters: only the marker's process; --since bounds the window.
    r, lines = snapshot("--pid", str(pids[0]))
    check_eq(r.returncode, 0, f"snapshot --pid (stderr: {r.stderr.strip()})")
    check(lines[:-1] and all(e.get("pid") == pids[0] for e in lines[:-1]), "only that process's events")
    check_eq({e["type"] for e in lines[:-1]} >= {"exec", "exit"}, True, "its exec and exit")

    # Not for everyone: a snapshot shows every user's events.
    os.chmod(bus.dir, 0o755)  # the private bus's socket, reachable for nobody too
    r, _ = snapshot(user="65534")
    check(r.returncode != 0 and "ControlGroups" in r.stderr, f"nobody is refused: {r.stderr.strip()}")
    st = bus.stats()["recorder"]
    check(st["snapshots"] >= 2, f"snapshots counted: {st}")
    check_eq(st["failed"], 0, "no recorder output failed")
    d.stop()


def test_unit_of_removed_cgroup(d_full):
    """A unit that has gone (its cgroup removed, like a failed service's): the snapshot still
    names it for its events, and --unit finds them (the daemon watched the cgroup being made)."""
    check(cgroup2_mount() is not None, "a cgroup2 mount (needed for unit names)")
    d = d_full
    d.start()
    cg = UnitCgroup("rec")
    unit = cg.name
    marker = f"perfrelay-gone-{uuid.uuid4().hex[:8]}"
    try:
        p = subprocess.run(["/bin/sh", "-c", "exit 7", marker], preexec_fn=cg.enter, timeout=30)
        check_eq(p.returncode, 7, "the command ran in the unit's cgroup")
    finally:
        cg.remove()  # its only process has exited
    r, lines = snapshot("--unit", unit)
    check_eq(r.returncode, 0, f"perfrelayctl snapshot --unit (stderr: {r.stderr.strip()})")
    execs = [e for e in lines[:-1] if e["type"] == "exec" and marker in e["argv"]]
    check_eq(len(execs), 1, f"the gone unit's exec is found by its unit: {lines[-1]}")
    check_eq(execs[0]["unit"], unit, "with its unit")
    check(all(e.get("unit") == unit for e in lines[:-1]), "only that unit's events")
    watch = bus.stats()["recorder"]
    check(watch["cgroups_remembered"] >= 1, f"the cgroup watch remembered it: {watch}")
    check_eq(watch["cgroups_unwatched"], 0, "every cgroup directory watched")
    d.stop()


# Makes N cgroups in waves of WAVE (a user's live cgroups are watched up to a quota of 1024), each
# removed when told.
FLOOD = """
import os, sys
n, wave = int(sys.argv[2]), int(sys.argv[3])
for start in range(0, n, wave):
    paths = [os.path.join(sys.argv[1], f"flood-{i}.scope") for i in range(start, min(n, start + wave))]
    for p in paths:
        os.mkdir(p)
    print("made", len(paths), flush=True)
    sys.stdin.readline()
    for p in paths:
        os.rmdir(p)
    print("removed", flush=True)
"""


def test_users_cgroups_do_not_push_out_a_failed_unit(d_flood):
    """A unit fails (its cgroup goes); then a user makes and removes 4100 cgroups in the subtree
    delegated to them (in waves of 1000: the daemon watches 1024 live ones per user), more than
    the 4096 the daemon keeps: theirs are kept apart and push out none of root's, so the snapshot
    still names the failed unit; while the recorder may still hold their events none of theirs
    is forgotten either (the queue grows, bounded)."""
    check(cgroup2_mount() is not None, "a cgroup2 mount (needed for unit names)")
    d = d_flood
    d.start()
    uid, n = 4244, 4100
    cg = UnitCgroup("recfail")
    marker = f"perfrelay-failed-{uuid.uuid4().hex[:8]}"
    try:
        p = subprocess.run(["/bin/sh", "-c", "exit 3", marker], preexec_fn=cg.enter, timeout=30)
        check_eq(p.returncode, 3, "the failing unit ran")
    finally:
        cg.remove()
    before = wait_for(lambda: (s := bus.stats()["recorder"])["cgroups_remembered"] >= 1 and s,
                      "the failed unit remembered", interval=0.5)
    manager = UnitCgroup("", parent=f"user.slice/user-{uid}.slice", name=f"user@{uid}.service")
    try:
        delegate_cgroup(manager.path, uid)
        watched = bus.stats()["recorder"]["cgroups_watched"]
        flood = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c",
                                  FLOOD, manager.path, str(n), "1000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        made = 0
        while made < n:
            line = flood.stdout.readline().split()
            check(line and line[0] == "made", f"the user made a wave of cgroups: {line}")
            wave = int(line[1])
            made += wave
            # Each seen made before it goes, as a user's real cgroups are (tasks run in them).
            wait_for(lambda: bus.stats()["recorder"]["cgroups_watched"] >= watched + wave,
                     "the user's cgroups watched", timeout=120, interval=0.5)
            flood.stdin.write("go\n")
            flood.stdin.flush()
            check_eq(flood.stdout.readline().strip(), "removed", "the user removed them")
        _, err = flood.communicate(timeout=120)
        check_eq(flood.returncode, 0, f"the user's flood ended ({err.strip()})")
        after = wait_for(lambda: (s := bus.stats()["recorder"])["cgroups_remembered"] >= before["cgroups_remembered"] + n
                         and s, "every removed cgroup remembered", timeout=120, interval=0.5)
    finally:
        for i in range(n):
            path = os.path.join(manager.path, f"flood-{i}.scope")
            if os.path.isdir(path):
                os.rmdir(path)
        manager.remove()
    r, lines = snapshot("--unit", cg.name)
    check_eq(r.returncode, 0, f"perfrelayctl snapshot --unit (stderr: {r.stderr.strip()})")
    execs = [e for e in lines[:-1] if e["type"] == "exec" and marker in e["argv"]]
    check_eq([e.get("unit") for e in execs], [cg.name], "the failed unit's exec, still with its unit")
    check_eq(after["cgroups_evicted"], before["cgroups_evicted"], "no cgroup root made was forgotten")
    check_eq((after["cgroups_evicted_users"], after["cgroups_evicted_young"]), (0, 0),
             "nor any of the user's: the recorder may still hold their events")
    check(after["cgroups_kept"] >= n + 1, f"all kept: {after}")
    d.stop()


def test_overwritten(d_small):
    """A recorder of one page per CPU, filled many times over by the example producer from one
    CPU: the snapshot holds exactly the newest records, consecutive, the newest last, and the
    rest is counted as overwritten; the live stream got every record."""
    n = 2000
    d = d_small
    d.start()
    p = subprocess.run([EXAMPLE, d.pin_path, str(n), str(CPU)], capture_output=True, text=True, timeout=60)
    check_eq(p.returncode, 0, f"example producer (stderr: {p.stderr.strip()})")
    check_eq(json.loads(p.stdout), {"emitted": n}, "the example producer emitted")
    r, lines = snapshot("--type", "32769")
    check_eq(r.returncode, 0, f"perfrelayctl snapshot (stderr: {r.stderr.strip()})")
    summary, events = lines[-1], lines[:-1]
    cpu = [c for c in summary["cpus"] if c["cpu"] == CPU][0]
    check_eq(cpu["written"], n, "the recorder took every record of its CPU")
    check(0 < cpu["records"] < n, f"a page keeps some of them: {cpu}")
    check_eq(cpu["records"] + cpu["overwritten"], n, "kept + overwritten = written")
    check_eq(len(events), cpu["records"], "every kept record is in the snapshot")
    seqs = [e["seq"] for e in events]
    check_eq(seqs, list(range(seqs[-1] - len(seqs) + 1, seqs[-1] + 1)), "consecutive records")
    check_eq(seqs[-1], n - 1, "the last is the newest emitted")
    wait_for(lambda: bus.producer(300)["received"] == n, "the live stream received every record")
    check_eq(bus.producer(300)["attempts"], n, "the live stream's attempts are the records, not twice")
    d.stop()


def test_snapshot_under_load(d_busy):
    """Snapshots while a producer emits flat out: each completes, pauses the rings (for a
    grace period and the copy; reported), and the live stream's accounting stays exact
    (attempts = received + failures); the recorder's outputs refused during the pauses are
    counted as paused, apart from it."""
    d = d_busy
    d.start()
    p = subprocess.Popen([STEADY, d.pin_path, str(CPU)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        p.stdin.write("burst 300000\n")
        p.stdin.flush()
        pauses = []
        for _ in range(5):
            r, lines = snapshot("--type", "33552")
            check_eq(r.returncode, 0, f"a snapshot under load (stderr: {r.stderr.strip()})")
            pauses += [c["pause_ns"] for c in lines[-1]["cpus"]]
        check_eq(p.stdout.readline().strip(), "ok", "the burst ended")
        counts = json.loads((p.stdin.write("counts\n"), p.stdin.flush(), p.stdout.readline())[2])
    finally:
        p.stdin.close()
        p.wait(30)
    check(min(pauses) > 0, f"each ring's pause is reported: {pauses}")

    def settled():
        st = bus.producer(STEADY_PRODUCER)
        return st if st["received"] + st["failures"] == st["attempts"] else None
    st = wait_for(settled, "the live stream's accounting")
    check_eq(st["attempts"], counts["calls"], "every call an attempt")
    check_eq(st["received"], counts["accepted"], "every record the kernel took was received")
    rec = bus.stats()["recorder"]
    check(rec["snapshots"] >= 5, f"snapshots counted: {rec}")
    check_eq(rec["failed"], 0, "no recorder output failed but for the pauses")
    check_eq(rec["written"] + rec["paused"] + rec["failed"], counts["calls"],
             f"every call's recorder output counted once, written, paused or failed: {rec}")
    d.stop()


def test_held_snapshots_are_bounded(d_held):
    """A snapshot's memfd is the daemon's memory for as long as the caller keeps it: a caller
    that keeps taking them (and keeping them) finds its oldest emptied once it holds four, so the
    daemon holds at most 16 snapshots' worth (docs/security.md)."""
    d = d_held
    d.start()
    peer = BusPeer(os.path.join(BUILDDIR, "tests", "integration", "bus-subscriber"), bus.address, subscribe=False)
    try:
        for i in range(6):
            r = peer.command("call Snapshot A -", "Snapshot")
            check(r["error"] is None and r["size"] > 0, f"snapshot {i} taken, with its summary line: {r}")
        sizes = peer.command("sizes", "sizes")["sizes"]
        check_eq([s > 0 for s in sizes], [False, False, True, True, True, True],
                 f"the two oldest of six kept snapshots are emptied ({sizes})")
        rec = bus.stats()["recorder"]
        check_eq((rec["snapshots_held"], rec["snapshots_emptied"], rec["snapshots_refused"]), (4, 2, 0),
                 "held, emptied, refused")
    finally:
        peer.close()
        d.stop()


def test_saved_snapshots_quota(d_busy):
    """perfrelayctl snapshot --save keeps the snapshot directory within its quota (the newest 32
    files, 256 MiB in all: docs/recorder.md): older files beyond either go, and so do the
    temporary files of saves that died (snapshots_list() never saw them), but not those of a
    save that may still run."""
    d = d_busy
    d.start()
    work = tempfile.mkdtemp(prefix="perfrelay-snapshots-")
    try:
        old = time.time() - 3600
        for i in range(33):
            path = os.path.join(work, f"old{i:02d}-20260101T0000{i:02d}.jsonl")
            with open(path, "w") as f:
                f.write("{}\n")
            os.utime(path, (old + i, old + i))
        big = os.path.join(work, "big-20260101T010000.jsonl")
        with open(big, "w") as f:
            f.truncate(300 << 20)  # sparse: 300 MiB that take no disk
        os.utime(big, (old + 100, old + 100))
        stale, fresh = os.path.join(work, ".dead-1.jsonl.tmp"), os.path.join(work, ".live-2.jsonl.tmp")
        for p in (stale, fresh):
            with open(p, "w") as f:
                f.write("{")
        os.utime(stale, (old, old))
        r = subprocess.run([bus.ctl, "snapshot", "--save=quota.service", f"--directory={work}"],
                           capture_output=True, text=True, timeout=60)
        check_eq(r.returncode, 0, f"the save (stderr: {r.stderr.strip()})")
        names = sorted(os.listdir(work))
        saved = [n for n in names if n.endswith(".jsonl")]
        check_eq(len(saved), 32, f"the newest 32 files are kept: {names}")
        check(any(n.startswith("quota.service-") for n in saved), "the new snapshot among them")
        check(os.path.basename(big) not in names, "a file that takes the directory past 256 MiB goes")
        check(os.path.basename(stale) not in names and os.path.basename(fresh) in names,
              f"a dead save's temporary file goes, a live one's stays: {names}")
        check_eq(d.stop(), 0, "clean exit")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_recorder_off(d_off):
    d = d_off
    d.start()
    r, _ = snapshot()
    check(r.returncode != 0 and "Recorder=no" in r.stderr, f"no snapshot without a recorder: {r.stderr.strip()}")
    d.stop()


def pinned_u32(d, name):
    raw = bpftool_json("map", "lookup", "pinned", f"{d.pin_path}/{name}", "key", "0", "0", "0", "0")["value"]
    return raw if isinstance(raw, int) else int.from_bytes(bytes(int(b, 16) for b in raw), "little")


def recorder_outputs(d):
    """The pinned recorder_stats summed over the CPUs: every recorder output the producers made."""
    out = bpftool_json("map", "lookup", "pinned", f"{d.pin_path}/recorder_stats", "key", "0", "0", "0", "0")
    total = 0
    for v in out["values"]:
        val = v["value"]
        if isinstance(val, dict):
            total += sum(val.values())
        else:
            raw = bytes(int(b, 16) for b in val)
            total += sum(int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8))
    return total


def test_recorder_off_after_crash(d_crash):
    """A daemon killed with its recorder on leaves recorder_on set and its rings in the pinned
    array; the next daemon, started with Recorder=no, turns it off and empties the slots: the
    producers make no second output per record (recorder_stats stays still) and the live
    stream's accounting is exact."""
    d = d_crash
    d.write_config("")
    d.start()
    # The types it records (event.h, PERFRELAY_RECORDER_OTHERS): RecorderTypes=' default, exec
    # exit fork connect (types 1, 2, 3, 5), and every third-party type (bit 31).
    check_eq(pinned_u32(d, "recorder_on"), (1 << 31) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 5),
             "recorder_on while a recorder runs")
    d.stop(signal.SIGKILL)
    d.write_config("[Recorder]\nRecorder=no\n")
    d.start()
    check_eq(pinned_u32(d, "recorder_on"), 0, "recorder_on after a start with Recorder=no")
    before = recorder_outputs(d)
    for _ in range(20):
        subprocess.run(["/bin/true", "perfrelay-recorder-crash"], check=True)
    after = recorder_outputs(d)
    check_eq(after - before, 0, "recorder outputs made by 20 commands' records with the recorder off")
    d.stop()


def test_no_torn_record(d_tear):
    """200 snapshots while a steady producer emits flat out on every CPU: every record in every
    snapshot is whole (its payload checks out: a write that was in flight when the ring was
    paused would tear the oldest)."""
    d = d_tear
    d.start()
    prods = []
    try:
        for cpu in sorted(os.sched_getaffinity(0)):
            prods.append(SteadyProducer(BUILDDIR, d.pin_path, cpu))
            prods[-1].cmd("rate 10000000")
        records = 0
        for i in range(TEAR_SNAPSHOTS):
            r, lines = snapshot()
            check_eq(r.returncode, 0, f"snapshot {i} (stderr: {r.stderr.strip()})")
            summary, events = lines[-1], lines[:-1]
            steady = [e for e in events if e.get("type_id") == STEADY_TYPE]
            bad = [e for e in steady if not payload_checks_out(base64.b64decode(e["payload"]))]
            check_eq(bad[:1], [], f"snapshot {i}: every record whole ({len(steady)} records)")
            check(all(c["written"] >= c["records"] for c in summary["cpus"]), f"snapshot {i}: {summary['cpus']}")
            records += len(steady)
        check(records > TEAR_SNAPSHOTS, f"the snapshots held the producers' records: {records}")
    finally:
        for p in prods:
            p.close()
    d.stop()


def test_written_at_pause(d_written):
    """A snapshot's `written` is what the ring took up to its pause, not the writes after it
    resumed: under a steady producer emitting flat out on one CPU (its records numbered by its
    calls from 0, each one written to the recorder until the first pause), the newest record
    kept is call written - 1 exactly."""
    d = d_written
    d.start()
    prod = SteadyProducer(BUILDDIR, d.pin_path, CPU)
    try:
        prod.cmd("rate 10000000")
        wait_for(lambda: bus.producer(STEADY_PRODUCER)["received"] >= 20000 or None, "the producer emits")
        r, lines = snapshot()
        check_eq(r.returncode, 0, f"a snapshot (stderr: {r.stderr.strip()})")
    finally:
        prod.close()
    summary, events = lines[-1], lines[:-1]
    calls = [struct.unpack_from("<Q", base64.b64decode(e["payload"]))[0]
             for e in events if e.get("type_id") == STEADY_TYPE and e["cpu"] == CPU]
    cpu = next(c for c in summary["cpus"] if c["cpu"] == CPU)
    check(calls, f"the snapshot holds the producer's records: {cpu}")
    check_eq(cpu["written"], max(calls) + 1, "written = the newest kept call + 1 (nothing after the pause)")
    d.stop()


if __name__ == "__main__":
    main(__file__)
