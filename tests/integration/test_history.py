#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The event history (docs/history.md). A monitor that reads with cursors is closed while a
marker workload runs for 10 s and resumes after its last cursor: it gets every marker of the gap
exactly once, then the live ones. A query of a user who sees their own uid only returns that
uid's events. A segment whose last block is torn (truncated mid-block) is cut there at start,
counted, and every event of the blocks before it is still read. Retention removes whole
segments, counts them, and a reader whose cursor was in one gets a gap of exactly the events
removed after it. A full filesystem (a small ext4 on a loop device) turns blocks into drops, counted, and the
history records them as a gap: dropped_disk = the gaps' counts + what waits for the next block."""
import glob
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid

import pytest

from prtest import check, check_eq, daemon_binary, main, run_true, wait_for

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
CTL = os.path.join(BUILDDIR, "client", "perfrelayctl")
PYTHON = "/usr/bin/python3"
HDR = struct.Struct("<HBBHHIIQQ")  # struct perfrelay_hdr (bpf/event.h)
UNIT_TYPE = 0x7ffd  # PERFRELAY_TYPE_UNIT
CURSOR_TYPE = 0x7ffc  # PERFRELAY_TYPE_CURSOR


@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf):
    pass


def read_stream(socket_path, request, timeout=30):
    """Every byte of a history stream that ends (follow false), the hello line included."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(socket_path)
    s.sendall(json.dumps(dict(request, follow=False)).encode() + b"\n")
    data = b""
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def first_line(socket_path, request, timeout=30):
    """The first line the daemon answers a history request with (a refusal's error line)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(socket_path)
    s.sendall(json.dumps(dict(request, follow=False)).encode() + b"\n")
    line = json.loads(s.makefile().readline())
    s.close()
    return line


def query(socket_path, request, timeout=30):
    """The lines of a history stream that ends (follow false), the hello line left out."""
    data = read_stream(socket_path, request, timeout)
    lines = [json.loads(line) for line in data.decode().splitlines()]
    check(lines and lines[0]["type"] == "hello", f"a hello line first: {lines[:1]}")
    return lines[1:]


def markers(msgs, tag):
    """The marker numbers of the exec events of /bin/true <tag> <n> among msgs."""
    return [int(m["argv"][2]) for m in msgs
            if m.get("type") == "exec" and len(m.get("argv", [])) == 3 and m["argv"][1] == tag]


def history(stats):
    return stats["history"]


def quiet(stats_bus):
    """The history's figures once what it was offered is written or counted."""
    h = history(stats_bus.stats())
    return h if h["pending"] == 0 else None


def test_monitor_resumes_after_its_cursor_exactly(make_daemon, socket_client):
    d = make_daemon("hist-resume", "[Probes]\nProbes=exec\n", stdout=False)
    tag = f"hist-{uuid.uuid4().hex[:8]}"
    request = {"cursors": True, "subscribe": {"types": ["exec"], "comm": ["true"]}}

    first = socket_client(d.socket_path, request)
    first.hello()
    for i in range(50):
        run_true(tag, str(i))
    got = wait_for(lambda: (lambda m: m if len(markers(m, tag)) == 50 else None)(first.messages()),
                   "the first 50 markers with cursors")
    check(all("cursor" in m for m in got if m["type"] == "exec"), "every event line carries its cursor")
    # Where it stopped reading: the cursor of the last line it got (not of marker 49: the
    # history's order is the readers', in which another CPU's marker 45 may follow 49).
    last = [m for m in got if "cursor" in m][-1]["cursor"]
    first.close()

    # The monitor is gone for 10 s while the workload goes on.
    deadline = time.monotonic() + 10
    n = 50
    while time.monotonic() < deadline:
        run_true(tag, str(n))
        n += 1
        time.sleep(0.02)  # paces the workload; nothing waits on it
    gap_end = n

    second = socket_client(d.socket_path, dict(request, after_cursor=last))
    second.hello()
    for i in range(gap_end, gap_end + 20):
        run_true(tag, str(i))
    wait_for(lambda: gap_end + 19 in markers(second.messages(), tag), "the live markers after the gap")
    seen = markers(second.messages(), tag)
    # Each once; the order is the readers' (events of different CPUs may pass each other).
    check_eq(sorted(markers(got, tag) + seen), list(range(gap_end + 20)),
             "every marker once: the first 50 before the cursor, the gap's and the live ones after it")
    check_eq([m for m in second.messages() if m["type"] == "lost"], [], "no gap")


def test_query_is_scoped_to_the_users_uid(make_daemon):
    d = make_daemon("hist-uid", "[Probes]\nProbes=exec\n", stdout=False)
    os.chmod(d.dir, 0o755)
    os.chmod(d.socket_path, 0o666)  # every uid may connect; the daemon decides what it sees
    tag = f"hist-{uuid.uuid4().hex[:8]}"
    run_true(tag, "0")
    subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/true", tag, "1"], check=True)
    wait_for(lambda: sorted(markers(query(d.socket_path, {"subscribe": {"types": ["exec"]}}), tag)) == [0, 1],
             "both markers in the history (root's query)")

    code = ("import json,socket,sys\n"
            "s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1])\n"
            "s.sendall(b'{\"follow\":false,\"cursors\":true}\\n')\n"
            "d=b''\n"
            "while True:\n"
            "    c=s.recv(1<<20)\n"
            "    if not c: break\n"
            "    d+=c\n"
            "sys.stdout.write(d.decode())\n")
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PYTHON, "-c", code,
                        d.socket_path], capture_output=True, text=True, timeout=60, check=True)
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    check_eq(lines[0]["access"], "uid", "nobody sees its own uid's events")
    events = [m for m in lines[1:] if m["type"] != "lost"]
    check_eq(sorted({m["uid"] for m in events}), [65534], "only uid 65534's events")
    check_eq(markers(events, tag), [1], "nobody's marker, not root's")
    check(all(m.get("ancestors", []) == [] for m in events), "no ancestors (they may be other users')")


