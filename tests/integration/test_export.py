#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelay-export against a real nats-server -js on a loopback port: a marker command's exec
event arrives in the stream with its subject, headers and message id; perfrelayctl monitor
--nats shows it; counters add up exactly; replaying the same events after a restart stores no
duplicate."""
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time


from prtest import Daemon, UnitCgroup, check, check_eq, daemon_binary, main, run_true, skip, wait_for
from prtest.natstest import NatsClient, require_nats_server
from prtest.exporttest import HDR, Exporter, batch_digest, boot_id, parse_batch, stream_events, write_frames

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
EXPORT = os.path.join(BUILDDIR, "client", "export", "perfrelay-export")
CTL = os.path.join(BUILDDIR, "client", "perfrelayctl")

require_nats_server()
if not os.access(EXPORT, os.X_OK):
    skip("perfrelay-export was not built (libnats-dev missing)")

HOST = socket.gethostname().replace(".", "_")


def find_record(nc, stream, pred):
    """(subject, headers, records of its batch, the matching record) of the first record for
    which pred(record bytes) holds."""
    n = nc.stream_info(stream)["state"]["last_seq"]
    for seq in range(1, n + 1):
        subject, headers, data = nc.get(stream, seq)
        recs = parse_batch(data)
        for r in recs:
            if pred(r[1]):
                return subject, headers, recs, r
    return None


def test_marker_exec_in_stream(root_and_bpf, nats_server):
    srv = nats_server()
    d = Daemon(BINARY, "export", stdout=False, config="[Probes]\nProbes=exec\n")
    e = None
    work = tempfile.mkdtemp(prefix="perfrelay-marker-")
    try:
        d.start()
        e = Exporter(EXPORT, "marker", [srv.url], socket_path=d.socket_path,
                     extra="Types=exec\n[Stream]\nName=FLEET\n").start()
        nc = NatsClient(srv.url)
        wait_for(lambda: (e.stats() or {}).get("stream_ready"), "the exporter created its stream")

        marker = os.path.join(work, f"prmark{os.getpid()}")
        shutil.copy("/bin/true", marker)
        unit = UnitCgroup("export")
        try:
            check_eq(unit.popen([marker]).wait(), 0, "the marker's exit status")
            m = wait_for(lambda: find_record(nc, "FLEET", lambda rec: marker.encode() in rec),
                         "the marker's exec event in the stream")
        finally:
            unit.remove()
        subject, headers, recs, (hdr, rec, rec_unit) = m
        check_eq(subject, f"perfrelay.{HOST}.exec", "subject")
        check_eq(len(rec), hdr[4], "the record is whole")
        check_eq(rec_unit, unit.name, "the exec record's unit travels with it (a unit frame)")
        first = recs[0][0]
        check_eq(headers.get("Nats-Msg-Id"),
                 f"{boot_id()}.{first[5]}.{first[6]}.{first[7]}.{len(recs)}.{batch_digest([h for h, _, _ in recs]):016x}",
                 "message id: the batch's first record, its record count and the digest of its records")
        check_eq(headers.get("Perfrelay-Count"), str(len(recs)), "count header")
        check_eq(headers.get("Perfrelay-Batch"), "1", "batch format header")
        check_eq(headers.get("Perfrelay-Host"), HOST, "host header")
        check_eq(headers.get("Perfrelay-Boot-Id"), boot_id(), "boot id header")
        check_eq(headers.get("Perfrelay-Schema"), "1", "schema header")
        check_eq(headers.get("Perfrelay-Type"), "exec", "type header")

        r = subprocess.run([CTL, "monitor", "--nats", srv.url, "--stream", "FLEET", "--host", HOST,
                            "--no-follow"], capture_output=True, text=True, timeout=30)
        check_eq(r.returncode, 0, f"perfrelayctl monitor --nats exit status ({r.stderr.strip()})")
        lines = r.stdout.splitlines()
        check_eq(lines[0].split() if lines else None, ["TIME", "TYPE", "PID", "UID", "COMM", "DETAILS"],
                 "monitor --nats prints the local monitor's columns")
        check(any(os.path.basename(marker) in l and "exec" in l for l in lines),
              f"monitor --nats shows the marker's exec event: {lines[:5]}")
        r = subprocess.run([CTL, "monitor", "--nats", srv.url, "--stream", "FLEET", "--host", HOST,
                            "--no-follow", "--json"], capture_output=True, text=True, timeout=30)
        check_eq(r.returncode, 0, f"perfrelayctl monitor --nats --json exit status ({r.stderr.strip()})")
        ev = [json.loads(l) for l in r.stdout.splitlines() if os.path.basename(marker) in l]
        check(ev and ev[0].get("unit") == unit.name, f"monitor --nats --json gives the exec its unit: {ev[:1]}")

        check_eq(e.stop(), 0, "exporter exit status after SIGTERM")
        st = e.stats()
        check(st["offered"] > 0, "the exporter was offered events")
        check_eq(st["exported"] + st["export_dropped"], st["offered"], "exported + export_dropped = offered")
        check_eq(st["export_dropped"], 0, "nothing dropped by a healthy server")
        stored = sum(len(recs) for _, recs in stream_events(nc, "FLEET"))
        check_eq(stored, st["exported"] - st["duplicates"], "records in the stream = exported")
        check_eq(nc.stream_messages("FLEET"), st["messages"], "stream messages = messages published")
        nc.close()
    finally:
        if e:
            e.cleanup()
        d.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def test_replay_adds_no_duplicates(root_and_bpf, nats_server):
    N = 2000
    srv = nats_server()
    work = tempfile.mkdtemp(prefix="perfrelay-replay-")
    e1 = e2 = None
    try:
        frames = os.path.join(work, "frames")
        write_frames(frames, [(0x8001, 7, i % 2, i // 2, struct.pack("<QQ", i, ~i & 0xFFFFFFFFFFFFFFFF))
                              for i in range(N)])
        e1 = Exporter(EXPORT, "replay1", [srv.url])
        check_eq(e1.start("--input", frames).wait(), 0, "first export exit status")
        st = e1.stats()
        check_eq((st["offered"], st["exported"], st["duplicates"], st["export_dropped"]), (N, N, 0, 0),
                 "first export: offered, exported, duplicates, dropped")
        nc = NatsClient(srv.url)
        msgs = stream_events(nc, "PERFRELAY")
        seqs = [(h[6], h[7]) for _, recs in msgs for h, _, _ in recs]
        check_eq(seqs, [(i % 2, i // 2) for i in range(N)], "every record stored once, in order")
        check(len(msgs) < N // 10, f"records are batched: {len(msgs)} messages for {N} records")
        subject, headers, _ = nc.get("PERFRELAY", len(msgs))
        check_eq(subject, f"perfrelay.{HOST}.t32769", "subject of a type without a name")

        # The same events again, as after a crash between publish and ack: same ids, so the
        # duplicate window acknowledges every one as a duplicate and stores none.
        e2 = Exporter(EXPORT, "replay2", [srv.url])
        check_eq(e2.start("--input", frames).wait(), 0, "replay exit status")
        st = e2.stats()
        check_eq((st["offered"], st["exported"], st["duplicates"], st["export_dropped"]), (N, N, N, 0),
                 "replay: offered, exported, duplicates, dropped")
        check_eq(nc.stream_messages("PERFRELAY"), len(msgs), "stream messages after the replay")
        nc.close()
    finally:
        for e in (e1, e2):
            if e:
                e.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def stream_markers(nc, stream, tag):
    """The marker numbers of /bin/true <tag> <n> exec records stored in a stream, as often as
    they are stored."""
    needle = tag.encode() + b"\0"
    out = []
    for _, recs in stream_events(nc, stream):
        for hdr, rec, _ in recs:
            i = rec.find(needle)
            if hdr[3] == 1 and i >= 0:
                out.append(int(rec[i + len(needle):].split(b"\0", 1)[0]))
    return out


def resume_setup(tag, stream):
    """A daemon (not started) recording execs, a state directory, a marker tag and the
    exporter's configuration for Resume=yes into `stream`."""
    d = Daemon(BINARY, f"export-{tag}", stdout=False, config="[Probes]\nProbes=exec\n")
    state = tempfile.mkdtemp(prefix="perfrelay-export-state-")
    extra = f"Types=exec\nResume=yes\nCursorFile={state}/cursor\n[Stream]\nName={stream}\n"
    return d, state, f"{tag}{os.getpid()}", extra


