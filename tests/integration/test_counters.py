#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Perf counters (docs/counters.md): a process that spins and one that sleeps, each in its own
unit's cgroup; their exit events carry the CPU time they really used (within 10% of what the
kernel's rusage says) and at least one context switch per sleep; the units' "counters" events
(only to clients that ask for that type) rank the spinner first and add up to its exit's
counters; GetUnitCounters() and perfrelayctl top show them; totals and pins survive a restart,
keep growing while no daemon runs, and are not counted twice. Exits: a process's teardown and
its threads' are in its exit event; records left for processes still tearing down when
counters go off are counted (exit_dropped)."""
import json
import os
import resource
import subprocess
import sys

import pytest

from prtest import (bpftool_json, cgroup2_mount, check, check_eq, daemon_binary, delegate_cgroup, Failure, main, skip, SocketClient,
                    UnitCgroup)
from prtest import LINK_PIN, kernel_version, wait_for

BINARY = daemon_binary()
INTERVAL_MS = 200
SOFTWARE = {"task-clock", "context-switches", "page-faults", "cpu-migrations"}

CG2 = cgroup2_mount()
if CG2 is None:
    skip("no cgroup2 mount (units come from cgroup2 paths)")


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, stats_bus):
    global bus
    bus = stats_bus
    d = make_daemon("counters", config=f"[Counters]\nCountersIntervalMs={INTERVAL_MS}\n", start=False)
    d_drop = make_daemon("counters-drop", start=False)
    d_off = make_daemon("counters-off", config="[Counters]\nCounters=none\n", start=False)
    d_share = make_daemon("counters-share", start=False,
                          config=f"[Counters]\nCountersIntervalMs={INTERVAL_MS}\nCountersMaxCgroups=16\n")
    return {"d": d, "d_drop": d_drop, "d_off": d_off, "d_share": d_share}


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup["d"]


@pytest.fixture(scope="module", name="d_drop")
def _fixture_d_drop(_setup):
    return _setup["d_drop"]


@pytest.fixture(scope="module", name="d_off")
def _fixture_d_off(_setup):
    return _setup["d_off"]


@pytest.fixture(scope="module", name="d_share")
def _fixture_d_share(_setup):
    return _setup["d_share"]

NAP = "import time\nwhile True: time.sleep(0.05)\n"  # switches out 20 times a second: charged, lightly

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {secs}: pass\n"
SLEEP = "import time\nfor i in range({n}): time.sleep(0.01)\n"
# Touches every page of twice {n} bytes, then exits without freeing them itself: the kernel's
# teardown of the address space is most of the rest of its CPU time.
TEARDOWN = "import os\nb = bytes(1) * {n}\nb2 = bytearray(b)\nos._exit(0)\n"


# How far an exit event's task_clock_ns may fall short of the process's CPU time (rusage), and
# how far it may exceed it. Short is the defect these tests look for: a teardown left out. Over
# is what the event sees and rusage cannot: each thread runs on after the kernel adds its time to
# its process's (__exit_signal(), in release_task()) until its last switch, where the event
# takes it. That is a few µs a thread here (1000 threads, 16 descriptors each: 0.7–5 ms over)
# and 20–230 µs under an emulated CPU (the kernels suite's 6.12 guest, 100 threads: 0.4–3.2 %
# over in 10 runs). Over stays within the 10 % that issue 24 asks for.
# On Debian 11's 5.10 (the kernels suite, emulated CPU) the thread-exits event came out 2.2 %,
# 2.5 % and, beside a second guest, 4.9 % short, where 6.1 and 6.12 stay within 2 % beside the
# same load: part of non-last threads' teardown is not charged there, cause not found
# (docs/kernels.md, "Known gaps"). There the bound is issue 24's 10 %.
TEARDOWN_SHORT = 0.02 if kernel_version() >= (6, 1) else 0.10
TEARDOWN_OVER = 0.10


def teardown_bytes():
    """1 GiB, or a sixth of the memory available (a guest of the kernels suite has little)."""
    with open("/proc/meminfo") as f:
        avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    return min(1 << 30, avail // 6)


class Unit(UnitCgroup):
    def run(self, code):
        """Starts python3 -c code in the unit; returns the Popen."""
        return self.popen([sys.executable, "-c", code])


def cpu_ns(proc):
    """Waits for the process; its CPU time (user + system) from the kernel, in ns."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    check_eq(proc.returncode, 0, "the workload exited 0")
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