def test_unit_query_reads_the_units_blocks(make_daemon, unit_cgroup):
    d = make_daemon("hist-unit", "[Probes]\nProbes=exec\n", stdout=False)
    tag = f"hist-{uuid.uuid4().hex[:8]}"
    unit = unit_cgroup("hist-unit")
    for i in range(5):
        run_true(tag, str(i))  # outside the unit
    for i in range(5, 10):
        unit.popen(["/bin/true", tag, str(i)]).wait()
    wait_for(lambda: len(markers(query(d.socket_path, {}), tag)) == 10, "every marker written")
    got = query(d.socket_path, {"subscribe": {"unit": [unit.name]}})
    check_eq(sorted(markers(got, tag)), list(range(5, 10)), "the unit's markers, none other")
    check(all(m.get("unit") == unit.name for m in got if m["type"] == "exec"), "each of the unit")


def binary_query(socket_path, request, timeout=30):
    """The frames of a binary history stream that ends: [(hdr tuple, payload bytes)], after the
    hello line."""
    hello, _, data = read_stream(socket_path, dict(request, format="binary"), timeout).partition(b"\n")
    check_eq(json.loads(hello)["type"], "hello", "a hello line first")
    frames, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        rec = data[pos + 4:pos + 4 + n]
        check(len(rec) == n and n >= HDR.size, f"a whole frame at {pos}")
        frames.append((HDR.unpack_from(rec), rec[HDR.size:]))
        pos += 4 + n
    return frames


