#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Runs inside the booted container (real systemd as PID 1, real system bus): every step of
the service's life that a user relies on, each an assertion. Prints "ok NAME" per step and a
closing count; exits 1 on the first failure (later steps depend on earlier ones)."""
import functools
import json
import os
import re
import signal
import socket
import subprocess
import struct
import sys

import prtest  # copied beside this file by test_systemd.py
from prtest import SocketClient, free_port, wait_for

PIN = sys.argv[1]          # the test's pin root (a drop-in sets PinPath= to it)
SOCK = "/run/perfrelay/events.sock"


def command(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({r.returncode}): {r.stdout} {r.stderr}")
    return r


def show(prop):
    return command("systemctl", "show", "-p", prop, "--value", "perfrelay.service").stdout.strip()


def report(name, e):
    print(f"FAIL {name}: {e}")
    print(command("journalctl", "-u", "perfrelay.service", "-u", "perfrelay.socket", "-u", "perfrelay-export.service",
              "-u", "perfrelay-metrics@*", "-u", "dbus.service", "--no-pager", "-n", "60", check=False).stdout)
    print(f"{prtest.steps_passed} passed, 1 failed")
    sys.exit(1)


step = functools.partial(prtest.step, on_failure=report)


def client():
    """A subscriber to the marker's execs (socket activation may start the daemon first)."""
    c = SocketClient(SOCK, {"subscribe": {"types": ["exec"], "comm": ["prsys-marker"]}})
    c.hello(timeout=30)
    return c


def marker(tag):
    p = subprocess.run(["/usr/local/bin/prsys-marker", tag])
    return p


def events_map_id():
    return json.loads(command("bpftool", "-j", "map", "show", "pinned", f"{PIN}/events").stdout)["id"]


def exec_failures():
    out = json.loads(command("bpftool", "-j", "map", "lookup", "pinned", f"{PIN}/counters", "key", "1", "0", "0", "0").stdout)
    total = 0
    for v in out["values"]:
        val = v.get("formatted", v)["value"] if isinstance(v.get("value"), list) and "formatted" in v else v["value"]
        if isinstance(val, dict):
            total += val["failures"]
        else:  # raw bytes (no BTF for the map's value): attempts u64, failures u64, little-endian
            total += int.from_bytes(bytes(int(b, 16) for b in val[8:16]), "little")
    return total


state = {}


@step("units verify")
def _():
    r = command("systemd-analyze", "verify", "--man=no", "/lib/systemd/system/perfrelay.service",
            "/lib/systemd/system/perfrelay.socket", check=False)
    assert r.returncode == 0 and not r.stderr.strip(), f"systemd-analyze verify: {r.stderr}"


@step("security exposure <= 1.5")
def _():
    out = command("systemd-analyze", "security", "--no-pager", "perfrelay.service").stdout
    m = re.search(r"Overall exposure level for perfrelay.service: ([\d.]+)", out)
    assert m, out[-500:]
    state["exposure"] = float(m.group(1))
    print(f"exposure {m.group(1)}")
    assert state["exposure"] <= 1.5, f"exposure {m.group(1)}"


@step("socket activation: the first client gets its hello and events")
def _():
    command("systemctl", "enable", "perfrelay.socket", "perfrelay.service")
    command("systemctl", "start", "perfrelay.socket")
    assert show("ActiveState") == "inactive", "the service waits for the first client"
    c = client()
    assert show("ActiveState") == "active", "the client started the service"
    marker("activation")
    ev = c.wait(lambda m: m.get("type") == "exec" and m.get("argv", [None, None])[1:] == ["activation"],
                "the marker's exec", timeout=30)
    assert ev["comm"] == "prsys-marker"
    state["pid"] = show("MainPID")