def of_type(client, type_):
    return [m for m in client.messages() if m.get("type") == type_]


def intervals():
    return bus.stats()["counters"]["intervals"]


def wait_intervals(n):
    """Waits until n more intervals were published: everything charged before now is out."""
    start = intervals()
    wait_for(lambda: intervals() >= start + n, f"{n} counters intervals", timeout=30, interval=0.05)


def unit_counters():
    r = subprocess.run(["busctl", f"--address={bus.address}", "--json=short", "call", "org.perfrelay1",
                        "/org/perfrelay1", "org.perfrelay1.Manager", "GetUnitCounters"],
                       capture_output=True, text=True, timeout=30)
    check_eq(r.returncode, 0, f"GetUnitCounters() answers (stderr: {r.stderr.strip()})")
    return {(u, cg): vals for u, cg, vals in json.loads(r.stdout)["data"][0]}


def totals_of(unit):
    return next((v for (u, _), v in unit_counters().items() if u == unit.name), None)


def check_exit_counters(d, tag, cmd, what):
    """Runs cmd in a unit of its own; its exit event's task_clock_ns is the CPU time rusage gives
    the process, at most TEARDOWN_SHORT less or TEARDOWN_OVER more."""
    d.start()
    unit = Unit(tag)
    # In the ASan build the helper is instrumented too: LeakSanitizer's check at its exit runs in
    # a task of its own (not a thread of the process), whose CPU time the process's rusage takes
    # in when it is reaped and the exit event rightly does not (it made the event 2% short once).
    env = dict(os.environ, ASAN_OPTIONS=":".join(filter(None, [os.environ.get("ASAN_OPTIONS"), "detect_leaks=0"])))
    try:
        p = unit.popen(cmd, env=env)
        real = cpu_ns(p)
        ev = d.wait_event(lambda e: e["type"] == "exit" and e["pid"] == p.pid, "the exit event")
        got = ev["counters"]["task_clock_ns"]
        print(f"{tag}: the exit event says {got} ns, rusage {real} ns")
        check(real * (1 - TEARDOWN_SHORT) <= got <= real * (1 + TEARDOWN_OVER),
              f"the exit event's task_clock_ns {got} is at most {TEARDOWN_SHORT:.0%} short of the process's CPU "
              f"time {real} ({what} included), and at most {TEARDOWN_OVER:.0%} over")
    finally:
        unit.remove()
    d.stop()


def test_exit_teardown(d):
    """A process whose exit frees GiBs: the teardown (exit_mm(), after the exit tracepoint on
    newer kernels, 6.18 here) is CPU time of the process, in its rusage and in its exit event's
    task_clock_ns, which is taken at the process's last switch: at most 2% short (the teardown is
    about 5% of this process's time here, where faulting the pages in costs far more than
    freeing them; totals taken at the tracepoint were off by that much)."""
    check_exit_counters(d, "teardown", [sys.executable, "-c", TEARDOWN.format(n=teardown_bytes())], "teardown")


# exit-helper is built beside this test: <build>/tests/integration/exit-helper.
EXIT_HELPER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(BINARY))), "tests", "integration",
                           "exit-helper")


