#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelay-export's OTLP target against a receiver that decodes OTLP/HTTP logs with the
OpenTelemetry project's own code (otlp-receiver.js under Debian's nodejs, npm's
@opentelemetry/otlp-transformer): a marker command's exec arrives as a LogRecord with its
fields as the body, its type, pid and unit as attributes and the host as resource, over
http/protobuf (plain and gzip'd) and http/json; a third-party producer's record arrives with the
named fields of its BTF declaration; a receiver that answers 503 for a while gets everything in the
end, retries counted; the exporter's books balance exactly against what the receiver decoded."""
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time

import pytest

from prtest import Daemon, UnitCgroup, check, check_eq, daemon_binary, main, skip, wait_for
from prtest.exporttest import Exporter, boot_id, write_frames
from prtest.otlpreceiver import Receiver, ensure_node_modules

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
EXPORT = os.path.join(BUILDDIR, "client", "export", "perfrelay-export")
EXAMPLE = os.path.join(BUILDDIR, "examples", "example-producer")
if not os.access(EXPORT, os.X_OK):
    skip("perfrelay-export was not built (libnats-dev, libcurl4-openssl-dev or libprotobuf-c-dev missing)")
if not shutil.which("node") or not shutil.which("npm"):
    skip("nodejs/npm are not installed (scripts/lib.sh installs them)")



@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf):
    pass


def otlp_conf(endpoint, protocol, extra="", compression="none"):
    return (f"[Export]\nTargets=otlp\n{extra}[OTLP]\nEndpoint={endpoint}\nProtocol={protocol}\n"
            f"Compression={compression}\n")


def marker_exec(protocol, compression="none"):
    ensure_node_modules()
    rcv = Receiver()
    d = Daemon(BINARY, "otlp", stdout=False, config="[Probes]\nProbes=exec\n")
    work = tempfile.mkdtemp(prefix="perfrelay-otlp-marker-")
    e = unit = None
    try:
        d.start()
        e = Exporter(EXPORT, "otlp", ["nats://127.0.0.1:1"], socket_path=d.socket_path,
                     extra="Types=exec\n" + otlp_conf(rcv.endpoint, protocol, compression=compression)).start()
        wait_for(lambda: e.stats() is not None, "the exporter's first stats")
        marker = os.path.join(work, f"prmark{os.getpid()}")
        shutil.copy("/bin/true", marker)
        unit = UnitCgroup("otlp")
        check_eq(unit.popen([marker, "otlp-marker-arg"]).wait(), 0, "the marker's exit status")
        rec = wait_for(lambda: next((r for r in rcv.records()
                                     if isinstance(r["body"], dict) and r["body"].get("filename") == marker), None),
                       "the marker's exec as an OTLP log record")
        body = rec["body"]
        check_eq(body.get("type"), "exec", "the body is the event's JSON fields: type")
        check_eq(body.get("argv"), [marker, "otlp-marker-arg"], "body argv")
        check_eq(body.get("unit"), unit.name, "body unit")
        check_eq(rec["attributes"], {"perfrelay.type": "exec", "process.pid": body["pid"], "systemd.unit": unit.name},
                 "attributes: type, pid, unit")
        check_eq(rec["resource"].get("service.name"), "perfrelay", "resource service.name")
        check_eq(rec["resource"].get("host.name"), socket.gethostname(), "resource host.name")
        check_eq(rec["resource"].get("perfrelay.boot_id"), boot_id(), "resource perfrelay.boot_id")
        check_eq(rec["severity"], 9, "severity INFO")
        check(abs(int(rec["time"]) / 1e9 - time.time()) < 60, f"time is wall-clock nanoseconds: {rec['time']}")
        check_eq(rec["json"], protocol == "http/json", "the request's content type")

        check_eq(e.stop(), 0, "exporter exit status after SIGTERM")
        st = e.stats()
        o = st["otlp"]
        check("nats" not in st, f"only the targets named are run: {list(st)}")
        check(o["offered"] > 0, "the exporter was offered events")
        check_eq(o["exported"] + o["export_dropped"], o["offered"], "exported + export_dropped = offered")
        check_eq(o["export_dropped"], 0, "nothing dropped by a healthy receiver")
        check_eq(len(rcv.records()), o["exported"], "the receiver decoded exactly the exported events")
        counts = rcv.stop()
        check_eq(counts["gzipped"], counts["requests"] if compression == "gzip" else 0,
                 f"requests with Content-Encoding: gzip ({counts})")
    finally:
        if e:
            e.cleanup()
        if unit:
            unit.remove()
        d.cleanup()
        rcv.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def test_marker_exec_protobuf():
    marker_exec("http/protobuf")