@step("status on the system bus")
def _():
    st = json.loads(command("busctl", "--json=short", "get-property", "org.perfrelay1", "/org/perfrelay1",
                        "org.perfrelay1.Manager", "State").stdout)["data"]
    assert st == "running", st
    pin = json.loads(command("busctl", "--json=short", "get-property", "org.perfrelay1", "/org/perfrelay1",
                         "org.perfrelay1.Manager", "PinPath").stdout)["data"]
    assert pin == PIN, pin
    # STATUS= is refreshed every second with live figures.
    wait_for(lambda: show("StatusText").startswith("Running:") and "events/s" in show("StatusText"),
             f"STATUS= with live figures (last: {show('StatusText')!r})", timeout=10)
    # The process table was seeded from the BPF task iterator under the hardened unit
    # (capabilities, system call filter): the container's systemd is in perfrelayctl tree.
    procs = json.loads(command("perfrelayctl", "stats", "--json").stdout)["processes"]
    assert procs["seeded"] > 0 and procs["live"] > 0, f"the process table's seed: {procs}"
    rows = json.loads(command("perfrelayctl", "tree", "--json").stdout)
    assert any(r["comm"] == "systemd" for r in rows), f"perfrelayctl tree lists systemd: {rows[:5]}"


@step("reload applies Probes=")
def _():
    with open("/etc/perfrelay/perfrelay.conf.d/60-probes.conf", "w") as f:
        f.write("[Probes]\nProbes=exec exit\n")
    command("systemctl", "reload", "perfrelay.service")
    wait_for(lambda: set(json.loads(command("busctl", "--json=short", "get-property", "org.perfrelay1",
                                        "/org/perfrelay1", "org.perfrelay1.Manager",
                                        "Probes").stdout)["data"]) == {"exec", "exit"},
             "Probes after reload")
    assert show("MainPID") == state["pid"], "reload keeps the process"
    assert not os.path.exists(f"{PIN}/links/handle_open_enter"), "the open probe was detached"
    os.unlink("/etc/perfrelay/perfrelay.conf.d/60-probes.conf")
    command("systemctl", "reload", "perfrelay.service")


@step("restart reuses the pins and events flow again")
def _():
    map_id = events_map_id()
    command("systemctl", "restart", "perfrelay.service")
    assert show("MainPID") != state["pid"], "a new process"
    assert events_map_id() == map_id, "the array is reused"
    c = client()
    marker("restart")
    c.wait(lambda m: m.get("argv", [None])[1:] == ["restart"], "exec after restart", timeout=30)
    state["pid"] = show("MainPID")


@step("SIGKILL: systemd restarts it and the producers count the gap")
def _():
    before = exec_failures()
    command("systemctl", "kill", "-s", "KILL", "perfrelay.service")
    wait_for(lambda: show("SubState") == "auto-restart", "auto-restart after SIGKILL", timeout=10)
    for i in range(5):
        marker(f"gap{i}")
    gap = exec_failures() - before
    assert gap >= 5, f"exec failures while down: {gap}"
    wait_for(lambda: show("ActiveState") == "active" and show("MainPID") not in ("0", state["pid"]),
             "restarted by systemd")
    c = client()
    marker("after-kill")
    c.wait(lambda m: m.get("argv", [None])[1:] == ["after-kill"], "exec after the automatic restart", timeout=30)
    state["pid"] = show("MainPID")


@step("watchdog: a stalled reader gets the service restarted")
def _():
    restarts = int(show("NRestarts"))
    os.kill(int(state["pid"]), signal.SIGUSR2)  # fault injection: reader 0 stops making progress
    wait_for(lambda: int(show("NRestarts")) > restarts, "a restart after the watchdog fired", timeout=30)
    log = command("journalctl", "-u", "perfrelay.service", "--no-pager").stdout
    assert "Watchdog timeout" in log, "systemd says the watchdog fired"
    assert "withholding WATCHDOG=1" in log, "the daemon said why"
    wait_for(lambda: show("ActiveState") == "active", "active again")
    state["pid"] = show("MainPID")