def test_binary_stream_has_cursor_and_unit_frames(make_daemon, unit_cgroup):
    """A binary history stream: a cursor frame before each event record (the record's
    producer, cpu, seq and ts, and the same cursor as the JSON stream's line), a unit frame
    for a unit's records; a type the history does not record is refused, named."""
    d = make_daemon("hist-binary", "[Probes]\nProbes=exec\n", stdout=False)
    tag = f"hist-{uuid.uuid4().hex[:8]}"
    unit = unit_cgroup("hist-binary")
    run_true(tag, "0")
    unit.popen(["/bin/true", tag, "1"]).wait()
    wait_for(lambda: len(markers(query(d.socket_path, {}), tag)) == 2, "both markers written")
    request = {"cursors": True, "units": True, "subscribe": {"types": ["exec"]}}
    lines = [m for m in query(d.socket_path, request) if m["type"] == "exec"]
    frames = binary_query(d.socket_path, request)
    records, cursor, unit_name = [], None, None
    for hdr, payload in frames:
        typ = hdr[3]
        if typ == CURSOR_TYPE:
            check(cursor is None, "one cursor frame per record")
            cursor = (hdr[5:], payload.rstrip(b"\0").decode())
            check_eq(payload[-1:], b"\0", "the cursor ends with its NUL")
        elif typ == UNIT_TYPE:
            unit_name = payload[8:].split(b"\0", 1)[0].decode()
        elif typ == 1:
            check(cursor is not None and cursor[0] == hdr[5:], f"a cursor frame of this record before it: {cursor}")
            records.append((cursor[1], unit_name))
            cursor = unit_name = None
    check_eq([c for c, _ in records], [m["cursor"] for m in lines], "the JSON stream's cursors, in its order")
    check_eq([u for _, u in records], [m.get("unit") for m in lines], "the unit frames say the lines' units")
    check(unit.name in [u for _, u in records], "the unit's marker came with its unit frame")

    got = first_line(d.socket_path, {"subscribe": {"types": ["open"]}})
    check_eq((got["type"], got["error"]), ("error", "bad-request"), "a type not recorded is refused")
    check('"open"' in got["message"] and "HistoryTypes=" in got["message"], f"and named: {got}")


def test_snapshot_reaches_back_into_the_history(make_daemon, stats_bus, unit_cgroup):
    # Rings of one page: a few execs push the unit's out of the recorder, not out of the history.
    d = make_daemon("hist-snap", "[Probes]\nProbes=exec\n[Recorder]\nRecorderPagesPerCpu=1\n", stdout=False)
    tag = f"hist-{uuid.uuid4().hex[:8]}"
    unit = unit_cgroup("hist-snap")
    for i in range(10):
        unit.popen(["/bin/true", tag, str(i)]).wait()
    wait_for(lambda: len(markers(query(d.socket_path, {}), tag)) == 10, "the unit's markers written")
    for i in range(100):
        run_true(tag + "-push", str(i))
    r = subprocess.run([CTL, "snapshot", "--unit", unit.name, "--json"], capture_output=True, text=True,
                       timeout=60, check=True)
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    summary = lines[-1]
    check_eq(summary["type"], "snapshot", "the summary line last")
    check(summary["history"] > 0, f"the history's part has lines: {summary}")
    check_eq(sorted(markers(lines, tag)), list(range(10)), "every marker of the unit, once")
    d.stop()  # the module's bus is the next test's daemon's