def resume_start(name, d, srv, extra):
    """Starts d, then an exporter of it; returns it, once its stream is ready, and a client."""
    d.start()
    e = Exporter(EXPORT, name, [srv.url], socket_path=d.socket_path, extra=extra).start()
    nc = NatsClient(srv.url)
    wait_for(lambda: (e.stats() or {}).get("stream_ready"), "the exporter created its stream")
    return e, nc


def resume_cleanup(d, state, *exporters):
    for e in exporters:
        if e:
            e.cleanup()
    d.cleanup()
    shutil.rmtree(state, ignore_errors=True)


def test_resume_exports_the_pause_exactly_once(root_and_bpf, nats_server):
    """Resume=yes: the exporter reads the daemon's history and keeps the cursor of what JetStream
    acknowledged in CursorFile=. Stopped for 30 s while a marker workload runs, then started
    again, it exports every marker of the pause: the stream holds each marker exactly once."""
    srv = nats_server()
    d, state, tag, extra = resume_setup("resume", "RESUME")
    cursor_file = os.path.join(state, "cursor")
    e1 = e2 = None
    try:
        e1, nc = resume_start("resume1", d, srv, extra)
        for i in range(20):
            run_true(tag, str(i))
        wait_for(lambda: len(stream_markers(nc, "RESUME", tag)) == 20, "the first 20 markers in the stream")
        check_eq(e1.stop(), 0, f"exit status after SIGTERM: {e1.stderr()}")
        st = e1.stats()
        with open(cursor_file) as f:
            saved = f.read().strip()
        check_eq(st["resume"]["cursor"], saved, "the stats file shows the cursor saved")
        check(saved.startswith("h="), f"a history cursor was saved: {saved!r}")

        # Stopped for 30 s while the workload goes on.
        deadline = time.monotonic() + 30
        n = 20
        while time.monotonic() < deadline:
            run_true(tag, str(n))
            n += 1
            time.sleep(0.05)  # paces the workload; nothing waits on it
        gap_end = n

        e2 = Exporter(EXPORT, "resume2", [srv.url], socket_path=d.socket_path, extra=extra).start()
        for i in range(gap_end, gap_end + 20):
            run_true(tag, str(i))
        wait_for(lambda: gap_end + 19 in stream_markers(nc, "RESUME", tag), "the live markers after the pause",
                 timeout=120)
        check_eq(e2.stop(), 0, f"exit status after SIGTERM: {e2.stderr()}")
        check_eq(sorted(stream_markers(nc, "RESUME", tag)), list(range(gap_end + 20)),
                 "every marker in the stream exactly once: before, during and after the pause")
        st = e2.stats()
        check_eq(st["resume"]["history_lost"],
                 {"history-behind": 0, "history-disk": 0, "history-retention": 0, "history-damaged": 0,
                  "other": 0}, "the history lost nothing")
        check_eq((st["export_dropped"], st["exported"]), (0, st["offered"]), "everything offered was exported")
        check_eq(st["resume"]["cursor_refused"], "", "the saved cursor was taken")
        nc.close()
    finally:
        resume_cleanup(d, state, e1, e2)