@step("watchdog: with the largest FlushIntervalMs= a stalled reader is noticed too")
def _():
    # A reader then sleeps a whole second between rounds, as long as a health tick: the stall
    # is judged by the age of its last round, not by rounds per tick.
    conf = "/etc/perfrelay/perfrelay.conf.d/60-flush.conf"
    with open(conf, "w") as f:
        f.write("[Ring]\nFlushIntervalMs=1000\n")
    try:
        command("systemctl", "restart", "perfrelay.service")
        wait_for(lambda: show("ActiveState") == "active", "active with FlushIntervalMs=1000")
        state["pid"] = show("MainPID")
        restarts = int(show("NRestarts"))
        since = command("date", "+%Y-%m-%d %H:%M:%S").stdout.strip()
        os.kill(int(state["pid"]), signal.SIGUSR2)  # fault injection: reader 0 stops making progress
        wait_for(lambda: int(show("NRestarts")) > restarts, "a restart after the watchdog fired", timeout=30)
        log = command("journalctl", "-u", "perfrelay.service", "--no-pager", "--since", since).stdout
        assert "Watchdog timeout" in log, "systemd says the watchdog fired"
        assert "withholding WATCHDOG=1" in log, "the daemon said why"
    finally:
        os.unlink(conf)
    command("systemctl", "restart", "perfrelay.service")
    wait_for(lambda: show("ActiveState") == "active", "active again")
    state["pid"] = show("MainPID")


def export_stats():
    try:
        with open("/run/perfrelay-export/stats.json") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


@step("export and metrics units verify; their exposure")
def _():
    r = command("systemd-analyze", "verify", "--man=no", "/lib/systemd/system/perfrelay-export.service",
            "/lib/systemd/system/perfrelay-metrics.socket", check=False)
    assert r.returncode == 0 and not r.stderr.strip(), f"systemd-analyze verify: {r.stderr}"
    for unit in ("perfrelay-export.service", "perfrelay-metrics@0.service"):
        out = command("systemd-analyze", "security", "--no-pager", unit).stdout
        m = re.search(r"Overall exposure level for \S+: ([\d.]+)", out)
        assert m, out[-500:]
        print(f"{unit} exposure {m.group(1)}")
        assert float(m.group(1)) <= 2.5, f"{unit} exposure {m.group(1)}"


@step("perfrelay-export.service publishes the marker's exec to JetStream, as a dynamic user")
def _():
    port = free_port()
    state["nats"] = f"nats://127.0.0.1:{port}"
    command("systemd-run", "--unit=prtest-nats", "--property=Type=exec", "/usr/sbin/nats-server", "-js",
        "-a", "127.0.0.1", "-p", str(port), "-sd", "/var/tmp/prtest-nats")

    def listening():
        with socket.socket() as c:
            return c.connect_ex(("127.0.0.1", port)) == 0
    wait_for(listening, "nats-server listening")
    os.makedirs("/etc/perfrelay/export.conf.d", exist_ok=True)
    with open("/etc/perfrelay/export.conf.d/50-test.conf", "w") as f:
        f.write(f"[NATS]\nServers={state['nats']}\n[Export]\nTypes=exec\n")
    command("systemctl", "start", "perfrelay-export.service")
    wait_for(lambda: (export_stats() or {}).get("stream_ready"), "the exporter made its stream")
    user = command("systemctl", "show", "-p", "User", "--value", "perfrelay-export.service").stdout.strip()
    pid = command("systemctl", "show", "-p", "MainPID", "--value", "perfrelay-export.service").stdout.strip()
    with open(f"/proc/{pid}/status") as f:
        uid = int(next(l for l in f if l.startswith("Uid:")).split()[1])
    assert uid != 0, f"perfrelay-export runs as uid {uid} (User={user})"
    marker("exported")

    def in_stream():
        out = command("perfrelayctl", "monitor", "--nats", state["nats"], "--since", "10m", "--no-follow", "--json").stdout
        evs = [json.loads(l) for l in out.splitlines() if l.strip()]
        return any(e.get("type") == "exec" and e.get("argv", [None])[1:] == ["exported"] for e in evs)
    wait_for(in_stream, "the marker's exec in the JetStream stream (perfrelayctl monitor --nats)")
    # The stats file is rewritten every second: wait until it has caught up with the stream.
    wait_for(lambda: (lambda st: st and st["exported"] >= 1 and st["queued"] == 0 and st["in_flight"] == 0)(
        export_stats()), "the exporter's stats file shows the export, idle")
    st = export_stats()
    assert st["export_dropped"] == 0, f"nothing dropped: {st}"


