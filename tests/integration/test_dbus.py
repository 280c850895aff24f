#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The D-Bus interface end to end (docs/dbus.md), on a private dbus-daemon with a system-bus-like
policy that includes the project's own config/org.perfrelay1.conf: properties and counters,
probe switching seen by a socket client, DisconnectClient, bus subscribers (filters, unicast,
cleanup, the rate bound and Dropped), access for non-root callers, the interface against the
documentation, perfrelayctl status/probes/clients/probe, Reload and SIGHUP, and a daemon
without a bus. Absence is proven with barriers (events of one CPU arrive in order), never by
sleeping."""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET

import pytest

from prtest import check, check_eq, Daemon, daemon_binary, Failure, main, on_cpu, producer_counters, skip, wait_for
from prtest.schema import validate
from prtest.statsbus import PrivateBus
from prtest import busclient
from prtest.busclient import BusPeer, as_user

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
SRCDIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CTL = os.path.join(BUILDDIR, "client", "perfrelayctl")
HELPER_BUILT = os.path.join(BUILDDIR, "tests", "integration", "bus-subscriber")
DOC = os.path.join(SRCDIR, "docs", "dbus.md")

for tool in ("dbus-daemon", "busctl", "setpriv"):
    if not shutil.which(tool):
        skip(f"{tool} is not installed")
for path in (CTL, HELPER_BUILT):
    if not os.access(path, os.X_OK):
        raise Failure(f"{path} was not built")

RATE = 5  # BusEventsPerSecond= of the daemon under test: low, so that a burst exceeds it
NOBODY = 65534
MANAGER = ("org.perfrelay1", "/org/perfrelay1", "org.perfrelay1.Manager")
PROBE_NAMES = ["exec", "exit", "fork", "open", "connect"]



def make_marker(tag):
    """A copy of /bin/true whose comm ("prd" + tag + digits) names nothing else on the machine."""
    name = f"prd{tag}{random.randrange(10**6):06d}"[:15]
    path = os.path.join(WORK, name)
    shutil.copy("/bin/true", path)
    os.chmod(path, 0o755)
    return name, path


with open("/proc/self/comm") as f:
    PY_COMM = f.read().strip()


def online_cpus():
    with open("/sys/devices/system/cpu/online") as f:
        cpus = set()
        for part in f.read().strip().split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)




def on_bus(*args, user=None, check_rc=True, address=None):
    """busctl on this test's bus (or `address`)."""
    return busclient.busctl(address or BUS.address, *args, user=user, check_rc=check_rc)


def call(method, signature=None, *args, user=None):
    """A Manager method through busctl; returns the list of return values."""
    a = ["--json=short", "call", *MANAGER, method] + ([signature, *[str(x) for x in args]] if signature else [])
    out = on_bus(*a, user=user).stdout.strip()
    return json.loads(out)["data"] if out else []


def get_all(user=None):
    out = on_bus("--json=short", "call", MANAGER[0], MANAGER[1], "org.freedesktop.DBus.Properties", "GetAll", "s",
                 MANAGER[2], user=user).stdout
    return {k: v["data"] for k, v in json.loads(out)["data"][0].items()}


def prop(name):
    return json.loads(on_bus("--json=short", "get-property", *MANAGER, name).stdout)["data"]




class Subscriber(BusPeer):
    """The helper on this test's bus (busclient.BusPeer)."""

    def __init__(self, *filters, user=None, subscribe=True, address=None):
        super().__init__(HELPER, address or BUS.address, *filters, user=user, subscribe=subscribe)



# ---- the bus and the daemon ----

@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, workdir):
    global WORK, HELPER, MARKER_NAME, MARKER, OTHER_NAME, OTHER, RATE_NAME, RATE_MARKER
    global BUS, T_BEFORE, T_AFTER, LISTENER
    WORK = workdir  # nobody runs the helper and the markers from here
    HELPER = os.path.join(WORK, "bus-subscriber")
    shutil.copy(HELPER_BUILT, HELPER)
    MARKER_NAME, MARKER = make_marker("m")
    OTHER_NAME, OTHER = make_marker("o")
    RATE_NAME, RATE_MARKER = make_marker("r")
    BUS = PrivateBus(os.path.join(WORK, "bus"))
    os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = BUS.address  # for the daemon and perfrelayctl
    # OnDemand=no: the Probes property and ListProbes() follow Probes= and SetProbeEnabled()
    # alone here (test_demand.py has the probes that follow their consumers).
    d = make_daemon("dbus", config=f"[Bus]\nBusEventsPerSecond={RATE}\n[Probes]\nOnDemand=no\n",
                    stdout=False, start=False)
    T_BEFORE = time.time()
    d.start()
    T_AFTER = time.time()
    # Broadcast signals (PropertiesChanged, EventsLost), from before the first burst.
    LISTENER = Subscriber(subscribe=False)
    yield d
    LISTENER.close()
    d.cleanup()
    BUS.stop()


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup


