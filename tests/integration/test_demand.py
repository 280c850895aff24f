#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Kernel-side demand (docs/pipeline.md, "Demand"): a probe is attached only while a consumer
wants its records, a subscription is acknowledged only once the kernel makes what it wants, and
what the probes skip in the kernel (ExcludeComms=, ExcludePaths=) is counted exactly as
`filtered`, so that hits = filtered + attempts and attempts = received + failures + crash_lost
both hold."""
import json
import os
import subprocess
import sys
import uuid

import pytest

import prtest
from prtest import check, check_eq, wait_for

PRODUCER_OPEN = 4
# Longer than the daemon's linger (PROBES_LINGER_USEC, 2 s) with room for a loaded machine.
DETACH_TIMEOUT = 20

# A child that names itself (comm) and then opens `path` n times, nothing else: every open it
# makes after prctl() is one the test knows of.
CHILD = r"""
import ctypes, os, sys
comm, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(15, comm.encode(), 0, 0, 0) != 0:  # PR_SET_NAME
    raise SystemExit("prctl failed")
for _ in range(n):
    os.close(os.open(path, os.O_RDONLY))
"""


@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf, stats_bus):
    pass


@pytest.fixture
def daemon(make_daemon):
    """daemon(tag, config=""): a perfrelayd without --stdout (no consumer of its own), stopped
    after the test so that the next one's daemon takes the bus name."""
    made = []

    def make(tag, config=""):
        made.append(make_daemon(tag, config=config, stdout=False))
        return made[-1]

    yield make
    for d in made:
        d.stop()


def probe(bus, name):
    return bus.stats()["probes"][name]


def opens(path, n=1, comm="prdemand"):
    subprocess.run([sys.executable, "-c", CHILD, comm, path, str(n)], check=True, timeout=60)


def marker(workdir):
    path = os.path.join(workdir, f"marker-{uuid.uuid4().hex}")
    with open(path, "w"):
        pass
    return path


def wait_open(client, path, what):
    return client.wait(lambda m: m.get("type") == "open" and m.get("path") == path, what, timeout=20)


def test_subscription_attaches_and_detaches(daemon, stats_bus, socket_client, workdir):
    """No consumer of opens (no --stdout, the recorder without them): the open probe is off.
    A subscriber of opens gets its hello only once the probe is attached, so a file opened right
    after the hello arrives; the last one leaving detaches it, and the next hello again waits."""
    d = daemon("demand")
    st = probe(stats_bus, "open")
    check_eq((st["state"], st["attached"]), ("off-demand", False), "open probe without a consumer")
    check_eq(probe(stats_bus, "exec")["attached"], True, "exec probe: the process table wants it")

    for round in range(2):
        c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
        c.hello()
        path = marker(workdir)
        opens(path)
        wait_open(c, path, f"round {round}: the open right after the hello")
        check_eq(probe(stats_bus, "open")["state"], "attached", f"round {round}: open probe state")
        c.close()
        wait_for(lambda: probe(stats_bus, "open")["attached"] is False,
                 f"round {round}: the open probe detached once its last subscriber left", DETACH_TIMEOUT)
        check_eq(probe(stats_bus, "open")["state"], "off-demand", f"round {round}: why it is off")


def test_lingering_probe_serves_a_returning_subscriber(daemon, stats_bus, socket_client, workdir):
    """A subscriber that comes back while the probe lingers (its last consumer just left) finds
    it wanted again at once: the marker right after its hello arrives, and the probe stays."""
    d = daemon("demand-linger")
    c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
    c.hello()
    c.close()
    st = wait_for(lambda: (lambda p: p if p["state"] != "attached" else None)(probe(stats_bus, "open")),
                  "the open probe unwanted once its subscriber left")
    if st["state"] == "off-demand":
        pytest.skip("the machine was too slow to come back within the probe's linger (2 s)")
    check_eq((st["state"], st["attached"]), ("unwanted", True), "lingering: attached, unwanted")
    c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
    c.hello()
    check_eq(probe(stats_bus, "open")["state"], "attached", "wanted again")
    path = marker(workdir)
    opens(path)
    wait_open(c, path, "the open right after the second hello")


