#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelay-metrics: socket-activated (systemd-socket-activate, Accept=yes as in
perfrelay-metrics.socket) against a daemon on a private system-like bus; a real Prometheus
scrapes it and its HTTP API reports perfrelay_events_received_total > 0; promtool check metrics
accepts the exposition; on a quiet daemon every per-producer, per-CPU and client series equals
GetStats() exactly and the headline counters equal the D-Bus properties; bad requests are
refused."""
import json
import os
import shutil
import socket
import subprocess
import urllib.request

import pytest

from prtest import Daemon, Failure, UnitCgroup, check, check_eq, daemon_binary, main, skip, wait_for
from prtest.natstest import free_port
from prtest.statsbus import StatsBus

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
METRICS = os.path.join(BUILDDIR, "client", "metrics", "perfrelay-metrics")
BENCH = os.path.join(BUILDDIR, "bench", "perfrelay-bench")

for tool in ("dbus-daemon", "busctl", "prometheus", "promtool", "systemd-socket-activate"):
    if not shutil.which(tool):
        skip(f"{tool} is not installed")



@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf, workdir):
    global WORK
    WORK = workdir

def bus_u64(prop):
    r = subprocess.run(["busctl", "--system", "--json=short", "get-property", "org.perfrelay1", "/org/perfrelay1",
                        "org.perfrelay1.Manager", prop], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["data"]


def http(port, request):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(request)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode(), body.decode()


def samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = int(value) if value.lstrip("-").isdigit() else float(value)
    return out


def test_prometheus_scrapes_socket_activated_metrics():
    bus = StatsBus(BINARY)  # a private system bus; its address is exported to what we start
    # No probes: the only producer is a finished burst of perfrelay-bench, so the daemon is quiet
    # and what a scrape shows must equal GetStats() exactly.
    # Counters=none: the counters' charges follow the whole system's activity, and this test
    # checks that GetStats() stays put while the daemon is quiet.
    d = Daemon(BINARY, "metrics", stdout=False, config="[Probes]\nProbes=none\n[Counters]\nCounters=none\n")
    activate = prom = None
    try:
        d.start()
        r = subprocess.run([BENCH, "--mode", "daemon", "--pin-root", d.pin_path, "--clients", "0",
                            "--duration", "1", "--rate", "3000", "--settle-ms", "0",
                            "--producer-cpus", "0", "--consumer-cpu", "-1"], capture_output=True, text=True, timeout=60)
        check_eq(r.returncode, 0, f"perfrelay-bench exit status ({r.stderr.strip()})")
        settled = lambda: (lambda t: t["attempts"] > 0 and t["attempts"] == t["received"] + t["malformed"] + t["failures"]
                           + t["crash_lost"] and bus.stats())(bus.stats()["total"])
        st = wait_for(settled, "the readers took every record of the burst")

        port = free_port()
        stats = os.path.join(WORK, "export-stats.json")
        with open(stats, "w") as f:
            f.write('{"offered":7,"exported":5,"duplicates":0,"export_dropped":2,"export_retried":3,'
                    '"daemon_lost":0,"connected":true,'
                    '"nats":{"offered":7,"exported":5,"export_dropped":2,"export_retried":3,"queued":0},'
                    '"file":{"offered":7,"exported":6,"export_dropped":1,"dropped_refused":1,"rotations":4},'
                    '"resume":{"save_errors":1,"history_lost":{"history-behind":0,"history-retention":9,'
                    '"bad\\"key":5}}}\n')
        # Accept=yes, as perfrelay-metrics.socket: systemd passes each connection.
        activate = subprocess.Popen(["systemd-socket-activate", "-a", "-E", "DBUS_SYSTEM_BUS_ADDRESS", "-l", f"127.0.0.1:{port}", METRICS,
                                     f"--export-stats={stats}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        def listening():
            if activate.poll() is not None:
                raise Failure(f"systemd-socket-activate exited: {activate.stderr.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(listening, "the metrics socket")

        head, body = http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        check(head.startswith("HTTP/1.1 200"), f"status line: {head.splitlines()[0]}")
        check("text/plain; version=0.0.4" in head, "Prometheus text format without an OpenMetrics Accept")
        s = samples(body)
        check_eq(bus.stats(), st, "GetStats() did not move while the daemon was quiet")
        check_eq(s["perfrelay_events_received_total"], bus_u64("EventsReceived"), "perfrelay_events_received_total")
        for p in st["producers"]:
            for key, name in (("hits", "hits"), ("filtered", "filtered"),
                              ("attempts", "attempts"), ("received", "received"), ("failures", "emit_failures"),
                              ("failures_downtime", "emit_failures_downtime"), ("malformed", "malformed"),
                              ("crash_lost", "crash_lost"), ("seq_gaps", "seq_gaps")):
                check_eq(s[f'perfrelay_producer_{name}_total{{producer="{p["id"]}"}}'], p[key],
                         f"producer {p['id']} {key}")
        check(any(p["attempts"] > 0 for p in st["producers"]), f"the burst's producer is listed: {st['producers']}")
        for c in st["cpus"]:
            for key, name in (("received", "events_received"), ("lost", "events_lost"), ("malformed", "malformed"),
                              ("failures", "producer_failures"), ("corrupt", "corrupt")):
                check_eq(s[f'perfrelay_cpu_{name}_total{{cpu="{c["cpu"]}"}}'], c[key], f"cpu {c['cpu']} {key}")
        for name, p in st["probes"].items():
            if isinstance(p, dict):
                for key in ("hits", "filtered", "runs"):
                    check_eq(s[f'perfrelay_probe_{key}_total{{probe="{name}"}}'], p[key], f"probe {name} {key}")
                got = s[f'perfrelay_probe_run_seconds_total{{probe="{name}"}}']
                check(abs(got - p["run_ns"] / 1e9) < 1e-9, f"probe {name} run seconds: {got}, run_ns {p['run_ns']}")
                check_eq(s[f'perfrelay_probe_attached{{probe="{name}"}}'], int(p["attached"]), f"probe {name} attached")
        for key, name in (("offered", "offered"), ("delivered", "sent"), ("dropped", "dropped")):
            check_eq(s[f"perfrelay_client_events_{name}_total"], st["clients"][key], f"clients {key}")
        for section, fields in (("recorder", (("written", "recorder_written"), ("paused", "recorder_paused"),
                                              ("failed", "recorder_failed"), ("snapshots", "recorder_snapshots"))),
                                ("producer_scan", (("scans", "producer_scans"), ("refused", "producer_types_refused"),
                                                   ("bad_declarations", "producer_bad_declarations"))),
                                ("capture", (("started", "captures_started"), ("stopped", "captures_stopped"),
                                             ("refused", "captures_refused"), ("seen", "capture_packets_seen"),
                                             ("captured", "capture_packets_captured"),
                                             ("rate_dropped", "capture_packets_rate_dropped"),
                                             ("failed", "capture_packets_failed"))),
                                ("shared", (("rings", "shared_rings"), ("bytes", "shared_bytes"),
                                            ("clients", "shared_clients"), ("fallbacks", "shared_fallbacks"),
                                            ("hostile", "shared_hostile")))):
            for key, name in fields:
                gauge = (section == "producer_scan" and key in ("refused", "bad_declarations")) or \
                    (section == "shared" and key in ("rings", "bytes", "clients"))
                total = "" if gauge else "_total"
                check_eq(s[f"perfrelay_{name}{total}"], st[section][key], f"{section} {key}")
        check(st["recorder"]["written"] > 0, f"the flight recorder took the burst: {st['recorder']}")
        check_eq(s["perfrelay_up"], 1, "perfrelay_up")
        check_eq((s["perfrelay_export_offered_total"], s["perfrelay_export_acked_total"],
                  s["perfrelay_export_dropped_total"], s["perfrelay_export_retried_total"]), (7, 5, 2, 3),
                 "export counters from the exporter's stats file")
        check_eq((s['perfrelay_export_target_exported_total{target="nats"}'],
                  s['perfrelay_export_target_exported_total{target="file"}'],
                  s['perfrelay_export_target_dropped_refused_total{target="file"}'],
                  s['perfrelay_export_target_rotations_total{target="file"}'],
                  s['perfrelay_export_target_queued{target="nats"}']), (5, 6, 1, 4, 0),
                 "each target's figures, labelled with its name")
        check_eq((s['perfrelay_export_history_lost_total{reason="history-retention"}'],
                  s['perfrelay_export_history_lost_total{reason="history-behind"}'],
                  s["perfrelay_export_cursor_save_errors_total"]), (9, 0, 1),
                 "a resuming exporter's history gaps by reason, and its failed cursor writes")
        check(not any('reason="bad' in k for k in s), "a key the exporter never writes is no label")

        r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
        check_eq(r.returncode, 0, f"promtool check metrics: {r.stdout}{r.stderr}")
        # The alert rules docs/fleet.md gives are valid, and name series this exposition has.
        fleet = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "fleet.md")).read()
        rules = fleet.split("Example alert rules", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
        rules_file = os.path.join(WORK, "rules.yml")
        with open(rules_file, "w") as f:
            f.write(rules)
        r = subprocess.run(["promtool", "check", "rules", rules_file], capture_output=True, text=True)
        check_eq(r.returncode, 0, f"promtool check rules (docs/fleet.md): {r.stdout}{r.stderr}")
        names = {k.split("{")[0] for k in s}
        for metric in ("perfrelay_up", "perfrelay_events_lost_total", "perfrelay_producer_failures_total",
                       "perfrelay_producer_crash_lost_total", "perfrelay_client_drops_total",
                       "perfrelay_export_dropped_total", "perfrelay_export_connected"):
            check(metric in rules and metric in names, f"{metric} is in the rules and in the exposition")
        head, body = http(port, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n")
        check("application/openmetrics-text" in head, "OpenMetrics on request")
        check(body.endswith("# EOF\n"), "an OpenMetrics exposition ends with # EOF")

        check(http(port, b"GET /other HTTP/1.1\r\n\r\n")[0].startswith("HTTP/1.1 404"), "404 for other paths")
        check(http(port, b"POST /metrics HTTP/1.1\r\n\r\n")[0].startswith("HTTP/1.1 405"), "405 for POST")
        check(http(port, b"GET /metrics\r\n\r\n")[0].startswith("HTTP/1.1 400"), "400 without a version")
        check(http(port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n")[0].startswith("HTTP/1.1 431"),
              "431 for a request beyond 8 KiB")

        # A real Prometheus scrapes the socket every second.
        pport = free_port()
        conf = os.path.join(WORK, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: perfrelay\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
        prom = subprocess.Popen(["prometheus", f"--config.file={conf}", f"--storage.tsdb.path={WORK}/tsdb",
                                 f"--web.listen-address=127.0.0.1:{pport}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def query():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{pport}/api/v1/query?query="
                                            "perfrelay_events_received_total", timeout=5) as r:
                    res = json.load(r)["data"]["result"]
            except OSError:
                return None
            return res and float(res[0]["value"][1])
        v = wait_for(query, "Prometheus has a perfrelay_events_received_total sample", 60, interval=0.5)
        check(v > 0, f"perfrelay_events_received_total in Prometheus: {v}")
    finally:
        for p in (prom, activate):
            if p and p.poll() is None:
                p.terminate()
                p.wait(30)
        d.cleanup()
        bus.close()


def test_unit_counters():
    """A unit's perf counter totals: once its process has ended they stay put, and the scrape's
    perfrelay_unit_perf_events_total{unit,cgroup_id,counter} equals GetUnitCounters() exactly."""
    bus = StatsBus(BINARY)
    d = Daemon(BINARY, "metrics-units", stdout=False,
               config="[Probes]\nProbes=none\n[Counters]\nCounters=task-clock context-switches\nCountersIntervalMs=100\n")
    unit = UnitCgroup("metrics-units")
    try:
        d.start()
        # A burst of CPU and switches in the unit, then nothing: its totals stop moving.
        check_eq(unit.popen(["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.05"]).wait(), 0,
                 "the unit's work exit status")

        def unit_totals():
            r = subprocess.run(["busctl", "--system", "--json=short", "call", "org.perfrelay1", "/org/perfrelay1",
                                "org.perfrelay1.Manager", "GetUnitCounters"], capture_output=True, text=True, check=True)
            rows = [u for u in json.loads(r.stdout)["data"][0] if u[1] == unit.id]
            return rows[0] if rows else None
        # Final once two readings an interval and more apart agree: the exit's last charge comes
        # with the interval after it, which the first reading may precede.
        last = [None]

        def settled():
            u, prev = unit_totals(), last[0]
            last[0] = u
            return u if u and u[2].get("task_clock_ns", 0) > 0 and u == prev else None
        before = wait_for(settled, "the unit's counters in GetUnitCounters(), settled", interval=0.3)
        port = free_port()
        metrics = subprocess.Popen([METRICS, f"--listen=127.0.0.1:{port}"], stderr=subprocess.PIPE)
        try:
            def scrape():
                try:
                    return http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")[1]
                except OSError:
                    return None
            body = wait_for(scrape, "perfrelay-metrics answering on --listen")
        finally:
            metrics.terminate()
            metrics.wait(30)
        s = samples(body)
        check_eq(unit_totals(), before, "the ended unit's totals stayed put")
        for key in ("task_clock_ns", "context_switches"):
            check_eq(s.get(f'perfrelay_unit_perf_events_total{{unit="{unit.name}",cgroup_id="{unit.id}",counter="{key}"}}'),
                     before[2][key], f"perfrelay_unit_perf_events_total of the unit's {key} = GetUnitCounters()")
        r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
        check_eq(r.returncode, 0, f"promtool check metrics: {r.stdout}{r.stderr}")
    finally:
        d.cleanup()
        unit.remove()
        bus.close()


if __name__ == "__main__":
    main(__file__)
