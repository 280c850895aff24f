# SPDX-License-Identifier: LGPL-2.1-or-later
"""Row l, a flood (issue 39), for bench.py: perfrelayd with main rings small enough to overflow
(PagesPerCpu=2; the protected lane at its default), the steady third-party producer flat out on
every CPU, each in a unit cgroup of its own, a process failing openat() as fast as it can in
another, four binary subscribers of everything reading as fast as they can, and MARKED marked
execs run meanwhile. Reports per round: the marked execs delivered of those run (every one, or
the lane failed), what the flood lost (the steady producers' and the open probe's failures),
who GetStats() names as the top loser, whether the stream's notices (docs/protocol.md, "Lost
upstream") add up to the steady producers' failures and name a flooder's unit, and whether
each producer's ledger identity and the open probe's hits = filtered + attempts hold after it.
Starts its own dbus-daemon and perfrelayd and removes them afterwards. Standalone:
python3 bench/flood_bench.py BUILD [REPEAT]."""
import os
import statistics
import subprocess
import sys

MARKED = 500
BUSY = 4
EXEC, EXIT, OPEN = 1, 2, 4
CONFIG = "[Ring]\nPagesPerCpu=2\n[Socket]\nMaxQueueBytesPerUid=1G\nMaxQueueBytes=2G\n"


def identity(p):
    return p["attempts"] == p["received"] + p["malformed"] + p["failures"] + p["crash_lost"]


def one_round(build, bus, tag, log):
    from prtest import OPEN_FLOOD, Daemon, SocketClient, UnitCgroup, wait_for
    from prtest.steady import PRODUCER as STEADY, SteadyProducer

    binary = os.path.join(build, "daemon", "perfrelayd")
    cpus = sorted(os.sched_getaffinity(0))
    d = Daemon(binary, tag, config=CONFIG, stdout=False)
    cgs, busy, floods, clients, opener = [], [], [], [], None
    try:
        d.start()
        steady_cg = [UnitCgroup(f"bench-flood-steady{cpu}") for cpu in cpus]
        open_cg = UnitCgroup("bench-flood-open")
        cgs = steady_cg + [open_cg]
        busy = [SocketClient(d.socket_path, {"subscribe": {}, "format": "binary"}, discard=True) for _ in range(BUSY)]
        for b in busy:
            b.wait_subscribed()
        marked = os.path.join(d.dir, "prbenchmark")
        subprocess.run(["cp", "/bin/true", marked], check=True)
        execs = SocketClient(d.socket_path, {"subscribe": {"types": ["exec"], "comm": ["prbenchmark"]}})
        notices = SocketClient(d.socket_path, {"subscribe": {"comm": ["prnomatch"]}})
        clients = [execs, notices]
        execs.hello()
        notices.hello()
        floods = [SteadyProducer(build, d.pin_path, cpu, cgroup=cg) for cpu, cg in zip(cpus, steady_cg)]
        for f in floods:
            f.cmd("rate 10000000")
        opener = subprocess.Popen([sys.executable, "-c", OPEN_FLOOD], preexec_fn=open_cg.enter)
        subprocess.run(["sh", "-c", f'i=0; while [ $i -lt {MARKED} ]; do "$0"; i=$((i+1)); done', marked],
                       check=True, timeout=600)

        def delivered():
            return sum(1 for m in execs.messages() if m.get("type") == "exec")
        try:
            wait_for(lambda: delivered() >= MARKED, "the marked execs", timeout=30)
        except Exception:
            pass  # counted below: fewer than run
        for f in floods:
            f.cmd("rate 0")
        opener.kill()
        opener.wait()
        opener = None
        for b in busy:
            b.close()
        busy = []

        steady = wait_for(lambda: (lambda p: p if identity(p) else None)(bus.producer(STEADY)),
                          "the steady producers settled", 30)
        open_ = wait_for(lambda: (lambda p: p if identity(p) else None)(bus.producer(OPEN)),
                         "the open probe settled", 30)
        exec_ = wait_for(lambda: (lambda p: p if identity(p) else None)(bus.producer(EXEC)),
                         "the exec probe settled", 30)
        exit_ = wait_for(lambda: (lambda p: p if identity(p) else None)(bus.producer(EXIT)),
                         "the exit probe settled", 30)

        def told(producer):
            return [m for m in notices.messages() if m.get("type") == "lost" and m.get("producer") == producer]
        try:
            wait_for(lambda: sum(m["kernel"] for m in told(STEADY)) == steady["failures"],
                     "the notices of the steady producers' loss", 10)
        except Exception:
            pass  # reported as not exact
        st = bus.stats()
        rows = sorted(st["units"]["list"], key=lambda u: -u["failures"])
        flooders = {cg.id for cg in steady_cg}
        steady_told = told(STEADY)
        res = {
            "marked_execs_run": MARKED,
            "marked_execs_delivered": delivered(),
            "exec_failures": exec_["failures"],
            "exit_failures": exit_["failures"],
            "steady_attempts": steady["attempts"],
            "steady_failures": steady["failures"],
            "steady_loss_percent": round(100 * steady["failures"] / steady["attempts"], 1) if steady["attempts"] else 0,
            "open_failures": open_["failures"],
            "top_loser_is_a_flooder": bool(rows) and rows[0]["cgroup_id"] in flooders,
            "top_loser_unit": rows[0]["unit"] if rows else None,
            "notices_add_up": sum(m["kernel"] for m in steady_told) == steady["failures"],
            "notices_name_a_flooder": any(u.get("cgroup_id") in flooders for m in steady_told for u in m["units"]),
            "open_notices_name_the_open_flood": any(u.get("cgroup_id") == open_cg.id for m in told(OPEN)
                                                    for u in m["units"]),
            "identities_hold": identity(steady) and identity(open_) and identity(exec_) and identity(exit_) and
                               open_["hits"] == open_["filtered"] + open_["attempts"],
        }
        log(f"flood: {res['marked_execs_delivered']}/{MARKED} marked execs delivered, steady producers lost "
            f"{res['steady_loss_percent']} % ({res['steady_failures']}), opens lost {res['open_failures']}, top "
            f"loser {res['top_loser_unit']}, notices exact: {res['notices_add_up']}")
        return res
    finally:
        if opener:
            opener.kill()
            opener.wait()
        for f in floods:
            f.close()
        for c in busy + clients:
            c.close()
        if d.proc:
            d.stop()
        d.cleanup()
        for cg in cgs:
            cg.remove()


def run(build, repeat, log):
    from prtest.statsbus import StatsBus

    bus = StatsBus(os.path.join(build, "daemon", "perfrelayd"))
    try:
        rounds = [one_round(build, bus, "bench-flood", log) for _ in range(repeat)]
    finally:
        bus.close()
    return {"description": f"row l: the steady producer flat out on every CPU and a failing openat() loop, "
                           f"{BUSY} busy subscribers of everything, PagesPerCpu=2, {MARKED} marked execs",
            "marked_execs_delivered_ratio": statistics.median(r["marked_execs_delivered"] / MARKED for r in rounds),
            "lane_failures": sum(r["exec_failures"] + r["exit_failures"] for r in rounds),
            "steady_loss_percent": statistics.median(r["steady_loss_percent"] for r in rounds),
            "all_attributed": all(r["top_loser_is_a_flooder"] and r["notices_add_up"] and r["notices_name_a_flooder"]
                                  for r in rounds),
            "identities_hold": all(r["identities_hold"] for r in rounds),
            "rounds": rounds}


if __name__ == "__main__":
    import json

    res = run(os.path.abspath(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1,
              lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(res, indent=1))
