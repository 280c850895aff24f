#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelay-export against a real nats-server -js on a loopback port: a marker command's exec
event arrives in the stream with its subject, headers and message id; perfrelayctl monitor
--nats shows it; counters add up exactly; replaying the same events after a restart stores no
duplicate."""
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile

from prtest import Daemon, Failure, check, check_eq, require_root_and_bpf, run_tests, skip
from natstest import NatsClient, NatsServer, require_nats_server, wait_for
from exporttest import HDR, Exporter, boot_id, write_frames

BINARY = sys.argv[1]
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
EXPORT = os.path.join(BUILDDIR, "client", "export", "perfrelay-export")
CTL = os.path.join(BUILDDIR, "client", "perfrelayctl")

require_root_and_bpf()
require_nats_server()
if not os.access(EXPORT, os.X_OK):
    skip("perfrelay-export was not built (libnats-dev missing)")

HOST = socket.gethostname().replace(".", "_")


def find_message(nc, stream, pred):
    n = nc.stream_info(stream)["state"]["last_seq"]
    for seq in range(1, n + 1):
        m = nc.get(stream, seq)
        if pred(m):
            return m
    return None


def test_marker_exec_in_stream():
    srv = NatsServer().start()
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
        subprocess.run([marker], check=True)
        m = wait_for(lambda: find_message(nc, "FLEET", lambda m: marker.encode() in m[2]),
                     "the marker's exec event in the stream")
        subject, headers, data = m
        check_eq(subject, f"perfrelay.{HOST}.exec", "subject")
        _, _, _, typ, size, producer, cpu, seq, _ = HDR.unpack(data[:HDR.size])
        check_eq(len(data), size, "the message is the whole record")
        check_eq(headers.get("Nats-Msg-Id"), f"{boot_id()}.{producer}.{cpu}.{seq}", "message id")
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

        check_eq(e.stop(), 0, "exporter exit status after SIGTERM")
        st = e.stats()
        check(st["offered"] > 0, "the exporter was offered events")
        check_eq(st["exported"] + st["export_dropped"], st["offered"], "exported + export_dropped = offered")
        check_eq(st["export_dropped"], 0, "nothing dropped by a healthy server")
        check_eq(nc.stream_messages("FLEET"), st["exported"] - st["duplicates"], "stream messages = exported")
        nc.close()
    finally:
        if e:
            e.cleanup()
        d.cleanup()
        srv.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def test_replay_adds_no_duplicates():
    N = 2000
    srv = NatsServer().start()
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
        check_eq(nc.stream_messages("PERFRELAY"), N, "stream messages after the first export")
        subject, headers, _ = nc.get("PERFRELAY", N)
        check_eq(subject, f"perfrelay.{HOST}.t32769", "subject of a type without a name")
        check_eq(headers["Nats-Msg-Id"], f"{boot_id()}.7.1.{(N - 1) // 2}", "message id of the last record")

        # The same events again, as after a crash between publish and ack: same ids, so the
        # duplicate window acknowledges every one as a duplicate and stores none.
        e2 = Exporter(EXPORT, "replay2", [srv.url])
        check_eq(e2.start("--input", frames).wait(), 0, "replay exit status")
        st = e2.stats()
        check_eq((st["offered"], st["exported"], st["duplicates"], st["export_dropped"]), (N, N, N, 0),
                 "replay: offered, exported, duplicates, dropped")
        check_eq(nc.stream_messages("PERFRELAY"), N, "stream messages after the replay")
        nc.close()
    finally:
        for e in (e1, e2):
            if e:
                e.cleanup()
        srv.cleanup()
        shutil.rmtree(work, ignore_errors=True)


run_tests([test_marker_exec_in_stream, test_replay_adds_no_duplicates])