def test_torn_tail_is_cut_counted_and_the_rest_kept(make_daemon, stats_bus):
    d = make_daemon("hist-torn", "[Probes]\nProbes=exec\n", stdout=False)
    tag = f"hist-{uuid.uuid4().hex[:8]}"
    for group in range(3):
        for i in range(10):
            run_true(tag, str(group * 10 + i))
        # Each group in blocks of its own: the writer cuts a block after a quarter second.
        wait_for(lambda: len(markers(query(d.socket_path, {}), tag)) == 10 * (group + 1), f"group {group} written")
    # No exec after this (perfrelayctl stats is one each time): pending can reach 0.
    subprocess.run([CTL, "probe", "disable", "exec"], check=True, capture_output=True, timeout=30)
    wait_for(lambda: quiet(stats_bus), "everything offered written")
    before = [m for m in query(d.socket_path, {"cursors": True}) if "cursor" in m]
    d.stop()

    cur = dict(kv.split("=") for kv in before[-1]["cursor"].split(";"))
    segment = int(cur["s"], 16)
    cut = int(cur["o"], 16)
    path = os.path.join(d.dir, "history", f"{segment:016x}.seg")
    size = os.path.getsize(path)
    os.truncate(path, cut + 60)  # the block's header (48 bytes) and a little of its frame

    d.start()
    h = history(stats_bus.stats())
    check_eq((h["torn_cuts"], h["torn_bytes"]), (1, cut + 60 - cut), "one torn tail cut, its bytes counted")
    check_eq(os.path.getsize(path), cut, "the segment ends at its last whole block")
    kept = [m["cursor"] for m in before
            if int(dict(kv.split("=") for kv in m["cursor"].split(";"))["s"], 16) == segment
            and int(dict(kv.split("=") for kv in m["cursor"].split(";"))["o"], 16) < cut]
    after = [m["cursor"] for m in query(d.socket_path, {"cursors": True}) if "cursor" in m
             and int(dict(kv.split("=") for kv in m["cursor"].split(";"))["s"], 16) == segment]
    check(len(kept) > 0 and size > cut, "there was something before the torn block")
    check_eq(after, kept, "every event of the blocks before the torn one, and nothing else")
    d.stop()  # the module's bus is the next test's daemon's


def open_load(n):
    """n opens of paths that compress poorly (the open probe records each path)."""
    for _ in range(n):
        try:
            os.open(f"/nonexistent-{uuid.uuid4().hex}", os.O_RDONLY)
        except FileNotFoundError:
            pass


def test_retention_removes_whole_segments(make_daemon, stats_bus):
    d = make_daemon("hist-ret", "[Probes]\nProbes=open\n[History]\nHistoryTypes=open\nHistoryMaxUse=4M\n",
                    stdout=False)
    open_load(100)
    wait_for(lambda: history(stats_bus.stats())["events"] > 0, "the first events written")
    early = [m for m in query(d.socket_path, {"cursors": True}) if "cursor" in m][0]["cursor"]
    deadline = time.monotonic() + 180
    while history(stats_bus.stats())["removed_segments"] < 2:
        check(time.monotonic() < deadline, "retention removed two segments within 180s")
        open_load(5000)
    subprocess.run([CTL, "probe", "disable", "open"], check=True, capture_output=True, timeout=30)
    h = wait_for(lambda: quiet(stats_bus), "everything offered written")
    files = glob.glob(os.path.join(d.dir, "history", "*.seg"))
    check_eq(h["segments"], len(files), "the segments counted are the files")
    check_eq(h["bytes"], sum(os.path.getsize(f) for f in files), "their bytes")
    check(h["bytes"] <= 4 << 20, f"within HistoryMaxUse=4M: {h['bytes']}")
    check_eq(h["events"] + h["removed_events"], h["written"], "held + removed = written")

    # A filter that matches nothing reads every block, a few per turn of the daemon's loop.
    check_eq(query(d.socket_path, {"subscribe": {"pid": [2 ** 31]}}), [], "nothing matches")

    lines = query(d.socket_path, {"after_cursor": early})
    n = int(dict(kv.split("=") for kv in early.split(";"))["n"], 16)
    check_eq(lines[0], {"type": "lost", "count": h["first_ordinal"] - (n + 1), "reason": "history-retention"},
             "the reader of a removed segment's cursor first gets the removed events as a gap")
    d.stop()  # the module's bus is the next test's daemon's


EXPORT = os.path.join(BUILDDIR, "client", "export", "perfrelay-export")


def resuming_exporter(tag, d, cursor_file, out, types):
    """perfrelay-export with Resume=yes into a JSON-lines file (its file target), started."""
    from prtest.exporttest import Exporter
    return Exporter(EXPORT, tag, ["nats://127.0.0.1:1"], socket_path=d.socket_path,
                    extra=f"Targets=file\nTypes={types}\nResume=yes\nCursorFile={cursor_file}\n"
                          f"[File]\nPath={out}\n").start()


def file_markers(path, tag):
    with open(path) as f:
        return markers([json.loads(line) for line in f], tag)


