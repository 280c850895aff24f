#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A flood costs no exec (docs/pipeline.md, "The protected lane"): with main rings small enough
that a third-party producer flat out on every CPU and a process failing openat() as fast as it
can overflow them, beside busy subscribers of everything, every marked exec reaches its
subscriber, the flood's records are lost and counted, and afterwards every producer's ledger
identity holds exactly, as does hits = filtered + attempts for the open probe. GetStats()'
"units" names who flooded and who lost ("Attribution"): each flooder runs in a cgroup of its
own, and the steady producer's own counts of its calls and of what the kernel accepted are its
cgroup's attempts and failures exactly. The streams are told (docs/protocol.md, "Lost"): a
subscriber of a type gets "lost" notices whose kernel counts add up to what its producer lost,
exactly, naming the flooding units; a subscriber of other types gets none."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import prtest
from prtest import check, check_eq, wait_for
from prtest.busclient import BusPeer
from prtest.schema import validate
from prtest.steady import PRODUCER as STEADY, SteadyProducer

PRODUCER_EXEC = 1
PRODUCER_EXIT = 2
PRODUCER_OPEN = 4
MARKED = 500       # marked execs run during the flood
BUSY = 4           # subscribers of everything, reading as fast as they can
FLOOD_RATE = 10_000_000  # records a second asked of each steady producer: flat out


@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf, stats_bus):
    pass


def identity_holds(p):
    return p["attempts"] == p["received"] + p["malformed"] + p["failures"] + p["crash_lost"]


def settled(stats_bus, producer):
    return wait_for(lambda: (lambda p: p if identity_holds(p) else None)(stats_bus.producer(producer)),
                    f"producer {producer}: attempts = received + malformed + failures + crash_lost", 30)


def kernel_notices(msgs, producer):
    """The notices of what `producer` lost, among a client's messages."""
    return [m for m in msgs if m.get("type") == "lost" and m.get("producer") == producer]


def kernel_told(msgs, producer):
    return sum(m["kernel"] for m in kernel_notices(msgs, producer))


def names_unit(notices, cg):
    return any(u.get("cgroup_id") == cg.id and u.get("unit") == cg.name for m in notices for u in m["units"])


def unit_row(stats, cgroup_id):
    rows = [u for u in stats["units"]["list"] if u["cgroup_id"] == cgroup_id]
    check(rows, f"cgroup {cgroup_id} is listed in GetStats units ({stats['units']})")
    return rows[0]