def test_thread_exits(d):
    """Threads that are not the process's last, each closing a file table of its own at its
    exit (exit_files(), after the thread is marked exiting): that teardown is CPU time of the
    process, in its rusage, and in its exit event's task_clock_ns, at most 2% short. (Slices of an
    exiting thread were charged to its cgroup only: the event was short by the teardown, more
    than half of this process's time.)"""
    fds = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1 << 16) - 64
    check_exit_counters(d, "thread-exits", [EXIT_HELPER, "threads-teardown", "100", str(fds)],
                        f"its threads' teardowns, {fds} descriptors each,")


def test_exit_dropped(d_drop):
    """Turning counters off (a start with Counters=none) waits a second for the exit records the
    exit probe left for the switch program, whose processes are still tearing down, then
    removes and counts the rest: exit_dropped is exactly what was left. Nothing in user space
    holds a process inside its teardown past the exit tracepoint on every kernel (a lingering
    socket does not linger at exit), so the test leaves the records, under tids above pid_max
    that never run, as a process stuck in its exit leaves its own."""
    d_drop.write_config("")
    d_drop.start()
    pending = os.path.join(d_drop.pin_path, "exit_pending")
    value = ["0"] * bpftool_json("map", "show", "pinned", pending)["bytes_value"]
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    for tid in range(pid_max + 1, pid_max + 4):
        key = [str(b) for b in tid.to_bytes(4, "little")]
        bpftool_json("map", "update", "pinned", pending, "key", *key, "value", *value)
    check_eq(bus.stats()["counters"]["exit_dropped"], 0, "nothing dropped while counters are on")
    check_eq(d_drop.stop(), 0, "the daemon stopped")
    d_drop.write_config("[Counters]\nCounters=none\n")
    d_drop.start()
    check_eq(bus.stats()["counters"]["exit_dropped"], 3, "counters off: the three records left are counted")
    check_eq(bpftool_json("map", "dump", "pinned", pending), [], "and gone from exit_pending")
    d_drop.stop()