def test_excluded_comm_is_filtered_exactly(daemon, stats_bus, socket_client, workdir):
    """ExcludeComms=: the opens of that process are never attempts; each one is counted once as
    filtered, and the ledger's identity holds beside it."""
    n = 500
    d = daemon("demand-comm", config="[Probes]\nExcludeComms=prexcluded\n")
    c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
    c.hello()
    before = stats_bus.producer(PRODUCER_OPEN)
    target = marker(workdir)
    opens(target, n, comm="prexcluded")
    # The marker opened by another process afterwards: once it arrives, every open before it
    # has been read.
    last = marker(workdir)
    opens(last)
    wait_open(c, last, "the marker after the excluded opens")
    check(not any(m.get("type") == "open" and m.get("comm") == "prexcluded" for m in c.messages()),
          "no open of the excluded process was delivered")
    after = stats_bus.producer(PRODUCER_OPEN)
    check_eq(after["filtered"] - before["filtered"], n, "filtered: each excluded open once")
    check_eq(after["hits"], after["filtered"] + after["attempts"], "hits = filtered + attempts")
    p = wait_for(lambda: (lambda q: q if q["attempts"] == q["received"] + q["malformed"] + q["failures"]
                          + q["crash_lost"] else None)(stats_bus.producer(PRODUCER_OPEN)),
                 "attempts = received + malformed + failures + crash_lost")
    check_eq(probe(stats_bus, "open")["filtered"], p["filtered"], "GetStats probes.open.filtered")


def test_exclude_paths_drops_proc_opens(daemon, stats_bus, socket_client, workdir):
    """ExcludePaths=/proc/*: opens of /proc files are dropped in the kernel (counted as filtered),
    the others delivered."""
    n = 200
    d = daemon("demand-paths", config="[Probes]\nExcludePaths=/proc/*\n")
    c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
    c.hello()
    before = stats_bus.producer(PRODUCER_OPEN)["filtered"]
    opens("/proc/self/stat", n)
    last = marker(workdir)
    opens(last)
    wait_open(c, last, "the marker after the /proc opens")
    check(not any(m.get("type") == "open" and str(m.get("path", "")).startswith("/proc/") for m in c.messages()),
          "no /proc open was delivered")
    check(stats_bus.producer(PRODUCER_OPEN)["filtered"] - before >= n, "the /proc opens were counted as filtered")


def test_exclude_units_filters_the_unit_and_below_exactly(daemon, stats_bus, socket_client, workdir, unit_cgroup):
    """ExcludeUnits=: opens made in the unit's cgroup and in a cgroup below it are filtered in
    the kernel, each counted once, none delivered; the daemon finds the unit's directory itself
    (GetStats probes.excluded_cgroups)."""
    n = 300
    cg = unit_cgroup("demand-unit")
    sub = unit_cgroup("demand-unit-sub", parent=os.path.relpath(cg.path, prtest.cgroup2_mount()), name="worker")
    d = daemon("demand-units", config=f"[Probes]\nExcludeUnits={cg.name}\n")
    check_eq(stats_bus.stats()["probes"]["excluded_cgroups"], 1, "the unit's own cgroup is excluded")
    target = marker(workdir)  # made (opened) before the subscription: not one of the unit's opens
    c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
    c.hello()
    before = stats_bus.producer(PRODUCER_OPEN)
    prtest.opens_in_cgroup(cg.path, target, n)
    prtest.opens_in_cgroup(sub.path, target, n)
    last = marker(workdir)
    opens(last)
    wait_open(c, last, "the marker after the excluded unit's opens")
    check(not any(m.get("type") == "open" and m.get("path") == target for m in c.messages()),
          "no open of the excluded unit was delivered")
    after = stats_bus.producer(PRODUCER_OPEN)
    check_eq(after["filtered"] - before["filtered"], 2 * n, "filtered: each of the unit's opens once")
    check_eq(after["hits"], after["filtered"] + after["attempts"], "hits = filtered + attempts")