def test_flood_costs_no_exec(make_daemon, stats_bus, socket_client, workdir, unit_cgroup):
    cpus = sorted(os.sched_getaffinity(0))
    steady_cg = [unit_cgroup(f"flood-steady{cpu}") for cpu in cpus]
    open_cg = unit_cgroup("flood-open")
    # Nine clients of root: more than the default MaxQueueBytesPerUid= holds.
    d = make_daemon("flood", config="[Ring]\nPagesPerCpu=2\n[Socket]\nMaxQueueBytesPerUid=1G\nMaxQueueBytes=2G\n",
                    stdout=False)
    busy, floods, opener, told_mon, told_bin = [], [], None, None, None
    try:
        busy = [socket_client(d.socket_path, {"subscribe": {}, "format": "binary"}, discard=True) for _ in range(BUSY)]
        for b in busy:
            b.wait_subscribed()
        marked = os.path.join(workdir, "prmarkexec")
        shutil.copy("/bin/true", marked)
        execs = socket_client(d.socket_path, {"subscribe": {"types": ["exec"], "comm": ["prmarkexec"]}})
        execs.hello()
        # Notices only: filters no event passes (a notice is offered by its types alone).
        told_open = socket_client(d.socket_path, {"subscribe": {"types": ["open"], "comm": ["prnomatch"]}})
        told_all = socket_client(d.socket_path, {"subscribe": {"comm": ["prnomatch"]}, "format": "binary"})
        told_open.hello()
        told_all.wait_subscribed()
        # And on the shared path (libperfrelay asks for the notices on its socket): perfrelayctl
        # monitor in JSON, and a binary client of a type nobody emits (it takes third parties'
        # notices).
        told_mon = prtest.FileMonitor(d.socket_path, "--comm", "prnomatch")
        told_bin_out = open(os.path.join(workdir, "field-client.out"), "w+")
        builddir = os.path.dirname(os.path.dirname(os.path.abspath(d.binary)))
        told_bin = subprocess.Popen([os.path.join(builddir, "tests", "integration", "field-client"), d.socket_path,
                                     "prnomatch_type", "1"], stdout=told_bin_out)
        wait_for(lambda: len([c for c in stats_bus.stats()["client_list"] if c.get("shared")]) == 2,
                 "the monitor and the binary client read shared rings")
        before = {p: stats_bus.producer(p) for p in (PRODUCER_EXEC, PRODUCER_EXIT, PRODUCER_OPEN)}

        floods = [SteadyProducer(builddir, d.pin_path, cpu, cgroup=cg) for cpu, cg in zip(cpus, steady_cg)]
        for f in floods:
            f.cmd(f"rate {FLOOD_RATE}")
        opener = open_cg.popen([sys.executable, "-c", prtest.OPEN_FLOOD])
        subprocess.run(["sh", "-c", f'i=0; while [ $i -lt {MARKED} ]; do "$0"; i=$((i+1)); done', marked],
                       check=True, timeout=300)
        # The flood goes on until every marked exec has arrived: they never wait behind it.
        execs.wait(lambda m: sum(1 for x in execs.msgs if x.get("type") == "exec") >= MARKED,
                   f"all {MARKED} marked execs during the flood", timeout=60)
        # While it floods, perfrelayctl top --by events names the flooders first.
        top = subprocess.run([stats_bus.ctl, "top", "--by=events", "--order=lost", "-n", "1", "-d", "0.5", "--json"],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=stats_bus.address))
        for f in floods:
            f.cmd("rate 0")
        flooded = [f.counts() for f in floods]
    finally:
        if opener:
            opener.kill()
            opener.wait()
        if sys.exc_info()[0] and told_bin:  # else they read on: the checks below use them
            told_bin.kill()
            told_bin.wait()
        if sys.exc_info()[0] and told_mon:
            told_mon.stop()
        for f in floods:
            f.close()
        for b in busy:
            b.close()  # before the checks: the readers need not feed them any more

    got = [m for m in execs.messages() if m.get("type") == "exec"]
    check_eq(len(got), MARKED, "marked execs delivered (each once)")
    check(all(m["comm"] == "prmarkexec" for m in got), "only marked execs match the filter")

    steady = settled(stats_bus, STEADY)
    check(steady["failures"] > 0, f"the flood overflowed the main rings (steady: {steady})")
    check(sum(c["calls"] for c in flooded) > 0, "the steady producers ran")
    stats = stats_bus.stats()
    for cg, counts in zip(steady_cg, flooded):
        row = unit_row(stats, cg.id)
        check_eq(row["unit"], cg.name, "a flooder's cgroup is named by its unit")
        mine = [p for p in row["producers"] if p["id"] == STEADY]
        check(mine, f"the steady producer's entry under its cgroup ({row})")
        check_eq((mine[0]["attempts"], mine[0]["failures"]), (counts["calls"], counts["calls"] - counts["accepted"]),
                 "the flooder's cgroup: attempts and failures = the producer's own calls and refusals")
    check_eq(top.returncode, 0, f"perfrelayctl top --by=events: {top.stderr}")
    rows = json.loads(top.stdout)
    flooders = {cg.name for cg in steady_cg}
    check(rows and rows[0]["unit"] in flooders and rows[0]["per_second"]["lost"] > 0,
          f"top --by=events --order=lost names a flooder first: {rows[:3]}")
    row = unit_row(stats, open_cg.id)
    opens = [p for p in row["producers"] if p["id"] == PRODUCER_OPEN]
    check(opens and opens[0]["failures"] > 0, f"the open flood's cgroup lost opens ({row})")
    exec_ = settled(stats_bus, PRODUCER_EXEC)
    check_eq(exec_["failures"] - before[PRODUCER_EXEC]["failures"], 0, "exec records lost during the flood")
    # Exit too: with counters on (the default), its record waits for the teardown and is then
    # emitted from the switch program, into the lane as well.
    exit_ = settled(stats_bus, PRODUCER_EXIT)
    check_eq(exit_["failures"] - before[PRODUCER_EXIT]["failures"], 0, "exit records lost during the flood")
    check(exec_["received"] - before[PRODUCER_EXEC]["received"] >= MARKED, "the exec probe's records received")
    open_ = settled(stats_bus, PRODUCER_OPEN)
    check(open_["failures"] > before[PRODUCER_OPEN]["failures"], f"opens lost to the flood ({open_})")
    check_eq(open_["hits"], open_["filtered"] + open_["attempts"], "open: hits = filtered + attempts")

    # The streams were told, exactly: what each producer lost since the subscribers came.
    # Exact for the steady producers, whom nothing but this test makes lose (the host's other
    # opens may overflow the 2-page rings at any time, and their notice comes a second later).
    wait_for(lambda: names_unit(kernel_notices(told_open.messages(), PRODUCER_OPEN), open_cg),
             "a notice names the open flood's unit", 30)
    open_notices = kernel_notices(told_open.messages(), PRODUCER_OPEN)
    check(sum(u["lost"] for m in open_notices for u in m["units"] if u.get("cgroup_id") == open_cg.id) > 0,
          f"the open notices count the flood's loss under its unit: {open_notices[:3]}")
    check(all(m["types"] == ["open"] and m["count"] == 0 for m in open_notices),
          "open notices name the open type, and lose none of the client's own")
    check_eq(kernel_notices(told_open.messages(), STEADY), [], "no notice of a third party's loss to an open subscriber")
    check_eq([m for m in execs.messages() if m.get("type") == "lost"], [], "nothing lost told to exec's subscriber")
    # The steady producers' counts start at 0 under this daemon's fresh pins, after the
    # subscribers came.
    wait_for(lambda: kernel_told(told_all.binary_notices(), STEADY) == steady["failures"],
             "a binary subscriber of everything: notices add up to the steady producers' failures", 30)
    steady_notices = kernel_notices(told_all.binary_notices(), STEADY)
    check(any(names_unit([m], cg) for m in steady_notices for cg in steady_cg),
          f"a steady notice names a flooder's unit: {steady_notices[:3]}")
    for m in open_notices + steady_notices:
        validate(m)
    wait_for(lambda: kernel_told(told_mon.lines(), STEADY) == steady["failures"],
             "perfrelayctl monitor on the shared path: notices add up to the steady producers' failures", 30)

    def bin_notices():
        told_bin_out.seek(0)
        return [json.loads(line)["notice"] for line in told_bin_out if line.startswith('{"notice":')]
    wait_for(lambda: kernel_told(bin_notices(), STEADY) == steady["failures"],
             "a binary libperfrelay client on the shared path: notices add up to the same", 30)
    told_mon.stop()
    told_bin.kill()
    told_bin.wait()
    told_open.close()
    told_all.close()
    d.stop()