def test_resume_after_a_crash_loses_nothing(root_and_bpf, nats_server):
    """An exporter killed (SIGKILL) while markers flow and JetStream is stopped (nothing it holds
    is acknowledged) saved no cursor past what was acknowledged: started again, with the server
    back, every marker reaches the stream (some may be stored twice: what was acknowledged after
    the last save is exported again). Here it is killed before any cursor was saved: the first
    start's time, written before it read anything, is where the second begins."""
    srv = nats_server()
    d, state, tag, extra = resume_setup("crash", "CRASH")
    e1 = e2 = None
    try:
        e1, nc = resume_start("crash1", d, srv, extra)
        for i in range(10):
            run_true(tag, str(i))
        wait_for(lambda: len(stream_markers(nc, "CRASH", tag)) == 10, "the first markers in the stream")
        nc.close()
        srv.kill()  # its store stays: started again below on the same port
        for i in range(10, 60):
            run_true(tag, str(i))
        # The exporter has read them all from the history (offered), none acknowledged.
        wait_for(lambda: (e1.stats() or {}).get("offered", 0) >= 60, "the markers offered to the exporter")
        e1.proc.kill()
        e1.wait()
        srv.start()
        e2 = Exporter(EXPORT, "crash2", [srv.url], socket_path=d.socket_path, extra=extra).start()
        nc = NatsClient(srv.url)
        wait_for(lambda: set(range(60)) <= set(stream_markers(nc, "CRASH", tag)),
                 "every marker in the stream after the restart", timeout=120)
        check_eq(e2.stop(), 0, f"exit status after SIGTERM: {e2.stderr()}")
        nc.close()
    finally:
        resume_cleanup(d, state, e1, e2)