def test_probe_costs_are_counted(daemon, stats_bus, socket_client, workdir):
    """RunStats= (BPF_ENABLE_STATS): the open probe's programs' runs and run time grow with the
    opens it sees."""
    d = daemon("demand-cost")
    c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
    c.hello()
    before = probe(stats_bus, "open")
    path = marker(workdir)
    opens(path, 100)
    wait_open(c, path, "the opens")
    after = probe(stats_bus, "open")
    # Each open runs the enter and the exit program.
    check(after["runs"] - before["runs"] >= 200, f"runs grew by {after['runs'] - before['runs']}")
    check(after["run_ns"] > before["run_ns"], "run_ns grew")
    out = subprocess.run([stats_bus.ctl, "probes"], capture_output=True, text=True, timeout=30, check=True).stdout
    row = [line.split() for line in out.splitlines() if line.startswith("open ")]
    check(row and row[0][1] == "attached" and row[0][5].isdigit(), f"perfrelayctl probes shows the cost: {out}")


def test_recorder_types_default_leaves_opens_out(daemon, stats_bus, socket_client, workdir):
    """RecorderTypes=' default: the flight recorder keeps execs but not opens, even while a
    subscriber has the open probe attached; the recorder alone does not attach it."""
    d = daemon("demand-recorder")
    check_eq(probe(stats_bus, "open")["attached"], False, "the recorder does not want opens")
    c = socket_client(d.socket_path, {"subscribe": {"types": ["open", "exec"]}})
    c.hello()
    path = marker(workdir)
    opens(path)  # a python3 exec and an open of the marker
    wait_open(c, path, "the marker's open")
    r = subprocess.run([stats_bus.ctl, "snapshot", "--json"], capture_output=True, text=True, timeout=60)
    check_eq(r.returncode, 0, f"perfrelayctl snapshot: {r.stderr}")
    types = {json.loads(line).get("type") for line in r.stdout.splitlines()}
    check("exec" in types, f"the snapshot has execs: {types}")
    check("open" not in types, f"the snapshot has no opens: {types}")


def test_bus_monitor_attaches_before_its_reply(daemon, stats_bus, workdir):
    """A D-Bus monitor (Subscribe()) is a consumer like a socket subscriber: the open probe is
    attached before Subscribe() returns, and an open made right after arrives as a signal."""
    from prtest import build_root
    from prtest.busclient import BusPeer

    daemon("demand-bus")
    check_eq(probe(stats_bus, "open")["attached"], False, "no consumer of opens yet")
    helper = os.path.join(build_root(), "tests", "integration", "bus-subscriber")
    m = BusPeer(helper, stats_bus.address, "types=open", "comm=prdemand")
    try:
        check_eq(probe(stats_bus, "open")["attached"], True, "attached once Subscribe() returned")
        path = marker(workdir)
        opens(path)
        m.wait(lambda e: e.get("signal") == "Event" and json.loads(e["json"]).get("path") == path,
               "the open right after Subscribe()")
    finally:
        m.close()
    wait_for(lambda: probe(stats_bus, "open")["attached"] is False, "detached once the monitor left", DETACH_TIMEOUT)


