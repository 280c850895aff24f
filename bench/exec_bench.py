# SPDX-License-Identifier: LGPL-2.1-or-later
"""Row p, a fork+exec storm (issue 28), for bench.py: a shell that runs /bin/true N times, with
no daemon, then under perfrelayd with the exec, exit, fork and open probes (no client), then
with a socket client whose "ancestor" filter walks every event's lineage through the process
table. Reports the storm's exec rate in each, perfrelayd's CPU per exec (its CPU over the storm
minus its idle CPU over as long), the process table's memory per entry and per process held,
and its lineage misses and evictions. Starts its own dbus-daemon and perfrelayd; removes them
afterwards. Standalone: python3 bench/exec_bench.py [--defaults] BUILD [N] [REPEAT] (--defaults:
perfrelayd at its default configuration instead of row p's probes)."""
import os
import statistics
import subprocess
import sys
import time


from capture_bench import cpu_ns

STORM = 'i=0; while [ "$i" -lt "$1" ]; do /bin/true; i=$((i + 1)); done'


def storm(n):
    """Seconds for n fork+execs of /bin/true by one shell."""
    start = time.monotonic()
    subprocess.run(["/bin/sh", "-c", STORM, "prstorm", str(n)], check=True)
    return time.monotonic() - start


# Row p's perfrelayd: the probes the process table needs and open, nothing else. --defaults
# runs it at its defaults instead (issue 39: the storm's price at the defaults).
ROW_P_CONFIG = "[Probes]\nProbes=exec exit fork open\n[Counters]\nCounters=none\n[Recorder]\nRecorder=no\n"


def run(build, repeat, n, log, config=ROW_P_CONFIG):
    from prtest import Daemon, SocketClient
    from prtest.statsbus import StatsBus

    binary = os.path.join(build, "daemon", "perfrelayd")
    bus = StatsBus(binary)
    d = Daemon(binary, "bench-exec", stdout=False, config=config)
    rounds = []
    try:
        d.start()
        storm(n // 10)  # warm the page cache and the table
        for _ in range(repeat):
            # Without perfrelayd: stopped and its pins removed, so that no probe stays attached
            # (pinned links outlive a daemon that merely stops).
            d.stop()
            subprocess.run([binary, "--config", d.config_path, "--cleanup"], check=True, capture_output=True)
            off = storm(n)
            d.start()
            # A daemon without a process table (an older build, for comparison) has no section.
            before = bus.stats().get("processes", {})
            idle0 = cpu_ns(d.proc.pid)
            time.sleep(off)
            idle = cpu_ns(d.proc.pid) - idle0
            t0 = cpu_ns(d.proc.pid)
            on = storm(n)
            used = cpu_ns(d.proc.pid) - t0
            # A client whose "ancestor" filter matches nothing: every open's lineage is walked
            # (a daemon without a process table refuses the request: no such run).
            walked, used_walk = on, used
            if before:
                c = SocketClient(d.socket_path, {"subscribe": {"types": ["open", "exec"],
                                                               "ancestor": {"comm": ["no-such-comm"]}}})
                c.hello()
                t1 = cpu_ns(d.proc.pid)
                walked = storm(n)
                used_walk = cpu_ns(d.proc.pid) - t1
                c.close()
            st = bus.stats().get("processes", {})
            r = {"execs_per_s_off": round(n / off), "execs_per_s_on": round(n / on),
                 "execs_per_s_ancestor_client": round(n / walked),
                 "daemon_cpu_ns_per_exec": round(max(used - idle * on / off, 0) / n),
                 "daemon_cpu_ns_per_exec_ancestor_client": round(max(used_walk - idle * walked / off, 0) / n),
                 "lineage_misses": st.get("lineage_misses", 0) - before.get("lineage_misses", 0),
                 "evicted": st.get("evicted", 0) - before.get("evicted", 0),
                 "table_bytes": st.get("bytes", 0), "table_capacity": st.get("capacity", 0),
                 "table_live": st.get("live", 0), "table_entries": st.get("entries", 0), "daemon_cpu_ns_storm": used, "daemon_cpu_ns_storm_ancestor_client": used_walk,
                 "daemon_cpu_ns_idle": idle, "storm_s": round(on, 3), "storm_s_off": round(off, 3)}
            rounds.append(r)
            log(f"exec storm: {r['execs_per_s_off']} execs/s without perfrelayd, {r['execs_per_s_on']} with it, "
                f"{r['execs_per_s_ancestor_client']} with an ancestor client; daemon CPU {r['daemon_cpu_ns_per_exec']} "
                f"ns/exec, {r['daemon_cpu_ns_per_exec_ancestor_client']} ns/exec with the client; "
                f"misses {r['lineage_misses']}")
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        return {"description": f"row p: {n} fork+execs of /bin/true by one shell, perfrelayd "
                               + ("with Probes=exec exit fork open" if config == ROW_P_CONFIG else "at its defaults")
                               + " (docs/events.md, \"Process identity\")",
                "execs": n,
                "execs_per_s_on_to_off": round(med["execs_per_s_on"] / med["execs_per_s_off"], 3),
                "daemon_cpu_ns_per_exec": med["daemon_cpu_ns_per_exec"],
                "daemon_cpu_ns_per_exec_ancestor_client": med["daemon_cpu_ns_per_exec_ancestor_client"],
                "table_bytes_per_entry": round(med["table_bytes"] / max(med["table_capacity"], 1), 1),
                "table_bytes_per_process_held": round(med["table_bytes"] / max(med["table_entries"], 1), 1),
                "rounds": rounds}
    finally:
        if d.proc:
            d.stop()
        d.cleanup()
        bus.close()


if __name__ == "__main__":
    import json

    args = [a for a in sys.argv[1:] if a != "--defaults"]
    res = run(os.path.abspath(args[0]), int(args[2]) if len(args) > 2 else 3,
              int(args[1]) if len(args) > 1 else 5000, lambda m: print(m, file=sys.stderr, flush=True),
              config="" if "--defaults" in sys.argv else ROW_P_CONFIG)
    print(json.dumps(res, indent=1))