def test_properties(d):
    p = get_all()
    want = {"Version", "State", "PinPath", "Cpus", "Readers", "Probes", "Clients", "EventsReceived",
            "EventsDelivered", "EventsLost", "ProducerFailures", "ClientDrops", "StartedAt", "KernelFeatures"}
    check_eq(set(p), want, "the Manager's properties")
    version = subprocess.run([BINARY, "--version"], capture_output=True, text=True).stdout.split()[-1]
    check_eq(p["Version"], version, "Version")
    check_eq(p["State"], "running", "State")
    check_eq(p["PinPath"], d.pin_path, "PinPath")
    check_eq(p["Cpus"], len(online_cpus()), "Cpus")
    check(p["Readers"] >= 1, "Readers")
    check_eq(len(call("GetReaderStats")[0]), p["Readers"], "Readers = GetReaderStats entries")
    check_eq(p["Probes"], PROBE_NAMES, "Probes")
    check_eq(p["Clients"], 0, "Clients")
    check(int(T_BEFORE * 1e6) <= p["StartedAt"] <= int(T_AFTER * 1e6),
          f"StartedAt {p['StartedAt']} within the start window [{T_BEFORE}, {T_AFTER}]")
    for k in ("EventsReceived", "EventsDelivered", "EventsLost", "ProducerFailures", "ClientDrops"):
        check(isinstance(p[k], int) and p[k] >= 0, f"{k} is a counter")

    # A burst of marker events: counters grow by at least that much.
    n = 20
    client = d.client({"subscribe": {"types": ["exec"], "comm": [MARKER_NAME]}}, hello=True)
    before = get_all()
    for i in range(n):
        subprocess.run([MARKER, f"burst-{i}"], check=True)
    client.wait(lambda m: m.get("argv") == [MARKER, f"burst-{n - 1}"], "the last marker exec")
    got = [m for m in client.msgs if m["type"] == "exec"]
    check_eq(len(got), n, "the socket client got the burst")
    wait_for(lambda: prop("EventsReceived") >= before["EventsReceived"] + n, "EventsReceived grew by the burst")
    wait_for(lambda: prop("EventsDelivered") >= before["EventsDelivered"] + n, "EventsDelivered grew by the burst")
    check_eq(prop("Clients"), 1, "Clients counts the socket subscriber")
    client.close()
    wait_for(lambda: prop("Clients") == 0, "Clients back to 0")

    # PropertiesChanged: the counters, with their values, at most once a second.
    LISTENER.wait(lambda m: m.get("signal") == "PropertiesChanged" and
                  m["changed"].get("EventsReceived", 0) >= before["EventsReceived"] + n,
                  "PropertiesChanged with the new EventsReceived", timeout=5)
    changes = [m for m in LISTENER.messages() if m.get("signal") == "PropertiesChanged" and
               set(m["changed"]) & {"EventsReceived", "EventsDelivered", "EventsLost", "ClientDrops",
                                     "ProducerFailures", "Clients"}]
    for a, b in zip(changes, changes[1:]):
        check(b["t"] - a["t"] >= 900000, f"counter PropertiesChanged {(b['t'] - a['t']) / 1e6:.3f}s apart")
    check(all(set(m["changed"]) <= {"EventsReceived", "EventsDelivered", "EventsLost", "ClientDrops",
                                     "ProducerFailures", "Clients"} for m in changes),
          "counter PropertiesChanged carries only counters")
    check(all(m["destination"] is None for m in changes), "PropertiesChanged is broadcast")


def test_cpu_and_reader_stats(d):
    before = get_all()
    cpus = call("GetCpuStats")[0]
    readers = call("GetReaderStats")[0]
    after = get_all()
    check_eq([c[0] for c in cpus], online_cpus(), "GetCpuStats: one entry per online CPU, sorted")
    reader_ids = {r[0] for r in readers}
    check(all(c[1] in reader_ids for c in cpus), "every CPU names a reader of GetReaderStats")
    check_eq(sorted(cpu for r in readers for cpu in r[1]), online_cpus(), "the readers' CPUs cover the online CPUs")
    for r in readers:
        check_eq(sorted(c[0] for c in cpus if c[1] == r[0]), sorted(r[1]), f"reader {r[0]}'s CPUs")
    received = sum(c[2] for c in cpus)
    check(before["EventsReceived"] <= received <= after["EventsReceived"],
          f"sum of received {received} between EventsReceived reads {before['EventsReceived']}..{after['EventsReceived']}")
    lost = sum(c[3] for c in cpus)
    check(before["EventsLost"] <= lost <= after["EventsLost"], "sum of lost = EventsLost")
    failures = sum(c[6] for c in cpus)
    check(before["ProducerFailures"] <= failures <= after["ProducerFailures"], "sum of failures = ProducerFailures")
    check(all(c[4] > 0 for c in cpus if c[2] > 0), "bytes counted where records were received")
    events = sum(r[4] for r in readers)
    check(before["EventsReceived"] <= events <= after["EventsReceived"], "readers' events = EventsReceived")
    check(all(r[3] >= 1 and r[2] >= 1 for r in readers if r[4] > 0), "wakeups and batches of busy readers")

    probes = call("ListProbes")[0]
    check_eq([(p[0], p[1]) for p in probes], [(n, True) for n in PROBE_NAMES], "ListProbes: every probe enabled")
    a = {p[0]: p[2] for p in probes}
    attempts, _ = producer_counters(d.pin_path, 1)
    b = {p[0]: p[2] for p in call("ListProbes")[0]}
    check(a["exec"] <= attempts <= b["exec"], f"ListProbes exec events {a['exec']}..{b['exec']} = attempts {attempts}")