def test_spin_and_sleep(d):
    d.start()
    st = bus.stats()["counters"]
    check(SOFTWARE <= set(st["counters"]), f"the software counters are on by default: {st['counters']}")
    counters_sub = SocketClient(d.socket_path, {"subscribe": {"types": ["counters", "exit"]}})
    default_sub = SocketClient(d.socket_path, {"subscribe": {}})
    spin, sleep = Unit("spin"), Unit("sleep")
    try:
        n_sleeps = 40
        p_spin = spin.run(SPIN.format(secs=1.0))
        p_sleep = sleep.run(SLEEP.format(n=n_sleeps))
        spin_cpu, sleep_cpu = cpu_ns(p_spin), cpu_ns(p_sleep)
        ex = {e["pid"]: e for e in d.wait_events(lambda e: e["type"] == "exit" and e["pid"] in (p_spin.pid, p_sleep.pid),
                                                   2, "the workloads' exits")}
        c_spin, c_sleep = ex[p_spin.pid]["counters"], ex[p_sleep.pid]["counters"]
        check(SOFTWARE <= {k.replace("_ns", "").replace("_", "-") for k in c_spin},
              f"the exit event carries every software counter: {c_spin}")
        check_eq(ex[p_spin.pid]["scaled"], False, "software counters are never multiplexed")
        for what, c, real in (("spinner", c_spin, spin_cpu), ("sleeper", c_sleep, sleep_cpu)):
            check(abs(c["task_clock_ns"] - real) <= real * 0.10,
                  f"the {what}'s task_clock_ns {c['task_clock_ns']} is within 10% of its CPU time {real}")
        check(c_sleep["context_switches"] >= n_sleeps,
              f"the sleeper switched out at least once per sleep: {c_sleep['context_switches']} >= {n_sleeps}")
        check(spin_cpu >= 1_000_000_000, f"the spinner used its second of CPU ({spin_cpu} ns)")

        # Everything charged so far is in the next intervals' events.
        wait_intervals(2)
        evs = of_type(counters_sub, "counters")
        per_unit = {}
        for e in evs:
            check_eq(set(e["values"]) >= {"task_clock_ns", "context_switches"}, True, f"values of {e}")
            check(e["interval_ns"] > 0, "an interval")
            per_unit.setdefault(e.get("unit"), []).append(e)
        spin_total = sum(e["values"]["task_clock_ns"] for e in per_unit.get(spin.name, []))
        sleep_total = sum(e["values"]["task_clock_ns"] for e in per_unit.get(sleep.name, []))
        check(per_unit.get(spin.name), f"counters events for {spin.name}")
        check(per_unit.get(sleep.name), f"counters events for {sleep.name}")
        check(all(e["cgroup_id"] == spin.id for e in per_unit[spin.name]), "with the unit's cgroup id")
        check(spin_total > sleep_total, f"the spinning unit ranks first: {spin_total} > {sleep_total}")
        # The unit held nothing but the spinner: its intervals add up to the process's total.
        check(abs(spin_total - c_spin["task_clock_ns"]) <= c_spin["task_clock_ns"] * 0.10,
              f"the spinner's unit ({spin_total} ns) used what its process did ({c_spin['task_clock_ns']} ns)")
        check_eq(of_type(default_sub, "counters"), [], "a client that did not ask for counters gets none")
        check(of_type(default_sub, "exit"), "(while it gets the other events)")

        vals = totals_of(spin)
        check(vals is not None and vals["task_clock_ns"] >= spin_total,
              f"GetUnitCounters() has the unit's totals: {vals}")
        os.chmod(bus.dir, 0o755)  # the private bus's socket, reachable for nobody too
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bus.ctl, "top",
                            "--iterations", "1", "--delay", "0.1", "--json"], capture_output=True, text=True,
                           timeout=30, env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus.address))
        check_eq(r.returncode, 0, f"an unprivileged user may run perfrelayctl top (stderr: {r.stderr.strip()})")
        st = bus.stats()["counters"]
        check(st["charges"] > 0 and st["events"] >= len(evs), f"GetStats() counts charges and events: {st}")
        check_eq((st["read_errors"], st["cgroup_full"], st["process_full"]), (0, 0, 0), "nothing lost")
    finally:
        counters_sub.close()
        default_sub.close()
        spin.remove()
        sleep.remove()
    # A removed cgroup leaves the table once its last interval is out. (cgroups_removed counts
    # every cgroup of the host that went, so it alone does not say these two did.)
    wait_for(lambda: all(u not in (spin.name, sleep.name) for u, _ in unit_counters()),
             "GetUnitCounters() no longer lists the removed units", timeout=30)
    check(bus.stats()["counters"]["cgroups_removed"] >= 2, "and GetStats() counts them removed")
    d.stop()


def test_top(d):
    d.start()
    spin = Unit("top")
    p = spin.run(SPIN.format(secs=3.0))
    try:
        r = subprocess.run([bus.ctl, "top", "--iterations", "2", "--batch", "--delay", "0.5"],
                           capture_output=True, text=True, timeout=60)
        check_eq(r.returncode, 0, f"perfrelayctl top (stderr: {r.stderr.strip()})")
        tables = r.stdout.strip().split("\n\n")
        check_eq(len(tables), 2, f"two tables:\n{r.stdout}")
        for t in tables:
            lines = t.splitlines()
            check(lines[0].split()[:2] == ["UNIT", "CPU%"], f"a header: {lines[0]}")
            rows = {l.split()[0]: l.split()[1:] for l in lines[1:]}
            check(spin.name in rows and float(rows[spin.name][0]) > 10,
                  f"the spinning unit with a non-zero CPU rate:\n{t}")
            check(all(float(v[0]) >= 0 for v in rows.values()), "rates")
            cpu = [float(v[0]) for v in rows.values()]
            check_eq(cpu, sorted(cpu, reverse=True), "sorted by CPU")
        r = subprocess.run([bus.ctl, "top", "--iterations", "1", "--json", "--delay", "0.3", "--order", "context-switches"],
                           capture_output=True, text=True, timeout=60)
        check_eq(r.returncode, 0, f"perfrelayctl top --json (stderr: {r.stderr.strip()})")
        rows = json.loads(r.stdout)
        csw = [u["per_second"]["context_switches"] for u in rows]
        check_eq(csw, sorted(csw, reverse=True), "--order=context-switches sorts by it")
    finally:
        p.kill()
        p.wait()
        spin.remove()
    d.stop()