def test_throttle_counts_exactly_and_spares_exec(make_daemon, stats_bus, socket_client, workdir, unit_cgroup):
    """MaxEventsPerUnitPerSec=: a cgroup that opens faster than its budget gets the rest
    refused in the kernel, each refused open counted once (throttled) and never an attempt:
    its n opens are attempts + throttled exactly, a subscriber of its unit gets every attempt;
    the execs of a throttled cgroup all arrive; the stream is told when the cgroup's throttling
    starts and stops, and what it refused."""
    n, execs_n = 2000, 50
    d = make_daemon("throttle", config="[Probes]\nMaxEventsPerUnitPerSec=10\n", stdout=False)
    mon = None
    try:
        cg, cg_exec = unit_cgroup("throttle-open"), unit_cgroup("throttle-exec")
        target = os.path.join(workdir, "throttle-target")
        with open(target, "w"):
            pass
        # (An open record carries no cgroup; its unit is its process's at exec: the path tells.)
        opens = socket_client(d.socket_path, {"subscribe": {"types": ["open"]}})
        opens.hello()
        # And a D-Bus monitor of opens (Subscribe()): it gets the notices as Event signals.
        mon = BusPeer(os.path.join(prtest.build_root(), "tests", "integration", "bus-subscriber"),
                      stats_bus.address, "types=open", "comm=prnomatch")
        marked = os.path.join(workdir, "prthrottled")
        shutil.copy("/bin/true", marked)
        execs = socket_client(d.socket_path, {"subscribe": {"types": ["exec"], "comm": ["prthrottled"]}})
        execs.hello()
        before = stats_bus.producer(PRODUCER_OPEN)

        prtest.opens_in_cgroup(cg.path, target, n)
        # Each exec's loader opens its libraries in the cgroup: far above 10 a second.
        cg_exec.popen(["sh", "-c", f'i=0; while [ $i -lt {execs_n} ]; do "$0"; i=$((i+1)); done', marked]).wait(120)

        settled(stats_bus, PRODUCER_OPEN)
        row = unit_row(stats_bus.stats(), cg.id)
        attempts = sum(p["attempts"] for p in row["producers"] if p["id"] == PRODUCER_OPEN)
        failures = sum(p["failures"] for p in row["producers"] if p["id"] == PRODUCER_OPEN)
        check_eq(failures, 0, "no open of the cgroup lost")
        check(row["throttled"] > 0, f"the cgroup was throttled ({row})")
        check_eq(attempts + row["throttled"], n, "the cgroup's opens: attempts + throttled")
        def delivered():
            return [m for m in opens.messages() if m.get("type") == "open" and m.get("path") == target]

        wait_for(lambda: len(delivered()) >= attempts, f"the {attempts} opens the cgroup was allowed", 30)
        check_eq(len(delivered()), attempts, "opens delivered: exactly the attempts")
        check_eq(sum(m["count"] for m in opens.messages() if m.get("type") == "lost"), 0, "the subscriber lost nothing")
        # The stream was told: the cgroup's throttling started, and once it refused no more,
        # stopped, with what it refused in all.
        def episodes(key):
            return [u for m in opens.messages() if m.get("type") == "lost" and "throttle" in m
                    for u in m["throttle"][key] if u.get("cgroup_id") == cg.id]
        wait_for(lambda: episodes("started"), "a throttle notice of the cgroup's start", 30)
        check_eq(episodes("started")[0].get("unit"), cg.name, "the throttle notice names the unit")
        wait_for(lambda: sum(u["throttled"] for u in episodes("stopped")) == row["throttled"],
                 "the throttle's stop notices add up to what it refused of the cgroup", 30)
        for m in opens.messages():
            if m.get("type") == "lost":
                validate(m)

        def bus_episodes(key):
            return [u for e in mon.events() if e.get("type") == "lost"
                    for u in json.loads(e["json"]).get("throttle", {}).get(key, []) if u.get("cgroup_id") == cg.id]
        wait_for(lambda: sum(u["throttled"] for u in bus_episodes("stopped")) == row["throttled"],
                 "the D-Bus monitor's notices: the cgroup's throttling and what it refused", 30)
        check_eq(bus_episodes("started")[0].get("unit"), cg.name, "the bus notice names the unit")

        execs.wait(lambda m: sum(1 for x in execs.msgs if x.get("type") == "exec") >= execs_n,
                   f"all {execs_n} execs of a throttled cgroup", timeout=30)
        check_eq(len([m for m in execs.messages() if m.get("type") == "exec"]), execs_n, "execs delivered once")
        check(unit_row(stats_bus.stats(), cg_exec.id)["throttled"] > 0, "the exec cgroup's opens were throttled")

        after = stats_bus.producer(PRODUCER_OPEN)
        check(after["filtered"] - before["filtered"] >= n - attempts, "throttled opens count as filtered")
        check_eq(after["hits"], after["filtered"] + after["attempts"], "hits = filtered + attempts")
    finally:
        if mon:
            mon.close()
        d.stop()