def test_probe_switch(d):
    """SetProbeEnabled("open", false) stops open events for a socket client; enabling restores them."""
    client = d.client({"subscribe": {"types": ["open", "exec"], "comm": [PY_COMM, MARKER_NAME]}}, hello=True)
    try:
        call("SetProbeEnabled", "sb", "open", "false")
        check_eq(prop("Probes"), ["exec", "exit", "fork", "connect"], "Probes without open")
        check_eq({p[0]: p[1] for p in call("ListProbes")[0]}["open"], False, "ListProbes: open disabled")
        LISTENER.wait(lambda m: m.get("signal") == "PropertiesChanged" and
                      m["changed"].get("Probes") == ["exec", "exit", "fork", "connect"], "PropertiesChanged Probes")
        missing = os.path.join(WORK, "open-while-disabled")
        present = os.path.join(WORK, "open-after-enable")

        def while_disabled():
            os.close(os.open(missing, os.O_RDONLY | os.O_CREAT, 0o600))
            subprocess.run([MARKER, "barrier-disabled"], check=True)
        on_cpu(while_disabled)
        client.wait(lambda m: m.get("argv") == [MARKER, "barrier-disabled"], "the exec barrier")
        check(not any(m.get("path") == missing for m in client.msgs), "no open event while the probe is disabled")

        call("SetProbeEnabled", "sb", "open", "true")
        check_eq(prop("Probes"), PROBE_NAMES, "Probes with open again")
        os.close(os.open(present, os.O_RDONLY | os.O_CREAT, 0o600))
        client.wait(lambda m: m.get("path") == present, "an open event after re-enabling")
        # Idempotent, and unknown names are refused.
        call("SetProbeEnabled", "sb", "open", "true")
        r = on_bus("call", *MANAGER, "SetProbeEnabled", "sb", "nosuch", "false", check_rc=False)
        check(r.returncode != 0 and "Unknown probe" in r.stderr, f"unknown probe refused: {r.stderr}")
    finally:
        client.close()
        on_bus("call", *MANAGER, "SetProbeEnabled", "sb", "open", "true", check_rc=False)


def test_disconnect_client(d):
    a = d.client({"subscribe": {"types": ["exec"], "pid": [2, 1]}}, hello=True)
    b = d.client({}, hello=True)
    try:
        rows = {r[0]: r for r in call("ListClients")[0]}
        ida, idb = a.hello()["client_id"], b.hello()["client_id"]
        check_eq(set(rows), {ida, idb}, "ListClients lists both clients")
        check_eq(rows[ida][1:4], [0, os.getpid(), '{"types":["exec"],"pid":[1,2]}'], "client a: uid, pid, filter")
        check_eq(rows[idb][3], "{}", "client b's filter")
        check(all(isinstance(x, int) for x in rows[ida][4:]), "sent, dropped, queued bytes")
        call("DisconnectClient", "t", ida)
        a.wait_eof("the disconnected client")
        check_eq([r[0] for r in call("ListClients")[0]], [idb], "only b is left")
        check(not b.eof, "the other client stays connected")
        r = on_bus("call", *MANAGER, "DisconnectClient", "t", "999999", check_rc=False)
        check(r.returncode != 0 and "No socket client with id 999999" in r.stderr, f"unknown id: {r.stderr}")
    finally:
        a.close()
        b.close()


def test_sent_means_written(d):
    """A socket client that stops reading and then goes: "sent" is what it read (whole lines),
    the events left in its queue are dropped, and offered = sent + dropped (docs/dbus.md)."""
    n = 4000
    fd, path = tempfile.mkstemp(prefix="perfrelay-sent-", dir=WORK)
    os.close(fd)
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.read(go_r, 1)
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
            for i in range(n):
                os.close(os.open(path, os.O_RDONLY))
                if i % 100 == 99:
                    time.sleep(0.004)  # a pace the reading Python client keeps up with
            os.close(os.open(path + "-barrier", os.O_RDONLY | os.O_CREAT, 0o600))
        finally:
            os._exit(0)
    request = {"subscribe": {"types": ["open"], "pid": [pid]}}
    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fast = None
    try:
        slow.connect(d.socket_path)
        slow.sendall(json.dumps(request).encode() + b"\n")
        hello = b""
        while not hello.endswith(b"\n"):
            chunk = slow.recv(1)
            check(chunk, "the slow client's hello line")
            hello += chunk
        slow_id = json.loads(hello)["client_id"]
        fast = d.client(request, hello=True)
        delivered0, drops0 = prop("EventsDelivered"), prop("ClientDrops")
        os.write(go_w, b"x")
        # The barrier comes last on the one CPU of the burst: with it, the reading client
        # has every event of the burst, and the daemon has offered them to both clients.
        fast.wait(lambda m: m.get("path") == path + "-barrier", "the barrier", timeout=60)
        offered = [m for m in fast.msgs if m["type"] == "open"]
        check(not any(m["type"] == "lost" and m["count"] for m in fast.msgs), "the reading client lost nothing")

        # The slow client stops taking new data, reads what the daemon wrote, and goes.
        slow.shutdown(socket.SHUT_RD)
        data = b""
        while True:
            chunk = slow.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        slow.close()
        lines = [json.loads(l) for l in data.split(b"\n")[:-1]]  # a partly written line is not sent
        read = [m for m in lines if m["type"] == "open"]
        check(len(read) < len(offered), f"the slow client could not take the burst ({len(read)} of {len(offered)})")
        wait_for(lambda: slow_id not in [r[0] for r in call("ListClients")[0]], "the slow client is gone")

        delivered = prop("EventsDelivered") - delivered0
        drops = prop("ClientDrops") - drops0
        check_eq(delivered, len(offered) + len(read), "EventsDelivered: what the two clients read")
        check_eq(drops, len(offered) - len(read), "ClientDrops: the slow client's events it never read")
    finally:
        if fast:
            fast.close()
        slow.close()
        os.close(go_w)
        os.close(go_r)
        os.waitpid(pid, 0)