@step("perfrelay-metrics.socket serves /metrics from GetStats() and the exporter's stats")
def _():
    port = free_port()
    os.makedirs("/etc/systemd/system/perfrelay-metrics.socket.d", exist_ok=True)
    with open("/etc/systemd/system/perfrelay-metrics.socket.d/50-test.conf", "w") as f:
        f.write(f"[Socket]\nListenStream=\nListenStream=127.0.0.1:{port}\n")
    command("systemctl", "daemon-reload")
    command("systemctl", "start", "perfrelay-metrics.socket")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := c.recv(65536):
            data += chunk
    head, _, body = data.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200"), head
    samples = dict(l.rsplit(" ", 1) for l in body.splitlines() if l and not l.startswith("#"))
    assert samples.get("perfrelay_up") == "1", f"perfrelay_up: {samples.get('perfrelay_up')} (the dynamic user reads D-Bus)"
    assert int(samples.get('perfrelay_producer_received_total{producer="1"}', 0)) > 0, "the probes' received"
    assert int(samples.get("perfrelay_export_acked_total", 0)) >= 1, \
        f"the exporter's acknowledged events: {samples.get('perfrelay_export_acked_total')} (stats file: {export_stats()})"
    command("systemctl", "stop", "perfrelay-metrics.socket", "perfrelay-export.service", "prtest-nats.service")


@step("a unit that fails: perfrelay-snapshot@ saves its window, with the unit's exec")
def _():
    command("systemctl", "start", "perfrelay.service")
    with open("/etc/systemd/system/prtest-fail.service", "w") as f:
        f.write("[Unit]\nOnFailure=perfrelay-snapshot@%n.service\n"
                "[Service]\nType=oneshot\nExecStart=/bin/sh -c 'exit 3' prsys-fail-marker\n")
    command("systemctl", "daemon-reload")
    r = command("systemctl", "start", "prtest-fail.service", check=False)
    assert r.returncode != 0, "the unit failed"

    def saved():
        out = command("perfrelayctl", "snapshots", check=False).stdout
        return [l.split()[-1] for l in out.splitlines() if "/prtest-fail.service-" in l]
    try:
        path = wait_for(saved, "the snapshot of the failed unit (perfrelayctl snapshots)")[0]
    except AssertionError as e:
        log = command("journalctl", "-u", "perfrelay-snapshot@prtest-fail.service.service", "-u", "prtest-fail.service",
                  "--no-pager", check=False).stdout
        state_ = command("systemctl", "status", "perfrelay-snapshot@prtest-fail.service.service", check=False).stdout
        raise AssertionError(f"{e}\n{log[-3000:]}\n{state_[-1500:]}")
    with open(path) as f:
        lines = [json.loads(l) for l in f]
    assert lines[-1]["type"] == "snapshot", lines[-1]
    execs = [e for e in lines if e.get("type") == "exec" and "prsys-fail-marker" in e.get("argv", [])]
    assert len(execs) == 1, f"the failed unit's exec in {path}: {len(lines)} lines"
    assert execs[0]["unit"] == "prtest-fail.service", execs[0]
    assert all(e.get("unit") == "prtest-fail.service" for e in lines[:-1]), "only that unit's events"
    assert oct(os.stat(path).st_mode & 0o777) == "0o600", "readable by root only"
    log = command("journalctl", "-u", "perfrelay-snapshot@prtest-fail.service.service", "--no-pager").stdout
    assert f"to {path}" in log, f"the journal says where: {log[-800:]}"
    out = command("systemd-analyze", "security", "--no-pager", "perfrelay-snapshot@prtest-fail.service.service").stdout
    m = re.search(r"Overall exposure level for perfrelay-snapshot@prtest-fail.service.service: ([\d.]+)", out)
    print(f"perfrelay-snapshot@ exposure {m.group(1) if m else '?'}")


