# SPDX-License-Identifier: LGPL-2.1-or-later
"""Row h, the host's price of the open probe (issue 39), for bench.py: one process pinned to CPU 0
opens and closes a file N times (bench/openloop.c), in one round each of:
  off      no perfrelayd (stopped, its pins removed: no probe stays attached);
  floor    no perfrelayd, programs that do nothing on the same two tracepoints (what any
           syscall-tracepoint tracer costs);
  all      perfrelayd at its defaults with one subscriber of everything (binary, read as it
           comes, not parsed);
  exec     perfrelayd at its defaults with one subscriber of exec only: the open probe is not
           attached (OnDemand=, RecorderTypes= without open).
Reports each one's rate as a ratio to "off" of the same round (median over the rounds), and
perfrelayd's own cost per open above the floor. Starts its own dbus-daemon and perfrelayd and
removes them afterwards. Standalone: python3 bench/host_bench.py BUILD [N] [REPEAT]."""
import os
import statistics
import subprocess
import sys

CONFIGS = ("off", "floor", "all", "exec")


def loop(build, n, noop=False):
    """Nanoseconds per open()+close() of n, on CPU 0."""
    exe = os.path.join(build, "bench", "openloop")
    args = ["taskset", "-c", "0", exe] + (["--noop"] if noop else []) + [str(n)]
    return float(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def open_probe_detached(bus):
    """Whether perfrelayd's open probe is off (an older perfrelayd, without GetStats()' "probes",
    never detaches it)."""
    probes = bus.stats().get("probes")
    return probes is None or not probes["open"]["attached"]


def run(build, repeat, n, log):
    from prtest import Daemon, SocketClient, wait_for
    from prtest.statsbus import StatsBus

    binary = os.path.join(build, "daemon", "perfrelayd")
    bus = StatsBus(binary)
    d = Daemon(binary, "bench-host", stdout=False)
    rounds = []
    try:
        loop(build, n // 10)  # warm the page cache
        for i in range(repeat):
            r = {}
            # Alternated order within a round, so that a slow stretch of the machine does not
            # always fall on the same configuration.
            order = CONFIGS if i % 2 == 0 else tuple(reversed(CONFIGS))
            for config in order:
                if config in ("off", "floor"):
                    if d.proc:
                        d.stop()
                    subprocess.run([binary, "--config", d.config_path, "--cleanup"], check=True, capture_output=True)
                    r[config] = loop(build, n, noop=config == "floor")
                    continue
                if not d.proc:
                    d.start()
                request = {"subscribe": {"types": ["exec"]} if config == "exec" else {}, "format": "binary"}
                c = SocketClient(d.socket_path, request)
                c.wait_subscribed()
                if config == "exec":
                    # A subscriber of everything just left: its open probe lingers (2 s).
                    wait_for(lambda: open_probe_detached(bus), "the open probe detached", timeout=30)
                if c.data[:1] != b"{" or b'"hello"' not in bytes(c.data).split(b"\n")[0]:
                    raise RuntimeError(f"perfrelayd refused the subscription: {bytes(c.data[:200])!r}")
                r[config] = loop(build, n)
                c.close()
            rounds.append(r)
            log(f"host price: open+close {r['off']:.0f} ns without perfrelayd, {r['floor']:.0f} ns under "
                f"do-nothing programs, {r['all']:.0f} ns with a subscriber of everything, {r['exec']:.0f} ns "
                f"with a subscriber of exec")
        ratios = {c: statistics.median(r["off"] / r[c] for r in rounds) for c in CONFIGS}
        above_floor = statistics.median(r["all"] - r["floor"] for r in rounds)
        return {"description": f"row h: {n} open()+close() on CPU 0, as a ratio to no perfrelayd: under do-nothing "
                               "programs on the same tracepoints (floor), perfrelayd at its defaults with a "
                               "subscriber of everything (all) and of exec only (exec)",
                "iterations": n,
                "ratio_floor": round(ratios["floor"], 3), "ratio_all": round(ratios["all"], 3),
                "ratio_exec": round(ratios["exec"], 3),
                "perfrelayd_ns_per_open_above_floor": round(above_floor, 1),
                "rounds": rounds}
    finally:
        if d.proc:
            d.stop()
        d.cleanup()
        bus.close()


if __name__ == "__main__":
    import json

    res = run(os.path.abspath(sys.argv[1]), int(sys.argv[3]) if len(sys.argv) > 3 else 3,
              int(sys.argv[2]) if len(sys.argv) > 2 else 200000, lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(res, indent=1))