def test_subscribers():
    """An exec subscriber gets the marker's exec and not its opens; a second one gets none of
    the first one's signals, and the other way round."""
    first = Subscriber("types=exec", f"comm={MARKER_NAME}")
    second = Subscriber("types=exec", f"comm={OTHER_NAME}")
    opens = Subscriber("types=open", f"comm={MARKER_NAME}")  # proves that the marker does open files
    try:
        check(first.path != second.path, "one monitor per subscriber")

        def run():
            subprocess.run([MARKER, "bus-marker"], check=True)
            subprocess.run([MARKER, "bus-barrier"], check=True)
            subprocess.run([OTHER, "other-barrier"], check=True)
        on_cpu(run)
        ev = first.wait(lambda m: m.get("signal") == "Event" and json.loads(m["json"])["argv"] == [MARKER, "bus-marker"],
                        "the marker's Event")
        line = json.loads(ev["json"])
        check_eq((ev["type"], ev["timestamp"], ev["path"], ev["interface"], ev["destination"]),
                 ("exec", line["ts"], first.path, "org.perfrelay1.Monitor", first.name), "the Event signal")
        check_eq(line["comm"], MARKER_NAME, "the event's comm")
        validate(line)
        first.wait(lambda m: m.get("signal") == "Event" and json.loads(m["json"])["argv"] == [MARKER, "bus-barrier"],
                   "the barrier's Event")
        second.wait(lambda m: m.get("signal") == "Event" and json.loads(m["json"])["argv"] == [OTHER, "other-barrier"],
                    "the second subscriber's own Event")
        opens.wait(lambda m: m.get("signal") == "Event" and m["type"] == "open", "the marker's open events")
        check_eq([json.loads(m["json"])["argv"][1] for m in first.events()], ["bus-marker", "bus-barrier"],
                 "the exec subscriber got exactly its two execs, no open")
        check_eq([json.loads(m["json"])["argv"][1] for m in second.events()], ["other-barrier"],
                 "the second subscriber got only its own exec")
        for sub, other in ((first, second), (second, first), (opens, first)):
            leaked = [m for m in sub.messages() if m.get("path") in (other.path,) or
                      (m.get("interface") == "org.perfrelay1.Monitor" and m.get("destination") != sub.name)]
            check_eq(leaked, [], "no signal of another subscriber's monitor")
        check_eq([m for m in LISTENER.messages() if m.get("interface") == "org.perfrelay1.Monitor"], [],
                 "a connection with a match for every perfrelay signal sees no monitor signal")
        check_eq(json.loads(on_bus("--json=short", "get-property", "org.perfrelay1", first.path,
                                   "org.perfrelay1.Monitor", "Filter").stdout)["data"],
                 json.dumps({"types": ["exec"], "comm": [MARKER_NAME]}, separators=(",", ":")), "the monitor's Filter")

        # Bad filters.
        for args, needle in ((["types=EXEC"], "unknown event type"), (["pid=1", "frob=x"], "unknown filter"),
                             (["unit=sshd"], "not a unit")):
            try:
                Subscriber(*args).close()
                raise Failure(f"Subscribe({args}) was accepted")
            except Failure as e:
                check(needle in str(e) and "InvalidArgs" in str(e), f"Subscribe({args}): {e}")
    finally:
        for s in (first, second, opens):
            s.close()


def tree():
    return on_bus("tree", "--list", "org.perfrelay1").stdout.split()


def test_monitor_cleanup():
    s = Subscriber("types=exec")
    check(s.path in tree(), f"{s.path} in busctl tree")
    s.close()  # its connection closes
    wait_for(lambda: s.path not in tree(), "the monitor object disappears when its connection closes")

    # Unsubscribe: by its own connection, not by another (non-root) one.
    s = Subscriber("types=exec")
    other = Subscriber(subscribe=False, user="nobody")
    try:
        r = other.command(f"unsubscribe {s.path}", "Unsubscribe")
        check_eq(r["error"], "org.freedesktop.DBus.Error.AccessDenied", "nobody cannot unsubscribe root's monitor")
        check(s.path in tree(), "the monitor is still there")
        r = s.command("unsubscribe", "Unsubscribe")
        check_eq(r["error"], None, "Unsubscribe of one's own monitor")
        check(s.path not in tree(), "gone after Unsubscribe")
        r = s.command("unsubscribe", "Unsubscribe")
        check_eq(r["error"], "org.freedesktop.DBus.Error.UnknownObject", "a second Unsubscribe")
    finally:
        s.close()
        other.close()