def test_marker_exec_json():
    marker_exec("http/json")


def test_marker_exec_protobuf_gzip():
    marker_exec("http/protobuf", "gzip")


def test_btf_producer_fields():
    """A third-party producer's record type, declared in its BTF (examples/producer): its records
    reach the collector with their named fields, as a JSON client gets them, from the schema the
    daemon sent the exporter (libperfrelay's perfrelay_record_field())."""
    if not os.access(EXAMPLE, os.X_OK):
        skip("the example producer was not built")
    ensure_node_modules()
    N = 10
    rcv = Receiver()
    d = Daemon(BINARY, "otlpbtf", stdout=False, config="[Probes]\nProbes=exec\n")
    e = p = None
    try:
        d.start()
        p = subprocess.Popen([EXAMPLE, d.pin_path, "0", "0", "--stdin"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        check_eq(json.loads(line) if line else None, {"emitted": 0}, "the example producer loaded")
        e = Exporter(EXPORT, "otlpbtf", ["nats://127.0.0.1:1"], socket_path=d.socket_path,
                     extra=otlp_conf(rcv.endpoint, "http/protobuf")).start()
        wait_for(lambda: e.stats() is not None, "the exporter's first stats")
        p.stdin.write(f"{N}\n")
        p.stdin.flush()
        check_eq(json.loads(p.stdout.readline()), {"emitted": N}, "the example producer emitted")
        recs = wait_for(lambda: (lambda r: r if len(r) == N else None)(
            [r for r in rcv.records() if isinstance(r["body"], dict) and r["body"].get("type") == "example"]),
            f"{N} example records at the receiver")
        for n, rec in enumerate(sorted(recs, key=lambda r: r["body"]["seq"])):
            b = rec["body"]
            want = {"type": "example", "producer": 300, "producer_name": "example_producer",
                    "u8v": 200 + (n & 15), "u16v": 60000 + n, "u32v": 4000000000 + n, "s32v": -2000000000 + n,
                    "color": "EXAMPLE_BLUE" if n & 1 else "EXAMPLE_GREEN", "name": "example",
                    "point": {"x": n * 2, "y": -n, "_pad": 0}, "values": [n, n + 1, n + 2]}
            check_eq({k: b.get(k) for k in want}, want, f"record {n}'s named fields")
            check_eq(rec["attributes"].get("perfrelay.type"), "example", "its type attribute")
        check_eq(e.stop(), 0, "exporter exit status")
        o = e.stats()["otlp"]
        check_eq(o["exported"] + o["export_dropped"], o["offered"], "exported + export_dropped = offered")
        check_eq(o["export_dropped"], 0, "nothing dropped")
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        if e:
            e.cleanup()
        d.cleanup()
        rcv.cleanup()


def test_503_then_everything():
    """A receiver that refuses the first requests with 503 + Retry-After: the exporter backs
    off, retries and delivers every event exactly once, with the retries counted."""
    ensure_node_modules()
    N = 5000
    rcv = Receiver(fail_first=3)
    work = tempfile.mkdtemp(prefix="perfrelay-otlp-503-")
    e = None
    try:
        frames = os.path.join(work, "frames")
        write_frames(frames, [(0x8001, 7, i % 2, i // 2, struct.pack("<Q", i)) for i in range(N)])
        e = Exporter(EXPORT, "otlp503", ["nats://127.0.0.1:1"],
                     extra=otlp_conf(rcv.endpoint, "http/protobuf", "QueueEvents=1000\n") + "BatchEvents=500\n")
        t0 = time.monotonic()
        check_eq(e.start("--input", frames).wait(120), 0, f"export exit status: {e.stderr()}")
        o = e.stats()["otlp"]
        check_eq((o["offered"], o["exported"], o["export_dropped"]), (N, N, 0), "offered, exported, dropped")
        check(o["export_retried"] >= 500, f"the refused requests' events were retried: {o}")
        check(time.monotonic() - t0 >= 1.0, "Retry-After: 1 was honoured")
        recs = rcv.records()
        calls = sorted(r["body"]["seq"] * 2 + r["body"]["cpu"] for r in recs)
        check_eq(calls, list(range(N)), "the receiver got every event exactly once")
        counts = rcv.stop()
        check_eq(counts["refused"], 3, "the receiver refused three requests")
        check_eq(counts["requests"], 3 + N // 500, "requests: the refused three, then one per batch")
    finally:
        if e:
            e.cleanup()
        rcv.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(__file__)