def test_filtered_open_clears_an_untraced_syscalls_entry(daemon, stats_bus, socket_client, workdir):
    """A thread whose openat() entered while the probe was attached and returned while it was
    detached leaves its pending entry behind. Its next open, filtered at the entry
    (ExcludePaths=), must not let the exit emit that old record with the new result: the entry
    is removed (counted as a lost attempt) and nothing is delivered for either path."""
    import threading

    d = daemon("demand-stale", config="[Probes]\nExcludePaths=/proc/*\n")
    fifo = os.path.join(workdir, f"fifo-{uuid.uuid4().hex}")
    os.mkfifo(fifo)
    c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
    c.hello()
    go, done = threading.Event(), threading.Event()

    def blocked():
        os.close(os.open(fifo, os.O_RDONLY))  # enters now, returns once a writer opens
        go.wait(60)
        os.close(os.open("/proc/self/stat", os.O_RDONLY))  # filtered at its entry
        done.set()

    t = threading.Thread(target=blocked)
    t.start()
    wait_for(lambda: any(open(f"/proc/{os.getpid()}/task/{tid}/syscall").read().split()[0] in ("257", "56")
                         for tid in os.listdir(f"/proc/{os.getpid()}/task")), "the thread blocked in openat()")
    c.close()
    wait_for(lambda: probe(stats_bus, "open")["attached"] is False, "the open probe detached", DETACH_TIMEOUT)
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the blocked open returns, untraced
    c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
    c.hello()
    go.set()
    check(done.wait(60), "the thread's second open")
    t.join(10)
    last = marker(workdir)
    opens(last)
    wait_open(c, last, "the marker after the filtered open")
    check(not any(m.get("type") == "open" and m.get("path") in (fifo, "/proc/self/stat") for m in c.messages()),
          f"no record of the untraced syscall, none of the filtered one: "
          f"{[m for m in c.messages() if m.get('type') == 'open' and 'fifo' in str(m.get('path'))]}")


def test_reattached_probe_drops_what_ended_while_it_was_off(daemon, stats_bus, socket_client, workdir):
    """A thread's openat() entered while the probe was attached and returned while it was
    detached; its next openat() enters while the probe is still off and returns once it is
    attached again. Without care, that exit would find the first syscall's pending entry and emit
    its path with the second's result. Before the probe is attached again the entry is removed and
    counted as filtered, exactly once: no record of either FIFO, filtered + 1."""
    import threading

    d = daemon("demand-reattach")
    fifos = [os.path.join(workdir, f"fifo{i}-{uuid.uuid4().hex}") for i in range(2)]
    for f in fifos:
        os.mkfifo(f)
    c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
    c.hello()
    me = os.getpid()

    def blocked_in_openat():
        return any(open(f"/proc/{me}/task/{tid}/syscall").read().split()[0] in ("257", "56")
                   for tid in os.listdir(f"/proc/{me}/task"))

    first_done = threading.Event()

    def thread():
        os.close(os.open(fifos[0], os.O_RDONLY))  # enters now, returns once a writer opens
        first_done.set()
        os.close(os.open(fifos[1], os.O_RDONLY))  # enters while the probe is off

    t = threading.Thread(target=thread)
    t.start()
    try:
        wait_for(blocked_in_openat, "the thread blocked in its first openat()")
        c.close()
        wait_for(lambda: probe(stats_bus, "open")["attached"] is False, "the open probe detached", DETACH_TIMEOUT)
        os.close(os.open(fifos[0], os.O_WRONLY | os.O_NONBLOCK))  # the first returns, untraced
        check(first_done.wait(30), "the first openat() returned")
        wait_for(blocked_in_openat, "the thread blocked in its second openat()")
        before = probe(stats_bus, "open")["filtered"]
        c = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
        c.hello()  # the probe is attached again
    finally:
        for f in fifos:  # the second returns, its exit traced (the first's writer: if it failed)
            try:
                os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        t.join(30)
    last = marker(workdir)
    opens(last)
    wait_open(c, last, "the marker after the second openat()")
    # The thread's opens are the read-only ones (the writers' opens are the test's own).
    check_eq([m for m in c.messages() if m.get("type") == "open" and m.get("path") in fifos and m["flags"] & 3 == 0],
             [], "no record of the syscall that ended while the probe was off, none made of it for the other")
    check_eq(probe(stats_bus, "open")["filtered"] - before, 1, "the entry left behind counted as filtered, once")