def test_rate_limit():
    """A burst over BusEventsPerSecond=: Event signals + Dropped counts = the events offered."""
    n = 3 * RATE + 2
    s = Subscriber("types=exec", f"comm={RATE_NAME}")
    try:
        drops_before = prop("ClientDrops")
        delivered_before = prop("EventsDelivered")
        on_cpu(lambda: [subprocess.run([RATE_MARKER, f"rate-{i}"], check=True) for i in range(n)])

        def total():
            msgs = s.messages()
            return (len([m for m in msgs if m.get("signal") == "Event"]),
                    sum(m["count"] for m in msgs if m.get("signal") == "Dropped"))
        wait_for(lambda: sum(total()) >= n, f"{n} events accounted for (Event + Dropped)")
        events, dropped = total()
        check_eq(events + dropped, n, f"delivered {events} + dropped {dropped} = offered")
        check(dropped > 0, "the rate bound dropped events")
        check(events >= RATE, f"the first window delivered {RATE} events")
        got = [json.loads(m["json"])["argv"][1] for m in s.events()]
        check_eq(got, sorted(got, key=lambda a: int(a.split("-")[1])), "delivered events in order")
        check_eq(got[:RATE], [f"rate-{i}" for i in range(RATE)], "the window's first events are the ones sent")
        # Dropped comes after the window, at most once a second.
        drop_msgs = [m for m in s.messages() if m.get("signal") == "Dropped"]
        for a, b in zip(drop_msgs, drop_msgs[1:]):
            check(b["t"] - a["t"] >= 900000, "Dropped at most once a second")
        monitor = {k: json.loads(on_bus("--json=short", "get-property", "org.perfrelay1", s.path,
                                        "org.perfrelay1.Monitor", k).stdout)["data"]
                   for k in ("EventsDelivered", "EventsDropped")}
        check_eq(monitor, {"EventsDelivered": events, "EventsDropped": dropped}, "the monitor's counters")
        check_eq(prop("ClientDrops") - drops_before, dropped, "the drops joined ClientDrops")
        check(prop("EventsDelivered") - delivered_before >= events, "the Event signals joined EventsDelivered")

        # A barrier: one more event is accounted for, and nothing else ever is.
        on_cpu(lambda: subprocess.run([RATE_MARKER, "rate-barrier"], check=True))
        wait_for(lambda: sum(total()) >= n + 1, "the barrier accounted for")
        check_eq(sum(total()), n + 1, "nothing counted twice")
    finally:
        s.close()


def test_non_root(d):
    """nobody reads every property and calls the read-only methods, and gets AccessDenied for
    the others, from the bus policy and, with a policy that lets it through, from the daemon."""
    root = get_all()
    mine = get_all(user="nobody")
    check_eq(set(mine), set(root), "nobody reads every property")
    for k in ("Version", "State", "PinPath", "Cpus", "Readers", "Probes", "StartedAt", "KernelFeatures"):
        check_eq(mine[k], root[k], f"nobody's {k}")
    for method in ("GetStats", "GetCpuStats", "GetReaderStats", "ListClients", "ListProbes"):
        call(method, user="nobody")
    on_bus("introspect", *MANAGER[:2], user="nobody")

    caller = Subscriber(subscribe=False, user="nobody")
    try:
        def refused(expect_daemon):
            for cmd, method in (("call SetProbeEnabled sb open false", "SetProbeEnabled"),
                                ("call DisconnectClient t 1", "DisconnectClient"), ("call Reload", "Reload")):
                r = caller.command(cmd, method)
                check_eq(r["error"], "org.freedesktop.DBus.Error.AccessDenied", f"nobody calls {method}")
                if expect_daemon:
                    check(f"{method} needs root (the caller is uid {NOBODY})" in r["message"],
                          f"the daemon refused {method} itself: {r['message']}")
        refused(False)
        # A policy that lets everyone call everything (mandatory: applied after every other rule,
        # whatever order the directory is read in): the daemon's own check still refuses.
        with open(os.path.join(BUS.policy_dir, "zz-open.conf"), "w") as f:
            f.write('<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"\n'
                    ' "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">\n'
                    '<busconfig><policy context="mandatory"><allow send_destination="org.perfrelay1"/></policy>'
                    '</busconfig>\n')
        BUS.reload()
        refused(True)
        check_eq(prop("Probes"), PROBE_NAMES, "nothing changed")
    finally:
        if os.path.exists(os.path.join(BUS.policy_dir, "zz-open.conf")):
            os.unlink(os.path.join(BUS.policy_dir, "zz-open.conf"))
            BUS.reload()
        caller.close()

    # A non-root subscriber sees only its own uid's events, unless AllowGroups= lists one of its
    # groups (as the bus recorded them at connect).
    dropin = os.path.join(d.config_path + ".d", "40-allow.conf")
    os.makedirs(os.path.dirname(dropin), exist_ok=True)
    with open(dropin, "w") as f:
        f.write("[Socket]\nAllowGroups=100\n")
    call("Reload")
    sub = Subscriber("types=exec", f"comm={MARKER_NAME}", user="nobody")
    allowed = Subscriber("types=exec", f"comm={MARKER_NAME}", user="nobody+100")
    try:
        def run():
            subprocess.run([MARKER, "root-run"], check=True)
            subprocess.run(as_user("nobody", [MARKER, "nobody-run"]), check=True)
        on_cpu(run)
        for s in (sub, allowed):
            s.wait(lambda m: m.get("signal") == "Event" and json.loads(m["json"])["argv"][1:] == ["nobody-run"],
                   "nobody's own exec")
        got = [json.loads(m["json"]) for m in sub.events()]
        check_eq([(e["argv"][1], e["uid"]) for e in got], [("nobody-run", NOBODY)], "nobody sees only its own exec")
        got = [json.loads(m["json"]) for m in allowed.events()]
        check_eq([(e["argv"][1], e["uid"]) for e in got], [("root-run", 0), ("nobody-run", NOBODY)],
                 "nobody in an allowed group sees root's exec too")

        # A reload that takes the group out of AllowGroups= revokes what it gave: the monitor
        # is removed (docs/dbus.md); the uid-only subscriber goes on.
        os.unlink(dropin)
        call("Reload")
        r = on_bus("get-property", MANAGER[0], allowed.path, "org.perfrelay1.Monitor", "Filter", check_rc=False)
        check(r.returncode != 0, f"the revoked subscriber's monitor {allowed.path} is gone")

        def run_after():
            subprocess.run([MARKER, "root-after"], check=True)
            subprocess.run(as_user("nobody", [MARKER, "nobody-after"]), check=True)
        on_cpu(run_after)
        sub.wait(lambda m: m.get("signal") == "Event" and json.loads(m["json"])["argv"][1:] == ["nobody-after"],
                 "the uid-only subscriber's exec after the reload")
        check_eq([json.loads(m["json"])["argv"][1] for m in allowed.events()], ["root-run", "nobody-run"],
                 "the revoked subscriber gets nothing after the reload")
    finally:
        sub.close()
        allowed.close()
        if os.path.exists(dropin):
            os.unlink(dropin)
        call("Reload")