@pytest.mark.skipif(not os.access(EXPORT, os.X_OK), reason="perfrelay-export was not built")
def test_exporter_resumes_across_a_daemon_restart(make_daemon):
    """The exporter's stream ends with the daemon; started again after the daemon is back, it
    goes on from its cursor in the same history: the markers of before, of the daemon's restart
    and of after are each exported once."""
    d = make_daemon("hist-exp-restart", "[Probes]\nProbes=exec\n", stdout=False)
    work = tempfile.mkdtemp(prefix="perfrelay-hist-exp-")
    out, cursor_file, tag = os.path.join(work, "events.json"), os.path.join(work, "cursor"), f"hist-{uuid.uuid4().hex[:8]}"
    e1 = e2 = None
    try:
        e1 = resuming_exporter("restart1", d, cursor_file, out, "exec")
        wait_for(lambda: (e1.stats() or {}).get("resume"), "the exporter running")
        for i in range(10):
            run_true(tag, str(i))
        wait_for(lambda: len(file_markers(out, tag)) == 10, "the first markers exported")
        for i in range(10, 20):
            run_true(tag, str(i))  # perhaps written by the history, perhaps not yet exported
        d.stop()
        check_eq(e1.wait(), 1, "the exporter ends with an error when the daemon's stream ends")
        d.start()
        for i in range(20, 30):
            run_true(tag, str(i))
        e2 = resuming_exporter("restart2", d, cursor_file, out, "exec")
        wait_for(lambda: set(range(10)) | set(range(20, 30)) <= set(file_markers(out, tag)),
                 "the markers of after the restart exported")
        check_eq(e2.stop(), 0, "exit status after SIGTERM")
        got = file_markers(out, tag)
        # 10..19 ran before the daemon stopped: exported by the first exporter if the history
        # wrote them before it stopped (it does, at exit), else never recorded; never twice.
        check_eq(sorted(got), sorted(set(got)), "no marker twice")
        check(set(range(10)) | set(range(20, 30)) <= set(got), f"every marker of before and after: {sorted(got)}")
        check_eq(set(range(10, 20)) & set(got), set(range(10, 20)), "those of the stop too (the history wrote them at exit)")
    finally:
        for e in (e1, e2):
            if e:
                e.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    d.stop()  # the module's bus is the next test's daemon's


@pytest.mark.skipif(not os.access(EXPORT, os.X_OK), reason="perfrelay-export was not built")
def test_exporter_counts_what_retention_removed(make_daemon, stats_bus):
    """An exporter stopped while retention removes the segment its cursor is in gets, at its next
    start, a gap of exactly the events removed after its cursor, counted as history-retention."""
    d = make_daemon("hist-exp-ret", "[Probes]\nProbes=open\n[History]\nHistoryTypes=open\nHistoryMaxUse=4M\n",
                    stdout=False)
    work = tempfile.mkdtemp(prefix="perfrelay-hist-exp-")
    out, cursor_file = os.path.join(work, "events.json"), os.path.join(work, "cursor")
    e1 = e2 = None
    try:
        e1 = resuming_exporter("ret1", d, cursor_file, out, "open")
        wait_for(lambda: (e1.stats() or {}).get("resume"), "the exporter running")
        open_load(100)
        wait_for(lambda: (e1.stats() or {}).get("exported", 0) >= 100, "the first opens exported")
        check_eq(e1.stop(), 0, "exit status after SIGTERM")
        with open(cursor_file) as f:
            saved = f.read().strip()
        n = int(dict(kv.split("=") for kv in saved.split(";"))["n"], 16)
        deadline = time.monotonic() + 180
        while history(stats_bus.stats())["removed_segments"] < 2:
            check(time.monotonic() < deadline, "retention removed two segments within 180s")
            open_load(5000)
        subprocess.run([CTL, "probe", "disable", "open"], check=True, capture_output=True, timeout=30)
        h = wait_for(lambda: quiet(stats_bus), "everything offered written")
        e2 = resuming_exporter("ret2", d, cursor_file, out, "open")
        st = wait_for(lambda: (lambda s: s if s and s["offered"] == h["events"] else None)(e2.stats()),
                      "every event the history holds offered", timeout=120)
        check_eq(st["resume"]["history_lost"]["history-retention"], h["first_ordinal"] - (n + 1),
                 "the gap: every event retention removed after the cursor")
        check_eq(e2.stop(), 0, "exit status after SIGTERM")
    finally:
        for e in (e1, e2):
            if e:
                e.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    d.stop()  # the module's bus is the next test's daemon's