def test_restart(d):
    """The totals live in pinned maps, charged by a pinned program: a restart keeps them, a unit
    that runs while no daemon does is still charged, and nothing is counted twice."""
    d.start()
    busy, idle = Unit("busy"), Unit("idle")
    try:
        cpu_ns(idle.run(SPIN.format(secs=0.2)))
        cpu_ns(busy.run(SPIN.format(secs=0.3)))
        wait_intervals(2)
        idle_before, busy_before = totals_of(idle), totals_of(busy)
        check(idle_before and busy_before, "both units have totals")
        check_eq(d.stop(), 0, "the daemon stopped")
        check(os.path.exists(os.path.join(d.pin_path, "perf-counters", "task-clock")), "the counter arrays stay pinned")
        check_eq(os.path.exists(os.path.join(d.pin_path, "links", "handle_switch")), LINK_PIN,
                 "and the counters program (where the kernel pins links)")
        down_cpu = cpu_ns(busy.run(SPIN.format(secs=0.5)))  # while no daemon runs
        d.start()
        idle_after, busy_after = totals_of(idle), totals_of(busy)
        check_eq(idle_after, idle_before, "a unit that did not run has exactly the same totals after a restart")
        grown = busy_after["task_clock_ns"] - busy_before["task_clock_ns"]
        if LINK_PIN:
            check(abs(grown - down_cpu) <= down_cpu * 0.10,
                  f"a unit that ran while no daemon did grew by its CPU time ({grown} vs {down_cpu} ns), once")
        else:
            # docs/kernels.md, link_pin: the program went with the daemon, so the gap is not counted.
            check_eq(grown, 0, "without pinned links, a unit that ran while no daemon did is not charged")
        check(busy_after["context_switches"] >= busy_before["context_switches"], "every counter keeps growing")
    finally:
        busy.remove()
        idle.remove()
    d.stop()


def test_users_share(d_share):
    """A user's cgroups take at most half the cgroup table (CountersMaxCgroups=16 here): a user
    running tasks in 16 cgroups of their delegated subtree fills their half and is refused the
    rest (counted); a system unit started afterwards still gets its row."""
    dm = d_share
    dm.start()
    uid = 4247
    manager = UnitCgroup("", parent=f"user.slice/user-{uid}.slice", name=f"user@{uid}.service")
    mine, procs = [], []
    try:
        delegate_cgroup(manager.path, uid)
        # The user makes them (their directories are the user's from the start), and then runs
        # tasks in them once the daemon's cgroup watch has seen them.
        watched = bus.stats()["recorder"]["cgroups_watched"]
        names = [f"share-{i}.scope" for i in range(16)]
        subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "mkdir",
                        *(os.path.join(manager.path, n) for n in names)], check=True)
        wait_for(lambda: bus.stats()["recorder"]["cgroups_watched"] >= watched + 16, "the user's cgroups watched")
        for n in names:
            cg = UnitCgroup.existing(os.path.join(manager.path, n))
            mine.append(cg)
            procs.append(cg.popen([sys.executable, "-c", NAP]))
        wait_for(lambda: bus.stats()["counters"]["cgroup_full"] > 0, "the table refuses rows", timeout=60,
                 interval=0.1)
        system = UnitCgroup("share-sys")
        mine.append(system)
        procs.append(system.popen([sys.executable, "-c", NAP]))
        try:
            wait_for(lambda: totals_of(system), "the system unit started after the flood has its row", timeout=60)
        except Failure as e:
            raise Failure(f"{e}: {bus.stats()['counters']}")
        st = bus.stats()["counters"]
        check(st["cgroup_full_users"] > 0, f"the user's refused charges are counted: {st}")
        check_eq(st["cgroups_users_max"], 8, "users may take half of CountersMaxCgroups=")
        check(st["cgroups_users"] <= 8, f"the user's cgroups hold no more than their half: {st}")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for cg in reversed(mine):
            wait_for(lambda: not open(os.path.join(cg.path, "cgroup.procs")).read().strip(), "the cgroup empty")
            cg.remove()
        manager.remove()
    dm.stop()