DOC_LINE = re.compile(r"^\s+(method|signal|property)\s+(\w+)(.*)$")


def parse_doc():
    """The interface block of docs/dbus.md: {interface: {(kind, name): details}}."""
    with open(DOC) as f:
        text = f.read()
    block = re.search(r"```text\n(interface .*?)```", text, re.S)
    check(block is not None, "docs/dbus.md has the interface block")
    out, iface = {}, None
    for line in block.group(1).splitlines():
        if line.startswith("interface "):
            iface = line.split()[1]
            out[iface] = {}
            continue
        m = DOC_LINE.match(line)
        if not m:
            check(not line.strip(), f"a line of the interface block: {line!r}")
            continue
        kind, name, rest = m.groups()
        if kind == "property":
            sig, flags = rest.split()
            out[iface][(kind, name)] = (sig, flags)
            continue

        def args(s):
            s = s.strip()[1:-1].strip()
            return [tuple(a.split()) for a in s.split(",")] if s else []
        if kind == "method":
            ins, outs = rest.split("->")
            out[iface][(kind, name)] = (args(ins), args(outs))
        else:
            out[iface][(kind, name)] = (args(rest),)
    return out


def parse_introspection(path, iface):
    """busctl's table (signatures, flags) and its XML (argument names) for one interface."""
    table = {}
    for line in on_bus("introspect", "org.perfrelay1", path, iface).stdout.splitlines()[1:]:
        cols = line.split()
        if not cols or not cols[0].startswith("."):
            continue
        name, kind, sig, result, flags = cols[0][1:], cols[1], cols[2], cols[3], cols[-1]
        table[(kind, name)] = (sig, result, flags)
    xml = ET.fromstring(on_bus("--xml-interface", "introspect", "org.perfrelay1", path).stdout)
    node = [i for i in xml.findall("interface") if i.get("name") == iface][0]
    out = {}
    for m in node.findall("method"):
        ins = [(a.get("type"), a.get("name")) for a in m.findall("arg") if a.get("direction", "in") == "in"]
        outs = [(a.get("type"), a.get("name")) for a in m.findall("arg") if a.get("direction") == "out"]
        sig, result, _ = table[("method", m.get("name"))]
        check_eq(sig, "".join(t for t, _ in ins) or "-", f"busctl's signature of {m.get('name')}")
        check_eq(result, "".join(t for t, _ in outs) or "-", f"busctl's result of {m.get('name')}")
        out[("method", m.get("name"))] = (ins, outs)
    for s in node.findall("signal"):
        args = [(a.get("type"), a.get("name")) for a in s.findall("arg")]
        check_eq(table[("signal", s.get("name"))][0], "".join(t for t, _ in args) or "-", "busctl's signal signature")
        out[("signal", s.get("name"))] = (args,)
    for p in node.findall("property"):
        sig, _, flags = table[("property", p.get("name"))]
        check_eq(sig, p.get("type"), f"busctl's type of {p.get('name')}")
        out[("property", p.get("name"))] = (sig, flags)
    check_eq(set(out), set(table), f"busctl's table and the XML of {iface} list the same members")
    return out