def test_a_directory_others_may_write_is_refused(make_daemon, stats_bus):
    work = tempfile.mkdtemp(prefix="perfrelay-hist-perm-")
    path = os.path.join(work, "h")
    os.mkdir(path)
    os.chmod(path, 0o777)  # anyone could plant or replace segments
    try:
        d = make_daemon("hist-perm", f"[Probes]\nProbes=exec\n[History]\nHistoryPath={path}\n", stdout=False)
        h = history(stats_bus.stats())
        check_eq((h["on"], h["off_reason"]), (False, "HistoryPath= is another user's or writable by others"),
                 "the history is off, and GetStats() says why")
        line = first_line(d.socket_path, {})
        check_eq((line["type"], line["error"]), ("error", "bad-request"), "a request for it is refused")
        check("writable by others" in line["message"], f"saying why: {line['message']}")
        check_eq(os.listdir(path), [], "nothing was written into it")
        d.stop()  # the module's bus is the next test's daemon's
    finally:
        subprocess.run(["rm", "-rf", work])


def loop_filesystem(size_mib):
    """A small ext4 on a loop device, mounted on a new directory (removed by the caller's
    unmount_loop()); a skip where loop devices cannot be had."""
    if not os.path.exists("/dev/loop-control"):
        pytest.skip("no loop devices (/dev/loop-control) for a small filesystem")
    work = tempfile.mkdtemp(prefix="perfrelay-hist-full-")
    image, mnt = os.path.join(work, "fs.img"), os.path.join(work, "mnt")
    os.mkdir(mnt)
    with open(image, "wb") as f:
        f.truncate(size_mib << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", image], check=True, capture_output=True)
    r = subprocess.run(["mount", "-o", "loop", image, mnt], capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["rm", "-rf", work])
        pytest.skip(f"cannot loop-mount a filesystem: {r.stderr.strip()}")
    return work, mnt


def test_full_disk_is_counted_and_recorded_as_a_gap(make_daemon, stats_bus):
    work, mnt = loop_filesystem(8)
    try:
        filler = os.path.join(mnt, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * (2 << 20))
        d = make_daemon("hist-full", f"[Probes]\nProbes=open\n[History]\nHistoryTypes=open\nHistoryPath={mnt}/h\n",
                        stdout=False)
        deadline = time.monotonic() + 180
        while history(stats_bus.stats())["dropped_disk"] == 0:
            check(time.monotonic() < deadline, "ENOSPC within 180s")
            open_load(5000)
        os.unlink(filler)  # room again: the next block carries the gap record
        while history(stats_bus.stats())["disk_gap_pending"] > 0:
            check(time.monotonic() < deadline, "a gap record written within 180s")
            open_load(200)
        subprocess.run([CTL, "probe", "disable", "open"], check=True, capture_output=True, timeout=30)
        h = wait_for(lambda: quiet(stats_bus), "everything offered written or counted")
        check_eq(h["offered"], h["written"] + h["dropped_behind"] + h["dropped_disk"], "offered = written + dropped")
        check(h["write_errors"] > 0, "blocks the disk refused, counted")
        gaps = sum(m["count"] for m in query(d.socket_path, {}) if m["type"] == "lost"
                   and m.get("reason") == "history-disk")
        check(gaps > 0, "the history holds the gap")
        check_eq(gaps + h["disk_gap_pending"], h["dropped_disk"], "every event the disk refused is in a gap")
        d.stop()
    finally:
        subprocess.run(["umount", "-l", mnt])
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main(__file__)