def test_users_unwatched_cgroups_count_as_users(d_share):
    """Cgroups a user makes beyond the cgroup watch's quota (1024 watched directories per user),
    and those below them, which no watch sees: the daemon tells the programs of the first, the
    programs find the others by their ancestors, and both are held to the users' half of the
    table (refusals counted as the users'), instead of taking the system's half."""
    dm = d_share
    dm.start()
    uid = 4248
    manager = UnitCgroup("", parent=f"user.slice/user-{uid}.slice", name=f"user@{uid}.service")
    names = [f"beyond-{i}.scope" for i in range(1040)]
    procs, mine = [], []
    try:
        delegate_cgroup(manager.path, uid)
        unwatched = bus.stats()["recorder"]["cgroups_unwatched_users"]
        for k in range(0, len(names), 260):
            subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "mkdir",
                            *(os.path.join(manager.path, n) for n in names[k:k + 260])], check=True)
        # The manager's directory and 1023 of these are watched; the last 17 are not.
        wait_for(lambda: bus.stats()["recorder"]["cgroups_unwatched_users"] >= unwatched + 16,
                 "the directories beyond the user's quota are left unwatched", timeout=60)
        refused = bus.stats()["counters"]["cgroup_full_users"]  # the pinned figures of earlier tests
        # Tasks run one level further down, where no watch looks: only the programs' walk up
        # the cgroup's ancestors tells them these are the user's.
        subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "mkdir",
                        *(os.path.join(manager.path, n, "inner") for n in names[-16:])], check=True)
        for n in names[-16:]:
            cg = UnitCgroup.existing(os.path.join(manager.path, n, "inner"))
            mine.append(cg)
            procs.append(cg.popen([sys.executable, "-c", NAP]))
        st = wait_for(lambda: (lambda c: c if c["cgroup_full_users"] > refused else None)(bus.stats()["counters"]),
                      "the unwatched cgroups are held to the users' half", timeout=60, interval=0.1)
        check_eq(st["cgroups_users_max"], 8, "users may take half of CountersMaxCgroups=")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for cg in mine:
            wait_for(lambda: not open(os.path.join(cg.path, "cgroup.procs")).read().strip(), "the cgroup empty")
        for cg in mine:
            os.rmdir(cg.path)
        for n in names:
            try:
                os.rmdir(os.path.join(manager.path, n))
            except FileNotFoundError:
                pass
        manager.remove()
    dm.stop()


def test_off(d_off):
    d_off.start()
    st = bus.stats()["counters"]
    check_eq(st["counters"], [], "Counters=none: no counters")
    subprocess.run(["/bin/true"])
    e = d_off.wait_event(lambda e: e["type"] == "exit" and e["comm"] == "true", "an exit")
    check("counters" not in e, f"exit events without counters: {e}")
    check(not os.path.exists(os.path.join(d_off.pin_path, "links", "handle_switch")), "no counters program pinned")
    check_eq(unit_counters(), {}, "GetUnitCounters() lists nothing")
    d_off.stop()


if __name__ == "__main__":
    main(__file__)