def test_introspect(d):
    doc = parse_doc()
    check_eq(set(doc), {"org.perfrelay1.Manager", "org.perfrelay1.Monitor", "org.perfrelay1.Capture"},
             "documented interfaces")
    s = Subscriber("types=exec")
    # A capture object lives while its requester (perfrelayctl capture) is on the bus.
    ctl = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(BINARY))), "client", "perfrelayctl")
    cap = subprocess.Popen([ctl, "capture", "--cgroup", "/", "-w", "/dev/null"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=BUS.address, PERFRELAY_SOCKET=d.socket_path))
    try:
        cap_path = wait_for(lambda: next((l.split()[0] for l in on_bus("tree", "--list", "org.perfrelay1").stdout.split()
                                          if l.startswith("/org/perfrelay1/capture/")), None), "a capture object")
        for iface, path in (("org.perfrelay1.Manager", "/org/perfrelay1"), ("org.perfrelay1.Monitor", s.path),
                            ("org.perfrelay1.Capture", cap_path)):
            got = parse_introspection(path, iface)
            check_eq(sorted(got), sorted(doc[iface]), f"{iface}: the members in docs/dbus.md")
            for member, details in doc[iface].items():
                check_eq(got[member], details, f"{iface} {member[0]} {member[1]} as documented")
    finally:
        s.close()
        cap.send_signal(signal.SIGINT)
        cap.communicate(timeout=60)
    check_eq(cap.returncode, 0, "perfrelayctl capture ended cleanly")
    # Every method and signal argument has a name.
    xml = ET.fromstring(on_bus("--xml-interface", "introspect", *MANAGER[:2]).stdout)
    for arg in xml.iter("arg"):
        check(arg.get("name"), f"an argument without a name: {arg.attrib}")


def test_perfrelayctl(d):
    client = d.client({"subscribe": {"types": [65000]}}, hello=True)
    try:
        before = get_all()
        r = subprocess.run([CTL, "status", "--json"], capture_output=True, text=True, timeout=30)
        after = get_all()
        check_eq(r.returncode, 0, f"perfrelayctl status --json: {r.stderr}")
        st = json.loads(r.stdout)
        check_eq((st["version"], st["state"], st["pin_path"], st["cpus"], st["readers"], st["probes"],
                  st["started_at_usec"], st["clients"]),
                 (before["Version"], before["State"], before["PinPath"], before["Cpus"], before["Readers"],
                  before["Probes"], before["StartedAt"], 1), "status --json = the properties")
        for key, p in (("events_received", "EventsReceived"), ("events_delivered", "EventsDelivered"),
                       ("events_lost", "EventsLost"), ("producer_failures", "ProducerFailures"),
                       ("client_drops", "ClientDrops")):
            check(before[p] <= st[key] <= after[p], f"{key} {st[key]} between {p} reads {before[p]}..{after[p]}")
        check(isinstance(st["events_per_second"], (int, float)) and st["events_per_second"] >= 0, "events/s")
        now = time.time() * 1e6
        check(abs(now - st["started_at_usec"] - st["uptime_usec"]) < 10e6, "uptime = now - StartedAt")

        r = subprocess.run([CTL, "status"], capture_output=True, text=True, timeout=30)
        check_eq(r.returncode, 0, f"perfrelayctl status: {r.stderr}")
        text = r.stdout
        check(f"perfrelayd {before['Version']}: running" in text, f"state line: {text}")
        check(f"Pin path: {before['PinPath']}" in text, "pin path line")
        check(f"CPUs: {before['Cpus']}, {before['Readers']} reader thread" in text, "CPUs line")
        check("Probes: exec exit fork open connect" in text, "probes line")
        check("Clients: 1" in text, "clients line")
        check(re.search(r"Events: \d+ received \(\d+\.\d/s\), \d+ delivered", text), f"events line: {text}")
        check(re.search(r"Loss: \d+ lost in rings, \d+ producer failures, \d+ dropped for clients", text), "loss line")

        r = subprocess.run([CTL, "probes"], capture_output=True, text=True, timeout=30)
        rows = [l.split() for l in r.stdout.splitlines()[1:]]
        check_eq([(x[0], x[1]) for x in rows], [(n, "attached") for n in PROBE_NAMES], "perfrelayctl probes")
        r = subprocess.run([CTL, "clients"], capture_output=True, text=True, timeout=30)
        rows = [l.split() for l in r.stdout.splitlines()[1:]]
        check_eq([(int(x[0]), int(x[1]), int(x[2]), x[6]) for x in rows],
                 [(client.hello()["client_id"], 0, os.getpid(), '{"types":[65000]}')], "perfrelayctl clients")

        r = subprocess.run([CTL, "probe", "disable", "connect"], capture_output=True, text=True, timeout=30)
        check_eq((r.returncode, prop("Probes")), (0, ["exec", "exit", "fork", "open"]), "perfrelayctl probe disable")
        r = subprocess.run([CTL, "probe", "enable", "connect"], capture_output=True, text=True, timeout=30)
        check_eq((r.returncode, prop("Probes")), (0, PROBE_NAMES), "perfrelayctl probe enable")
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", CTL, "probe", "disable",
                            "open"], capture_output=True, text=True, timeout=30)
        check(r.returncode == 1 and "org.freedesktop.DBus.Error.AccessDenied" in r.stderr and "org.perfrelay1" in r.stderr,
              f"a clear error for nobody: {r.stderr}")
        r = subprocess.run([CTL, "status"], capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=f"unix:path={WORK}/no-such-bus"))
        check(r.returncode == 1 and "system bus" in r.stderr and "no-such-bus" in r.stderr, f"no bus: {r.stderr}")
    finally:
        client.close()