def test_republish_after_window_counted(nats_server):
    """A republish later than the stream's duplicate window could be stored a second time (if an
    earlier try was stored and only its ack lost): it is counted, export_retried_late. Here the
    stream captures none of the exporter's subjects, so every publish is refused and retried
    with the back-off until MaxRetries, past a window of one second."""
    N = 200
    srv = nats_server()
    work = tempfile.mkdtemp(prefix="perfrelay-late-")
    e = None
    try:
        frames = os.path.join(work, "frames")
        write_frames(frames, [(0x8001, 7, 0, i, struct.pack("<Q", i)) for i in range(N)])
        e = Exporter(EXPORT, "late", [srv.url],
                     extra="MaxRetries=8\nAckTimeoutMSec=400\n[Stream]\nName=LATE\nSubjects=other.>\n"
                           "DuplicateWindowSec=1\n")
        check_eq(e.start("--input", frames).wait(120), 0, f"export exit status: {e.stderr()}")
        st = e.stats()
        check_eq((st["offered"], st["exported"], st["dropped_retries"]), (N, 0, N),
                 "every event refused until MaxRetries")
        check(0 < st["export_retried_late"] <= st["export_retried"],
              f"the retries past the one-second window are counted: {st}")
    finally:
        if e:
            e.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def test_packet_records_whole(root_and_bpf, nats_server):
    """A packet record's captured bytes travel with it (size = hdr.size + cap_len)."""
    srv = nats_server()
    work = tempfile.mkdtemp(prefix="perfrelay-packet-")
    e = None
    try:
        frames = os.path.join(work, "frames")
        data = bytes(range(200)) * 3
        recs = []
        for i, cap in enumerate((0, 1, 77, 600)):
            # struct perfrelay_packet after the header: cgroup_id, capture_id, ifindex,
            # orig_len, cap_len, protocol, direction, link, pad; then the bytes.
            fixed = struct.pack("<QIIIIHBB4x", 4242, 3, 1, 1500, cap, 0x0800, 0, 0)
            recs.append((6, 6, 0, i, fixed + data[:cap], HDR.size + len(fixed)))
        write_frames(frames, recs)
        e = Exporter(EXPORT, "packet", [srv.url])
        check_eq(e.start("--input", frames).wait(), 0, f"export exit status: {e.stderr()}")
        st = e.stats()
        check_eq((st["offered"], st["exported"], st["export_dropped"]), (4, 4, 0), "offered, exported, dropped")
        nc = NatsClient(srv.url)
        got = [rec for _, rs in stream_events(nc, "PERFRELAY") for _, rec, _ in rs]
        with open(frames, "rb") as f:
            raw = f.read()
        want, pos = [], 0
        while pos < len(raw):
            (n,) = struct.unpack_from("<I", raw, pos)
            want.append(raw[pos + 4:pos + 4 + n])
            pos += 4 + n
        check_eq(got, want, "the stream holds each packet record with all its bytes")
        nc.close()
    finally:
        if e:
            e.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def test_counters_across_restarts(root_and_bpf, nats_server):
    """The daemon's own counters events keep unique ids across restarts inside the duplicate
    window: every one the exporters were offered is in the stream, none taken for a duplicate."""
    srv = nats_server()
    d = Daemon(BINARY, "export-counters", stdout=False,
               config="[Probes]\nProbes=none\n[Counters]\nCounters=task-clock\nCountersIntervalMs=100\n")
    unit = UnitCgroup("export-counters")
    spinner = None
    exporters = []
    try:
        spinner = unit.popen(["sh", "-c", "while :; do :; done"])
        for i in range(3):
            d.start()
            e = Exporter(EXPORT, f"counters{i}", [srv.url], socket_path=d.socket_path,
                         extra="Types=counters\n").start()
            exporters.append(e)
            wait_for(lambda: (e.stats() or {}).get("offered", 0) >= 5, "five counters events offered", 30)
            check_eq(e.stop(), 0, "exporter exit status")
            d.stop()
        offered = exported = 0
        for e in exporters:
            st = e.stats()
            check_eq((st["duplicates"], st["export_dropped"]), (0, 0),
                     f"no counters event taken for a duplicate or dropped after a restart: {st}")
            check_eq(st["exported"], st["offered"], "every counters event acknowledged")
            offered += st["offered"]
            exported += st["exported"]
        nc = NatsClient(srv.url)
        ids = [(h[5], h[6], h[7]) for _, recs in stream_events(nc, "PERFRELAY") for h, _, _ in recs]
        check_eq(len(ids), offered, "the stream holds every counters event of the three daemons")
        check_eq(len(set(ids)), len(ids), "(producer, cpu, seq) never repeats across restarts")
        nc.close()
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()
        for e in exporters:
            e.cleanup()
        d.cleanup()
        unit.remove()