TALKER = """
import socket, threading, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(8)
port = srv.getsockname()[1]
def serve():
    while True:
        c, _ = srv.accept(); c.sendall(c.recv(100)); c.close()
threading.Thread(target=serve, daemon=True).start()
end = time.monotonic() + 120
while time.monotonic() < end:
    c = socket.create_connection(("127.0.0.1", port)); c.sendall(b"prsys-talk"); c.recv(100); c.close()
    x = 0
    for i in range(200000):
        x += i
    time.sleep(0.02)
"""


def cgroup2():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[fields.index("-") + 1] == "cgroup2":
                return fields[4]
    raise AssertionError("no cgroup2 mount in the container")


# Beside the unit, under the slice systemd gave the container's services.
DECOY = os.path.join(cgroup2(), "system.slice", "prtest-decoy.slice", "prtest-talk.service")


@step("under the shipped unit: a service's counters (perfrelayctl top) and packets (perfrelayctl capture, "
      "of systemd's ControlGroup, not of a same-named cgroup)")
def _():
    decoy = None
    command("systemctl", "start", "perfrelay.service")
    command("systemd-run", "--unit=prtest-talk", "--property=Type=exec", "python3", "-c", TALKER)
    try:
        def ranked():
            out = command("perfrelayctl", "top", "--iterations", "1", "--batch", "--delay", "1").stdout
            return [l for l in out.splitlines() if l.startswith("prtest-talk.service ")]
        try:
            row = wait_for(ranked, "the talking service in perfrelayctl top")[0]
        except AssertionError as e:
            out = command("perfrelayctl", "top", "--iterations", "1", "--batch", check=False)
            log = command("journalctl", "-u", "perfrelay.service", "--no-pager", check=False).stdout
            raise AssertionError(f"{e}\n{out.stdout}{out.stderr}\n" +
                                 "\n".join(l for l in log.splitlines() if "ounter" in l)[-2000:])
        assert float(row.split()[1]) > 0, f"a CPU rate for it: {row}"
        # A cgroup of the same name that systemd did not make, with its own talker: the capture
        # follows systemd's ControlGroup of the unit (the tree alone would be ambiguous).
        os.makedirs(DECOY, exist_ok=True)
        decoy = subprocess.Popen(["python3", "-c", TALKER.replace("prsys-talk", "prsys-decoy")])
        with open(os.path.join(DECOY, "cgroup.procs"), "w") as f:
            f.write(str(decoy.pid))
        r = command("perfrelayctl", "capture", "--unit", "prtest-talk.service", "-c", "40", "-w", "/tmp/talk.pcapng")
        with open("/tmp/talk.pcapng", "rb") as f:
            data = f.read()
        off, kinds, links = 0, [], []
        while off < len(data):
            btype, blen = struct.unpack_from("<II", data, off)
            kinds.append(btype)
            if btype == 1:
                links.append(struct.unpack_from("<H", data, off + 8)[0])
            off += blen
        assert kinds.count(6) == 40, f"40 packets in the file: {kinds} ({r.stderr.strip()})"
        assert links and set(links) == {101}, f"raw IP link type: {links}"
        assert b"prsys-talk" in data, "the service's payload"
        assert b"prsys-decoy" not in data, "none of the decoy cgroup's"
    finally:
        command("systemctl", "stop", "prtest-talk.service", check=False)
        if decoy:
            decoy.kill()
            decoy.wait()
        wait_for(lambda: not open(os.path.join(DECOY, "cgroup.procs")).read().strip() if os.path.isdir(DECOY) else True,
                 "the decoy cgroup is empty")
        for path in (DECOY, os.path.dirname(DECOY)):
            if os.path.isdir(path):
                os.rmdir(path)


@step("stop: exit 0, the array stays pinned")
def _():
    map_id = events_map_id()
    command("systemctl", "stop", "perfrelay.service", "perfrelay.socket")
    assert show("ExecMainStatus") == "0", f"exit status {show('ExecMainStatus')}"
    assert show("Result") == "success", show("Result")
    assert events_map_id() == map_id, "the array stays pinned after stop"


print(f"{prtest.steps_passed} passed, 0 failed")