def test_reload(d):
    dropins = d.config_path + ".d"
    os.makedirs(dropins, exist_ok=True)
    broken = os.path.join(dropins, "50-broken.conf")
    probes = os.path.join(dropins, "60-probes.conf")
    caller = Subscriber(subscribe=False)
    try:
        with open(broken, "w") as f:
            f.write("[Socket]\nMaxClients=0\n")
        r = caller.command("call Reload", "Reload")
        check_eq(r["error"], "org.perfrelay1.Error.InvalidConfig", "Reload with a broken drop-in")
        check(f"{broken}:2: MaxClients=0" in r["message"], f"the error names file:line: {r['message']}")
        check(d.proc.poll() is None and prop("State") == "running", "the daemon keeps running")
        os.unlink(broken)

        # Start-only settings are kept and named.
        with open(probes, "w") as f:
            f.write("[Ring]\nPagesPerCpu=128\n")
        r = caller.command("call Reload", "Reload")
        check_eq(r["error"], None, "Reload")
        wait_for(lambda: re.search(r"changes to PagesPerCpu= take effect only after a restart", d.stderr()),
                 "the log names the setting that needs a restart")

        # SIGHUP applies Probes=.
        with open(probes, "w") as f:
            f.write("[Probes]\nProbes=exec exit fork connect\n")
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: prop("Probes") == ["exec", "exit", "fork", "connect"], "SIGHUP detaches open")
        check_eq({p[0]: p[1] for p in call("ListProbes")[0]}["open"], False, "ListProbes after SIGHUP")
        os.unlink(probes)
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: prop("Probes") == PROBE_NAMES, "SIGHUP attaches open again")
    finally:
        for f in (broken, probes):
            if os.path.exists(f):
                os.unlink(f)
        caller.close()


def test_second_daemon_and_no_bus(d):
    """A daemon that cannot take the name, and one without any bus, start and serve the socket,
    each with one warning."""
    for tag, address, needle in (("dbus2", BUS.address, "Failed to acquire the name org.perfrelay1"),
                                 ("nobus", f"unix:path={WORK}/no-such-bus", "Cannot connect to the system bus")):
        other = Daemon(BINARY, tag, stdout=False)
        saved = os.environ["DBUS_SYSTEM_BUS_ADDRESS"]
        os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = address
        try:
            other.start()
            s = socket.socket(socket.AF_UNIX)
            s.connect(other.socket_path)
            s.sendall(b"{}\n")
            check(s.recv(4096).startswith(b'{"type":"hello"'), f"{tag}: the socket works")
            s.close()
            check_eq(other.stop(), 0, f"{tag}: clean exit")
            # After stop(): every line of its standard error has been read.
            check_eq(other.stderr().count(needle), 1, f"{tag}: one warning: {other.stderr()}")
        finally:
            os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = saved
            other.cleanup()
    check_eq(prop("PinPath"), d.pin_path, "the name still answers for the first daemon")


def test_bus_goes_away():
    """When the bus goes away the daemon says so once, drops its bus subscribers and keeps
    serving the socket."""
    bus = PrivateBus(os.path.join(WORK, "bus-short-lived"))
    other = Daemon(BINARY, "dbusgone", stdout=False)
    saved = os.environ["DBUS_SYSTEM_BUS_ADDRESS"]
    os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
    sub = None
    try:
        other.start()
        sub = Subscriber("types=exec", address=bus.address)
        bus.stop()
        sub.close()
        wait_for(lambda: "Lost the connection to the system bus" in other.stderr(), "the daemon notices the bus is gone")
        c = socket.socket(socket.AF_UNIX)
        c.connect(other.socket_path)
        c.sendall(b"{}\n")
        check(c.recv(4096).startswith(b'{"type":"hello"'), "the socket still works")
        c.close()
        check_eq(other.stop(), 0, "clean exit")
        check_eq(other.stderr().count("Lost the connection to the system bus"), 1, "one warning")
    finally:
        os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = saved
        if sub:
            sub.close()
        if bus.proc.poll() is None:
            bus.stop()
        other.cleanup()


def test_stopping(d):
    """SIGTERM: State becomes "stopping" on the bus before the daemon leaves it."""
    rc = d.stop()
    check_eq(rc, 0, "exit status")
    LISTENER.wait(lambda m: m.get("signal") == "PropertiesChanged" and m["changed"].get("State") == "stopping",
                  "PropertiesChanged State=stopping")


if __name__ == "__main__":
    main(__file__)