def test_ancestors_filter(root_and_bpf, nats_server):
    """Ancestors= (the socket's "ancestor" filter): the exec of a marker shell's child is
    exported, the marker's own exec and an exec outside its subtree are not; the stream holds
    exactly what the daemon offered the exporter (GetStats' client_list)."""
    from prtest.statsbus import PrivateBus

    srv = nats_server()
    bus = PrivateBus()
    d = Daemon(BINARY, "export-anc", config="[Probes]\nProbes=exec\n")
    e = None
    work = tempfile.mkdtemp(prefix="perfrelay-anc-")
    saved = os.environ.get("DBUS_SYSTEM_BUS_ADDRESS")
    try:
        os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address  # the daemon joins the test's bus
        d.start()
        if saved is None:
            del os.environ["DBUS_SYSTEM_BUS_ADDRESS"]
        else:
            os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = saved
        e = Exporter(EXPORT, "ancestors", [srv.url], socket_path=d.socket_path,
                     extra="Types=exec\nAncestors=prexpsh\n[Stream]\nName=ANC\n").start()
        nc = NatsClient(srv.url)
        wait_for(lambda: (e.stats() or {}).get("stream_ready"), "the exporter created its stream")
        sh = os.path.join(work, "prexpsh")
        shutil.copy(os.path.realpath("/bin/sh"), sh)
        inside, outside = (os.path.join(work, f"prexp{w}{os.getpid()}") for w in ("in", "out"))
        for m in (inside, outside):
            shutil.copy("/bin/true", m)
        subprocess.run([sh, "-c", f"{inside}; exit 0"], check=True)
        subprocess.run([outside], check=True)
        for m in (sh, inside, outside):
            d.wait_event(lambda ev: ev["type"] == "exec" and ev["filename"] == m, f"the exec of {m}")

        def offered():
            r = subprocess.run([CTL, "stats", "--json"], capture_output=True, text=True, timeout=30,
                               env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus.address))
            check_eq(r.returncode, 0, f"perfrelayctl stats: {r.stderr.strip()}")
            return [c["offered"] for c in json.loads(r.stdout)["client_list"]]
        # The daemon decided for the exporter when it published the events it printed above.
        check_eq(offered(), [1], "one exec offered to the exporter (its only client)")

        def stored():
            return [rec for _, recs in stream_events(nc, "ANC") for _, rec, _ in recs]
        recs = wait_for(lambda: stored() or None, "the exec in the stream")
        check_eq(len(recs), 1, "one record in the stream")
        check(inside.encode() in recs[0] and outside.encode() not in recs[0], "it is the marker's child's exec")
        nc.close()
    finally:
        if e:
            e.cleanup()
        d.cleanup()
        bus.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(__file__)
