#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The benchmark driver (bench/run calls it): runs every row of perfrelay-bench against the libbpf
baselines and perfrelayd, sweeps the producer rate, writes DIR/results.json and DIR/throughput.png."""
import argparse
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

# otlpreceiver (row o) and the daemon helpers come from the tests' package tests/lib/prtest: bench/run
# puts tests/lib on PYTHONPATH (PYTHONPATH=tests/lib python3 bench/bench.py ... does the same).

BENCH_PRODUCER = 16  # PERFRELAY_PRODUCER_BENCH in bpf/event.h

# The rows of one run, in the order they are measured (and repeated, interleaved, so that a slow
# moment of a noisy machine does not land on one row only).
ROWS = [
    # name, description, perfrelay-bench arguments
    ("a", "libbpf perf_buffer__new_raw, perfrelayd's wakeup attributes (baseline)", ["--mode", "libbpf-raw"]),
    ("a'", "libbpf perf_buffer__new, a wakeup per record", ["--mode", "libbpf-default"]),
    ("b", "perfrelayd, no client", ["--mode", "daemon", "--clients", "0"]),
    ("c", "perfrelayd, 1 JSON client", ["--mode", "daemon", "--clients", "1", "--format", "json"]),
    ("d", "perfrelayd, 4 JSON clients", ["--mode", "daemon", "--clients", "4", "--format", "json"]),
    ("e", "perfrelayd, 1 binary client", ["--mode", "daemon", "--clients", "1", "--format", "binary"]),
    ("f", "perfrelayd, 16 binary clients", ["--mode", "daemon", "--clients", "16", "--format", "binary"]),
    # The flight recorder on (docs/recorder.md): the producer writes each record twice; the other
    # daemon rows run with Recorder=no so that they keep measuring the live path alone.
    ("r", "perfrelayd, 1 binary client, flight recorder on",
     ["--mode", "daemon", "--clients", "1", "--format", "binary"]),
    # The event history (docs/history.md): every daemon row runs with it at its defaults (which
    # do not record the benchmark's type); b0 with it off, y with it recording every record.
    ("b0", "perfrelayd, no client, history off", ["--mode", "daemon", "--clients", "0"]),
    ("y", "perfrelayd, no client, history recording the benchmark's records",
     ["--mode", "daemon", "--clients", "0"]),
]
# Each row's [History] (docs/history.md): the defaults but for b0 and y.
ROW_HISTORY = {"b0": "History=no\n", "y": "HistoryRecordBench=yes\nHistoryMaxUse=8G\n"}
ROW_ARGS = {name: args for name, _, args in ROWS}
# Row k (bench/burst_bench.py): ring pages per CPU and reader nice value. The old defaults, the
# old ring with the new nice value, the smallest ring that nearly held, the new defaults.
BURST_CONFIGS = [(64, 0), (64, -10), (128, -10), (512, -10)]
ROW_DESC = {name: desc for name, desc, _ in ROWS}


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


class Daemon:
    """A perfrelayd per row: its own config, pin root and socket; readiness by sd_notify. Its
    exit statistics are parsed so that each row's accounting is checked against the daemon's own
    counters, not only the producer's and the clients'."""

    def __init__(self, binary, workdir, pin_root, pages, cpus, reader_priority=0, reader_budget=50):
        self.binary = binary
        self.reader_priority = reader_priority
        self.reader_budget = reader_budget
        self.cpus = cpus  # the daemon's CPU affinity (its readers stay within it), or None
        self.dir = workdir
        self.pin_root = pin_root
        self.socket_path = os.path.join(workdir, "events.sock")
        self.config_path = os.path.join(workdir, "perfrelay.conf")
        self.pages = pages
        self.set_recorder(False)
        self.proc = None

    def set_recorder(self, on, counters=False, history=""):
        # Counters off but where a row measures them (docs/counters.md): the other rows keep
        # measuring the live path alone.
        with open(self.config_path, "w") as f:
            f.write(f"[Daemon]\nPinPath={self.pin_root}\n[Ring]\nPagesPerCpu={self.pages}\n[Probes]\nProbes=none\n"
                    f"[Socket]\nSocketPath={self.socket_path}\n[Recorder]\nRecorder={'yes' if on else 'no'}\n"
                    f"[Counters]\nCounters={'default' if counters else 'none'}\n"
                    f"[History]\nHistoryPath={self.dir}/history\n{history}"
                    + (f"[Readers]\nReaderPriority={self.reader_priority}\n"
                       f"ReaderPriorityBudget={self.reader_budget}\n" if self.reader_priority else ""))

    def start(self):
        notify_path = os.path.join(self.dir, "notify.sock")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        notify.settimeout(30)
        self.stderr_path = os.path.join(self.dir, "perfrelayd.log")
        err = open(self.stderr_path, "w")
        cpus = self.cpus
        self.proc = subprocess.Popen([self.binary, "--config", self.config_path], stdout=subprocess.DEVNULL,
                                     stderr=err, env=dict(os.environ, NOTIFY_SOCKET=notify_path),
                                     preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        err.close()
        try:
            while "READY=1" not in notify.recv(4096).decode().split("\n"):
                pass
        except socket.timeout:
            self.proc.kill()
            self.proc.wait()
            raise BenchError(f"perfrelayd did not become ready within 30s:\n{self.log()}")
        finally:
            notify.close()

    def log(self):
        with open(self.stderr_path) as f:
            return f.read()

    def stop(self):
        """SIGTERM, wait, and parse the exit statistics."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise BenchError("perfrelayd did not exit within 60s of SIGTERM")
        self.proc = None
        text = self.log()
        if rc != 0:
            raise BenchError(f"perfrelayd exited with status {rc}:\n{text}")
        stats = {"received": 0, "malformed": 0, "ring_lost": 0, "offered": 0, "sent": 0, "dropped": 0}
        for line in text.splitlines():
            words = line.replace(",", "").replace(";", "").split()
            if "Producer" in words and words[words.index("Producer") + 1] == f"{BENCH_PRODUCER}:":
                # "Producer 16: A attempts, R received, ...; this daemon: S received, T malformed":
                # the run's own figures are this daemon's (the pinned totals may include what
                # the producer's maps counted before it started).
                session = words[words.index("daemon:") + 1:]
                stats["received"] = int(session[session.index("received") - 1])
                stats["malformed"] = int(session[session.index("malformed") - 1])
            elif "CPU" in words and "lost" in words and "received" in words:
                stats["ring_lost"] += int(words[words.index("lost") - 1])
            elif "History:" in words and "offered" in words:
                # "History: O offered, W written, B dropped (writer behind), D dropped (disk); S
                # segments, N bytes; R bytes of frames in K bytes of blocks; writer C ns of CPU"
                stats["history"] = {
                    "offered": int(words[words.index("offered") - 1]),
                    "written": int(words[words.index("written") - 1]),
                    "dropped": int(words[words.index("behind)") - 3]) + int(words[words.index("(disk)") - 2]),
                    "frame_bytes": int(words[words.index("frames") - 3]),
                    "block_bytes": int(words[words.index("blocks") - 3]),
                    "writer_cpu_ns": int(words[words.index("CPU") - 3]),
                }
            elif "Socket" in words and "clients:" in words:
                stats["offered"] = int(words[words.index("offered") - 2])
                stats["sent"] = int(words[words.index("sent") - 1])
                stats["dropped"] = int(words[words.index("dropped") - 1])
        return stats

    def kill(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def cleanup(self):
        self.kill()
        subprocess.run([self.binary, "--config", self.config_path, "--cleanup"], capture_output=True)


class Bench:
    def __init__(self, args):
        self.args = args
        self.bench = os.path.join(args.build, "bench", "perfrelay-bench")
        self.perfrelayd = os.path.join(args.build, "daemon", "perfrelayd")
        for p in (self.bench, self.perfrelayd):
            if not os.access(p, os.X_OK):
                raise BenchError(f"{p} is missing: build first (meson compile -C {args.build})")
        self.workdir = tempfile.mkdtemp(prefix="perfrelay-bench-")
        self.pin_root = f"/sys/fs/bpf/perfrelay-bench-{os.getpid()}"
        self.private_root = f"/sys/fs/bpf/perfrelay-bench-{os.getpid()}-libbpf"
        # The daemon gets the consumer's CPU, like the baselines' consumer thread: the producer's
        # CPU stays the producer's (a reader woken there would preempt it).
        self.daemon = Daemon(self.perfrelayd, self.workdir, self.pin_root, args.pages,
                             {args.consumer_cpu} if args.consumer_cpu >= 0 else None,
                             reader_priority=args.reader_priority, reader_budget=args.reader_priority_budget)
        self.runs = 0

    def common_args(self):
        a = self.args
        return ["--records-per-call", str(a.records_per_call), "--record-size", str(a.record_size),
                "--producer-cpus", a.producer_cpus, "--consumer-cpu", str(a.consumer_cpu), "--pages", str(a.pages)]

    def run_row(self, row, rate, duration):
        """One measurement of one row; returns perfrelay-bench's figures plus the daemon's."""
        args = [self.bench] + ROW_ARGS[row] + self.common_args() + ["--rate", str(int(rate)),
                                                                    "--duration", str(duration)]
        daemon = ROW_ARGS[row][1] == "daemon"
        if daemon:
            self.daemon.set_recorder(row == "r", history=ROW_HISTORY.get(row, ""))
            self.daemon.start()
            args += ["--pin-root", self.pin_root, "--socket", self.daemon.socket_path,
                     "--daemon-pid", str(self.daemon.proc.pid)]
        else:
            args += ["--pin-root", self.private_root]
        try:
            r = subprocess.run(args, capture_output=True, text=True, timeout=duration + 60)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            raise BenchError(f"{' '.join(args)} did not finish")
        if r.returncode != 0:
            if daemon:
                self.daemon.kill()
            raise BenchError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
        res = json.loads(r.stdout)
        res["row"] = row
        # The producer has detached (perfrelay-bench exited): the daemon's counts are final.
        if daemon:
            st = self.daemon.stop()
            res["daemon"] = st
            self.check_daemon_accounting(res, st)
        elif not res["accounted"]:
            raise BenchError(f"row {row}: attempts {res['attempts']} != received {res['received']} + "
                             f"failures {res['failures']}")
        self.runs += 1
        return res

    @staticmethod
    def check_daemon_accounting(res, st):
        """attempts = received by the daemon + output failures; ring lost <= failures; per client
        offered = sent + dropped, and what the clients counted matches the daemon."""
        row = res["row"]
        if st["malformed"]:
            raise BenchError(f"row {row}: the daemon rejected {st['malformed']} benchmark records")
        if res["attempts"] != st["received"] + res["failures"]:
            raise BenchError(f"row {row}: attempts {res['attempts']} != daemon received {st['received']} "
                             f"+ failures {res['failures']}")
        if st["ring_lost"] > res["failures"]:
            raise BenchError(f"row {row}: ring lost {st['ring_lost']} > failures {res['failures']}")
        subs = res["subscribers"]
        if st["offered"] != st["sent"] + st["dropped"]:
            raise BenchError(f"row {row}: daemon offered {st['offered']} != sent {st['sent']} + "
                             f"dropped {st['dropped']}")
        if subs and (st["sent"] != sum(s["events"] for s in subs) or
                     st["dropped"] != sum(s["lost"] for s in subs) or
                     st["offered"] != len(subs) * st["received"]):
            raise BenchError(f"row {row}: the clients counted {sum(s['events'] for s in subs)} events and "
                             f"{sum(s['lost'] for s in subs)} lost; the daemon offered {st['offered']}, sent "
                             f"{st['sent']}, dropped {st['dropped']}")
        if not res["accounted"]:
            raise BenchError(f"row {row}: a client did not account for every event")

    # ---- the parts of a run ----

    def history_read(self):
        """Reads back the history rows y wrote, through the socket as a user would: a query whose
        filter matches nothing (every block read, decompressed, each record decoded and
        matched: the scan), and the JSON replay of every record."""
        self.daemon.set_recorder(False, history=ROW_HISTORY["y"])
        self.daemon.start()
        out = {}
        try:
            for name, req in (("scan", {"follow": False, "subscribe": {"pid": [2 ** 31]}}),
                              ("replay_json", {"follow": False, "subscribe": {"types": ["bench"]}})):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.daemon.socket_path)
                t0 = time.monotonic()
                s.sendall(json.dumps(req).encode() + b"\n")
                lines = nbytes = 0
                while True:
                    chunk = s.recv(1 << 22)
                    if not chunk:
                        break
                    lines += chunk.count(b"\n")
                    nbytes += len(chunk)
                seconds = time.monotonic() - t0
                s.close()
                out[name] = {"seconds": round(seconds, 3), "lines": lines - 1, "bytes": nbytes}
            events = out["replay_json"]["lines"]
            for name in out:
                out[name]["events_per_s"] = round(events / out[name]["seconds"]) if out[name]["seconds"] else None
            out["events"] = events
            log(f"history read: {events} events, scan {out['scan']['events_per_s'] / 1e6:.2f} M/s, "
                f"JSON replay {out['replay_json']['events_per_s'] / 1e6:.2f} M/s")
        finally:
            self.daemon.stop()
        if self.args.history_gib > 0:
            out["unit_query"] = self.history_unit_query()
        return out

    def history_bytes(self):
        d = os.path.join(self.daemon.dir, "history")
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".seg"))

    @staticmethod
    def query_seconds(path, req):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        t0 = time.monotonic()
        s.sendall(json.dumps(req).encode() + b"\n")
        data = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        seconds = time.monotonic() - t0
        s.close()
        return seconds, [json.loads(line) for line in data.decode().splitlines()[1:]]

    def history_unit_query(self):
        """A unit's last hour in a history of --history-gib GiB: the benchmark's records fill it
        (no unit), ten execs of a unit come last; the query reads the blocks that may hold the
        unit (the blocks' unit filters, docs/history.md)."""
        from prtest import UnitCgroup

        target = self.args.history_gib * (1 << 30)
        while self.history_bytes() < target:
            self.daemon.set_recorder(False, history=ROW_HISTORY["y"])
            self.daemon.start()
            r = subprocess.run([self.bench] + ROW_ARGS["y"] + self.common_args() +
                               ["--rate", "0", "--duration", "10", "--pin-root", self.pin_root,
                                "--socket", self.daemon.socket_path, "--daemon-pid", str(self.daemon.proc.pid)],
                               capture_output=True, text=True, timeout=120)
            self.daemon.stop()
            if r.returncode != 0:
                raise BenchError(f"filling the history failed:\n{r.stderr}")
            log(f"history: {self.history_bytes() / (1 << 30):.2f} GiB of {self.args.history_gib}")
        self.daemon.set_recorder(False, history=ROW_HISTORY["y"] + "[Probes]\nProbes=exec\n")
        self.daemon.start()
        unit = UnitCgroup("bench-history")
        try:
            for i in range(10):
                subprocess.run(["/bin/true", "perfrelay-bench-unit", str(i)], preexec_fn=unit.enter, check=True)
            req = {"follow": False, "since": time.time() - 3600, "subscribe": {"unit": [unit.name]}}
            deadline = time.monotonic() + 30
            while True:
                seconds, lines = self.query_seconds(self.daemon.socket_path, req)
                found = [m for m in lines if m.get("type") == "exec"]
                if len(found) == 10 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)  # the writer cuts the unit's block within a quarter second
            runs = [self.query_seconds(self.daemon.socket_path, req)[0] for _ in range(5)]
        finally:
            self.daemon.stop()
            unit.remove()
        out = {"history_bytes": self.history_bytes(), "events_found": len(found),
               "seconds_median": round(statistics.median(runs), 4), "seconds": [round(x, 4) for x in runs]}
        log(f"history: one unit's last hour in {out['history_bytes'] / (1 << 30):.2f} GiB: "
            f"{1000 * out['seconds_median']:.1f} ms, {len(found)} events")
        return out

    def pingpong(self, repeat, duration, mode):
        """The counters' cost: context switches per second of a ping-pong pair (mode: threads or
        processes) on the producer CPU, beside a daemon with counters on and off, alternating
        (off first each round). Returns the runs and the median of the per-round on/off ratios."""
        exe = os.path.join(self.args.build, "bench", "pingpong")
        cpu = int(self.args.producer_cpus.split(",")[0].split("-")[0])
        runs, ratios = [], []
        for _ in range(repeat):
            rnd = {}
            for on in (False, True):
                self.daemon.set_recorder(False, counters=on)
                self.daemon.start()
                try:
                    r = subprocess.run([exe, str(duration), str(cpu), mode], capture_output=True, text=True,
                                       timeout=duration + 60)
                finally:
                    self.daemon.stop()
                if r.returncode != 0:
                    raise BenchError(f"{exe} failed ({r.returncode}): {r.stderr}")
                res = json.loads(r.stdout)
                rnd["on" if on else "off"] = res["switches_per_s"]
            runs.append(rnd)
            ratios.append(rnd["on"] / rnd["off"])
            log(f"ping-pong ({mode}): {rnd['off'] / 1e3:.0f} k switches/s with counters off, {rnd['on'] / 1e3:.0f} k on "
                f"({ratios[-1]:.3f}x)")
        self.daemon.set_recorder(False)
        return runs, round(statistics.median(ratios), 3)

    def max_rate_rows(self):
        """Every row as fast as the producer goes, in rounds. A round runs the baseline (a) first
        and last, the other rows in between in a shuffled order: a row's ratio in a round is
        against the mean of the two baselines around it, so that neither a drift of the
        machine's speed during the round nor a fixed position after a particular row favours
        one row. Returns per row its runs and the round baselines."""
        per_row = {name: [] for name, _, _ in ROWS}
        baselines = []
        shuffle = random.Random(self.args.seed)
        others = [name for name, _, _ in ROWS if name != "a"]
        for rnd in range(self.args.repeat):
            order = others[:]
            shuffle.shuffle(order)
            if "a" in per_row:
                order = ["a"] + order + ["a"]
            round_a = []
            for name in order:
                res = self.run_row(name, 0, self.args.duration)
                if name == "a":
                    round_a.append(res)
                else:
                    per_row[name].append(res)
                log(f"max rate, round {rnd + 1}/{self.args.repeat}, row {name}: "
                    f"{res['events_per_s'] / 1e6:.2f} M/s delivered, {res['lost']} lost")
            if round_a:
                per_row["a"].extend(round_a)
                baselines.append(statistics.mean(r["events_per_s"] for r in round_a))
        return per_row, baselines

    def zero_loss(self, res):
        return res["lost"] == 0

    def sweep(self, row, hint):
        """The highest producer rate with no loss. From hint/8: doubling while runs lose nothing
        (until the producer cannot reach the target: then the consumer keeps up with all it
        can do), or halving while they lose events; then bisection between the last rate without
        and the first with loss. Returns (zero-loss rate, producer_bound, points)."""
        points = []
        good = bad = None
        producer_bound = False

        def measure(rate):
            res = self.run_row(row, rate, self.args.sweep_duration)
            points.append(res)
            log(f"sweep {row}: target {rate / 1e6:.3f} M/s, offered {res['offered_per_s'] / 1e6:.3f} M/s, "
                f"lost {res['lost']}")
            return res

        rate = max(hint / 8, 1000)
        res = measure(rate)
        if self.zero_loss(res):
            good = res
            while len(points) < 12:
                if res["offered_per_s"] < 0.9 * rate:
                    producer_bound = True
                    break
                rate *= 2
                res = measure(rate)
                if not self.zero_loss(res):
                    bad = rate
                    break
                good = res
        else:
            bad = rate
            while len(points) < 12:
                rate /= 2
                res = measure(rate)
                if self.zero_loss(res):
                    good = res
                    break
                bad = rate
        if good is not None and bad is not None:
            lo, hi = good["rate_target"], bad
            for _ in range(self.args.bisect):
                mid = (lo * hi) ** 0.5
                res = measure(mid)
                if self.zero_loss(res):
                    lo = mid
                    if res["offered_per_s"] > good["offered_per_s"]:
                        good = res
                else:
                    hi = mid
        zl = good["offered_per_s"] if good else 0.0
        return zl, producer_bound, points

    def export_row(self, duration, rate, target="nats"):
        """(x) perfrelay-export: the daemon's binary stream published to a local nats-server -js
        with acks, the producer at `rate` (0: as fast as it goes); (o) with target "otlp": posted
        as OTLP/HTTP logs (protobuf) to a local receiver that unpacks every request with
        protobuf-c (bench/otlp-receiver.c, its own CPU per record measured: its capacity); (g)
        the same with Compression=gzip. The exporter's rate is what it
        had acknowledged by the time it was idle again, over the time from the producer's start;
        its CPU per acknowledged event comes from /proc (utime + stime). Checks the exporter's
        accounting on the way: offered + daemon_lost = what the daemon received, exported +
        export_dropped = offered."""
        row = {"nats": "x", "otlp": "o", "otlp-gzip": "g"}[target]
        exporter = os.path.join(self.args.build, "client", "export", "perfrelay-export")
        receiver_bin = os.path.join(self.args.build, "bench", "otlp-receiver")
        nats = shutil.which("nats-server")
        if not os.access(exporter, os.X_OK) or (target == "nats" and not nats) or \
                (target != "nats" and not os.access(receiver_bin, os.X_OK)):
            log(f"row {row} skipped: perfrelay-export or bench/otlp-receiver was not built, or nats-server is missing")
            return None
        work = tempfile.mkdtemp(prefix="perfrelay-bench-export-", dir=self.workdir)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        exp = server = receiver = None
        stats_file = os.path.join(work, "stats.json")
        conf = os.path.join(work, "export.conf")
        if target == "nats":
            server = subprocess.Popen([nats, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", work],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out = f"[NATS]\nServers=nats://127.0.0.1:{port}\n[Export]\n"
        else:
            receiver = subprocess.Popen([receiver_bin], stdout=subprocess.PIPE, text=True,
                                        preexec_fn=lambda: os.nice(-15))
            line = receiver.stdout.readline()
            if not line.strip().isdigit():
                receiver.kill()
                receiver.wait()
                shutil.rmtree(work, ignore_errors=True)
                raise BenchError(f"row {row}: bench/otlp-receiver did not start (said {line!r})")
            port = int(line)
            out = (f"[OTLP]\nEndpoint=http://127.0.0.1:{port}\n"
                   + ("Compression=gzip\n" if target == "otlp-gzip" else "") + "[Export]\nTargets=otlp\n")
        with open(conf, "w") as f:
            f.write(out + f"Socket={self.daemon.socket_path}\nTypes=bench\nStatsFile={stats_file}\nQueueEvents=200000\n")

        def stats():
            r = subprocess.run([exporter, "--config", conf, "--stats-json"], capture_output=True, text=True)
            return json.loads(r.stdout) if r.returncode == 0 else None

        def wait(fn, what, timeout=60):
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                v = fn()
                if v:
                    return v
                time.sleep(0.05)
            raise BenchError(f"row {row}: {what} did not happen within {timeout}s")

        def cpu_ns(pid):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) * 1e9 / os.sysconf("SC_CLK_TCK")

        try:
            def listening():
                with socket.socket() as c:
                    return c.connect_ex(("127.0.0.1", port)) == 0
            if server:
                wait(listening, "nats-server listening")
            self.daemon.start()
            exp = subprocess.Popen([exporter, "--config", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   preexec_fn=(lambda: os.sched_setaffinity(0, self.daemon.cpus))
                                   if self.daemon.cpus else None)
            wait(lambda: (stats() or {}).get("stream_ready"), "the exporter made its stream")
            cpu0, t0 = cpu_ns(exp.pid), time.monotonic()
            args = [self.bench, "--mode", "daemon", "--clients", "0"] + self.common_args() + [
                "--rate", str(int(rate)), "--duration", str(duration), "--pin-root", self.pin_root,
                "--socket", self.daemon.socket_path, "--daemon-pid", str(self.daemon.proc.pid)]
            r = subprocess.run(args, capture_output=True, text=True, timeout=duration + 60)
            if r.returncode != 0:
                raise BenchError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
            load = json.loads(r.stdout)
            taken = load["attempts"] - load["failures"]
            st = wait(lambda: (lambda x: x and x["offered"] + x["daemon_lost"] == taken and x["queued"] == 0
                               and x["in_flight"] == 0 and x)(stats()), "the exporter caught up", 300)
            # The stats file is written once a second: the idle moment is up to 1 s before t1.
            t1, cpu1 = time.monotonic(), cpu_ns(exp.pid)
            if st["exported"] + st["export_dropped"] != st["offered"]:
                raise BenchError(f"row {row}: exported {st['exported']} + dropped {st['export_dropped']} != offered "
                                 f"{st['offered']}")
            exp.send_signal(signal.SIGTERM)
            exp.wait(60)
            exp = None
            self.daemon.stop()
            res = {"events_per_s": st["exported"] / (t1 - t0), "exported": st["exported"],
                   "daemon_lost": st["daemon_lost"], "export_dropped": st["export_dropped"],
                   "cpu_ns_per_event": (cpu1 - cpu0) / st["exported"] if st["exported"] else None,
                   "seconds": round(t1 - t0, 2)}
            if receiver:
                receiver.send_signal(signal.SIGTERM)
                counts = json.loads(receiver.stdout.readline())
                receiver.wait(30)
                receiver = None
                if counts["records"] != st["exported"] or counts["refused"]:
                    raise BenchError(f"row {row}: the receiver unpacked {counts['records']} records "
                                     f"({counts['refused']} requests refused), the exporter counted "
                                     f"{st['exported']} acknowledged")
                per = counts["cpu_ns"] / counts["records"] if counts["records"] else None
                res.update(receiver_cpu_ns_per_record=per,
                           receiver_capacity_per_s=1e9 / per if per else None)
            return res
        finally:
            if exp and exp.poll() is None:
                exp.kill()
                exp.wait()
            self.daemon.kill()
            if server:
                server.terminate()
                server.wait(30)
            if receiver:
                receiver.kill()
                receiver.wait()
            shutil.rmtree(work, ignore_errors=True)

    def cleanup(self):
        self.daemon.cleanup()
        for name in ("events", "counters", "idle"):
            try:
                os.unlink(os.path.join(self.private_root, name))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self.private_root)
        except (FileNotFoundError, OSError):
            pass
        shutil.rmtree(self.workdir, ignore_errors=True)


def summarize(results):
    """The figures of a row: medians over its repetitions."""
    def med(key):
        vals = [r[key] for r in results if r.get(key) is not None]
        return statistics.median(vals) if vals else None
    return {
        "events_per_s": med("events_per_s"),
        "offered_per_s": med("offered_per_s"),
        "lost": med("lost"),
        "loss_fraction": statistics.median(r["lost"] / r["attempts"] if r["attempts"] else 0 for r in results),
        # What share of what the producer offered reached the consumer: at the maximum rate the
        # producer's own speed varies from run to run, this does not.
        "delivered_fraction": statistics.median(r["delivered"] / r["attempts"] if r["attempts"] else 0
                                                for r in results),
        "cpu_ns_per_event": med("cpu_ns_per_event"),
        # The subscribers' own CPU per event each of them read (perfrelayd rows; libbpf rows
        # have their consumer in cpu_ns_per_event).
        "client_cpu_ns_per_event": statistics.median(
            r["consumer_cpu_ns"] / (r["delivered"] * len(r["subscribers"]))
            for r in results) if all(r.get("subscribers") and r["delivered"] for r in results) else None,
        # The slowest subscriber's events/s: each must keep up, not only their mean.
        "min_client_events_per_s": statistics.median(
            min(c["events"] for c in r["subscribers"]) * r["events_per_s"] / r["delivered"]
            for r in results) if all(r.get("subscribers") and r["delivered"] for r in results) else None,
        "latency_p50_us": med("latency_p50_us"),
        "latency_p99_us": med("latency_p99_us"),
    }


def machine_info():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "model_name": model}, platform.release()


def plot(out_dir, series):
    """throughput.png: delivered events/s and loss against the producer's rate, one line per row
    (its sweep and its max-rate runs)."""
    data = os.path.join(out_dir, "throughput.dat")
    with open(data, "w") as f:
        for row, points in series.items():
            f.write(f'# row {row}: offered_M/s delivered_M/s loss_%\n')
            for p in sorted(points, key=lambda p: p["offered_per_s"]):
                loss = 100.0 * p["lost"] / p["attempts"] if p["attempts"] else 0.0
                f.write(f"{p['offered_per_s'] / 1e6:.6f} {p['events_per_s'] / 1e6:.6f} {loss:.4f}\n")
            f.write("\n\n")
    colors = ["#1f77b4", "#7f7f7f", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e"]
    plots = []
    for i, row in enumerate(series):
        # Double quotes: the descriptions hold apostrophes.
        title = f"({row}) {ROW_DESC[row]}".replace('"', "'")
        lc = f'lc rgb "{colors[i % len(colors)]}"'
        plots.append(f'"{data}" index {i} using 1:2 with linespoints lw 2 pt 7 {lc} title "{title}: delivered"')
        plots.append(f'"{data}" index {i} using 1:3 axes x1y2 with linespoints dt 2 pt 6 {lc} title "{title}: loss %"')
    script = f"""set terminal pngcairo size 1200,800 noenhanced
set output '{os.path.join(out_dir, 'throughput.png')}'
set title 'perfrelay benchmark: delivered events and loss vs producer rate (one producer CPU)'
set xlabel 'producer rate (M records/s)'
set ylabel 'delivered (M events/s)'
set y2label 'loss (% of records)'
set ytics nomirror
set y2tics
set y2range [0:*]
set yrange [0:*]
set logscale x 2
set key below maxcols 2 font ',9'
set grid
plot {', '.join(plots)}
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        # pngcairo is in gnuplot-nox; fall back to the plain png terminal of older builds.
        r = subprocess.run(["gnuplot"], input=script.replace("pngcairo", "png"), text=True, capture_output=True)
    if r.returncode != 0:
        raise BenchError(f"gnuplot failed: {r.stderr}")


def main():
    global ROWS
    ap = argparse.ArgumentParser(prog="bench/run",
                                 description="perfrelay benchmark: perfrelayd against libbpf's perf_buffer")
    ap.add_argument("--out", required=True, help="directory for results.json and throughput.png")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"),
                    help="build directory with daemon/perfrelayd and bench/perfrelay-bench (default build/)")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per max-rate run (default 2)")
    ap.add_argument("--sweep-duration", type=float, default=1.0, help="seconds per sweep run (default 1)")
    ap.add_argument("--repeat", type=int, default=7, help="max-rate rounds over all rows (default 7)")
    ap.add_argument("--half-repeat", type=int, default=3,
                    help="runs at half the zero-loss rate per swept row (default 3)")
    ap.add_argument("--bisect", type=int, default=3, help="bisection steps per sweep (default 3)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the row order within rounds (default 1)")
    ap.add_argument("--records-per-call", type=int, default=32, help="K (default 32)")
    ap.add_argument("--record-size", type=int, default=64, help="bytes per record (default 64)")
    ap.add_argument("--producer-cpus", default="0", help="CPU list of the load threads (default 0)")
    ap.add_argument("--consumer-cpu", type=int, default=1,
                    help="CPU of the consumer threads and of perfrelayd, -1 = any (default 1)")
    ap.add_argument("--pages", type=int, default=64, help="ring pages per CPU, libbpf and perfrelayd (default 64)")
    ap.add_argument("--rows", default=",".join(n for n, _, _ in ROWS), help="max-rate rows to run")
    ap.add_argument("--export-rows", default="x,o,g", help="exporter rows to run (default x,o,g)")
    ap.add_argument("--history-gib", type=float, default=1.0,
                    help="with row y: fill the history to this size and time a unit's last hour in it (0: no)")
    ap.add_argument("--export-repeat", type=int, default=2,
                    help="runs of rows x and o (perfrelay-export to a local nats-server, to a local OTLP receiver) at the maximum rate, and as many "
                         "at half of it (default 2; 0 = none; needs row e)")
    ap.add_argument("--sweeps", default="a,a',c", help="rows to sweep for the zero-loss rate (default a,a',c)")
    ap.add_argument("--capture-repeat", type=int, default=3,
                    help="rounds of the capture's cost: a loopback TCP stream with and without a capture (default 3; "
                         "0 = none)")
    ap.add_argument("--burst-repeat", type=int, default=1,
                    help="rounds of row k, a compile-like burst at the daemon's defaults and at smaller rings "
                         "(default 1; 0 = none)")
    ap.add_argument("--exec-repeat", type=int, default=3,
                    help="rounds of row p, a fork+exec storm: perfrelayd's CPU per exec and the process table's "
                         "memory (default 3; 0 = none)")
    ap.add_argument("--execs", type=int, default=5000, help="fork+execs per storm of row p (default 5000)")
    ap.add_argument("--host-repeat", type=int, default=3,
                    help="rounds of row h, the host's price of the open probe: an open+close loop without "
                         "perfrelayd, under do-nothing programs, and under perfrelayd (default 3; 0 = none)")
    ap.add_argument("--opens", type=int, default=200000, help="open()+close() per loop of row h (default 200000)")
    ap.add_argument("--flood-repeat", type=int, default=1,
                    help="rounds of row l, a flood: small rings overflowed by a third-party producer and failing "
                         "opens while marked execs run (default 1; 0 = none)")
    ap.add_argument("--reader-priority", type=int, default=0,
                    help="ReaderPriority= of the daemon rows (default 0: the daemon's default)")
    ap.add_argument("--reader-priority-budget", type=int, default=50,
                    help="ReaderPriorityBudget= with --reader-priority (default 50)")
    ap.add_argument("--pingpong-repeat", type=int, default=5,
                    help="rounds of the counters' cost: a ping-pong pair with counters off, then on (default 5; 0 = none)")
    args = ap.parse_args()
    # What the user typed: bench/run adds --build itself.
    user_args = [a for i, a in enumerate(sys.argv[1:])
                 if a != "--build" and not a.startswith("--build=") and (i == 0 or sys.argv[i] != "--build")]
    args.build = os.path.abspath(args.build)
    os.makedirs(args.out, exist_ok=True)

    wanted = args.rows.split(",")
    ROWS = [r for r in ROWS if r[0] in wanted]
    started = time.monotonic()
    b = Bench(args)
    try:
        counters = None
        if args.pingpong_repeat > 0:
            counters = {"description": "context switches/s of a ping-pong pair on one CPU, counters on vs off "
                                       "(docs/counters.md)"}
            for mode in ("threads", "processes"):
                pp_runs, pp_ratio = b.pingpong(args.pingpong_repeat, args.duration, mode)
                counters[mode] = {"switches_per_s_on_to_off": pp_ratio, "runs": pp_runs,
                                  "ns_per_switch_added": round(
                                      statistics.median(1e9 / r["on"] - 1e9 / r["off"] for r in pp_runs), 1)}
        capture = None
        if args.capture_repeat > 0:
            import capture_bench
            capture = capture_bench.run(args.build, args.capture_repeat, args.duration, log)
        burst = None
        if args.burst_repeat > 0:
            import burst_bench
            burst = burst_bench.run(Daemon, os.path.join(args.build, "daemon", "perfrelayd"),
                                    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), args.build,
                                    args.burst_repeat, BURST_CONFIGS, log)
        process_storm = None
        if args.exec_repeat > 0:
            import exec_bench
            process_storm = exec_bench.run(args.build, args.exec_repeat, args.execs, log)
        host_price = None
        if args.host_repeat > 0:
            import host_bench
            host_price = host_bench.run(args.build, args.host_repeat, args.opens, log)
        flood = None
        if args.flood_repeat > 0:
            import flood_bench
            flood = flood_bench.run(args.build, args.flood_repeat, log)
        max_rows, baselines = b.max_rate_rows() if ROWS else ({}, [])
        summary = {name: summarize(res) for name, res in max_rows.items()}
        # The history's reading (docs/history.md): what rows y wrote, read back.
        history_read = b.history_read() if "y" in max_rows else None

        # Rows x (NATS) and o (OTLP): as fast as the producer goes (the exporter's throughput),
        # then at half that rate, which it sustains without loss (its CPU per event, not
        # inflated by dropping).
        exports = {}
        for row, target in [(r, t) for r, t in (("x", "nats"), ("o", "otlp"), ("g", "otlp-gzip"))
                            if r in args.export_rows.split(",")]:
            runs_max, runs_half = [], []
            for i in range(2 * args.export_repeat if "e" in summary else 0):
                half = i >= args.export_repeat
                rate = statistics.median(r["events_per_s"] for r in runs_max) / 2 if half else 0
                res = b.export_row(args.duration, rate, target)
                if res is None:
                    break
                (runs_half if half else runs_max).append(res)
                log(f"row {row}, {'half rate' if half else 'max rate'}: {res['events_per_s'] / 1e3:.1f} k/s "
                    f"acknowledged, {res['cpu_ns_per_event']:.0f} CPU ns/event, {res['daemon_lost']} lost in the "
                    f"daemon's queue, {res['export_dropped']} dropped by the exporter")
            exports[row] = (runs_max, runs_half)

        sweeps = {}
        for row in [s for s in args.sweeps.split(",") if s]:
            hint = summary[row]["events_per_s"] if row in summary else 1e6
            zl, bound, points = b.sweep(row, hint)
            sweeps[row] = {"zero_loss_rate": zl, "producer_bound": bound, "points": points}
            log(f"sweep {row}: zero loss up to {zl / 1e6:.3f} M/s{' (all the producer can do)' if bound else ''}")

        # Latency where it matters: each swept row at half its own zero-loss rate, a few times
        # (one stall of a shared machine is 1% of a 2 s run); the median run counts.
        half = {}
        for row, sw in sweeps.items():
            if sw["zero_loss_rate"] > 0:
                runs = []
                for _ in range(args.half_repeat):
                    res = b.run_row(row, sw["zero_loss_rate"] / 2, args.duration)
                    runs.append(res)
                    log(f"half zero-loss rate, row {row}: p50 {res['latency_p50_us']} us, "
                        f"p99 {res['latency_p99_us']} us, lost {res['lost']}")
                half[row] = {**summarize(runs), "rate_target": sw["zero_loss_rate"] / 2,
                             "runs": [{k: r[k] for k in ("offered_per_s", "events_per_s", "lost",
                                                         "cpu_ns_per_event", "latency_p50_us",
                                                         "latency_p99_us") if k in r} for r in runs]}
    finally:
        b.cleanup()

    # Ratios pair each row with the baseline of the same round (measured seconds apart), then
    # take the median over rounds: slow drifts of a shared machine cancel out.
    configurations = {}
    for name, s in summary.items():
        s = dict(s)
        s["description"] = ROW_DESC[name]
        if name == "a":
            # The baseline's own spread: its second run of each round against its first.
            s["ratio_to_baseline"] = 1.0
            s["ratios_per_round"] = [round(b["events_per_s"] / a["events_per_s"], 3)
                                     for a, b in zip(max_rows[name][::2], max_rows[name][1::2])]
        elif baselines:
            pairs = [r["events_per_s"] / base for r, base in zip(max_rows[name], baselines) if base > 0]
            s["ratio_to_baseline"] = round(statistics.median(pairs), 3) if pairs else None
            s["ratios_per_round"] = [round(x, 3) for x in pairs]
            if all(r.get("subscribers") and r["delivered"] for r in max_rows[name]):
                mins = [min(c["events"] for c in r["subscribers"]) * r["events_per_s"] / r["delivered"] / base
                        for r, base in zip(max_rows[name], baselines) if base > 0]
                s["min_client_ratio_to_baseline"] = round(statistics.median(mins), 3) if mins else None
        else:
            s["ratio_to_baseline"] = None
        s["runs"] = [{k: r.get(k) for k in ("events_per_s", "offered_per_s", "attempts", "failures", "lost",
                                             "cpu_ns_per_event", "consumer_cpu_ns", "latency_p50_us",
                                             "latency_p99_us")}
                     for r in max_rows[name]]
        configurations[name] = s

    descriptions = {"x": "perfrelay-export: binary stream to a local nats-server -js, acknowledged",
                    "o": "perfrelay-export: OTLP/HTTP logs (protobuf) to a local receiver unpacking them, answered",
                    "g": "perfrelay-export: the same with Compression=gzip"}
    export_rows = {}
    for row, (runs_max, runs_half) in exports.items():
        if not runs_max or not runs_half:
            continue
        e = configurations["e"]
        e_client_ns = statistics.median(r["consumer_cpu_ns"] / r["delivered"] for r in max_rows["e"] if r["delivered"])
        rate = statistics.median(r["events_per_s"] for r in runs_max)
        cpu = statistics.median(r["cpu_ns_per_event"] for r in runs_half)
        export_rows[row] = {"description": descriptions[row],
                            "events_per_s": round(rate), "cpu_ns_per_event_at_half_rate": round(cpu, 1),
                            "ratio_to_e_events_per_s": round(rate / e["events_per_s"], 4),
                            "e_client_cpu_ns_per_event": round(e_client_ns, 1),
                            "ratio_to_e_client_cpu_per_event": round(cpu / e_client_ns, 2) if e_client_ns else None,
                            "receiver_capacity_per_s": statistics.median(
                                r["receiver_capacity_per_s"] for r in runs_max)
                            if all(r.get("receiver_capacity_per_s") for r in runs_max) else None,
                            "runs_max_rate": runs_max, "runs_half_rate": runs_half}
    export = export_rows.get("x")

    def t(name, value, want, ok):
        return {"target": want, "measured": value, "met": bool(ok) if value is not None else None}

    def ratio(row):
        return configurations.get(row, {}).get("ratio_to_baseline")
    zl = {row: sw["zero_loss_rate"] for row, sw in sweeps.items()}
    targets = {
        "b_ratio": t("b", ratio("b"), ">= 1.0", ratio("b") is not None and ratio("b") >= 1.0),
        "e_ratio": t("e", ratio("e"), ">= 0.8", ratio("e") is not None and ratio("e") >= 0.8),
        "c_ratio": t("c", ratio("c"), ">= 0.5", ratio("c") is not None and ratio("c") >= 0.5),
    }
    # The flight recorder's cost (docs/recorder.md): the producer's rate with it on (r) against
    # off (e), same client; and the daemon's CPU per event, which the recorder should not touch.
    recorder = None
    if "r" in configurations and "e" in configurations:
        r_, e_ = configurations["r"], configurations["e"]
        recorder = {"events_per_s_r_to_e": round(r_["events_per_s"] / e_["events_per_s"], 3),
                    "cpu_ns_per_event_r": r_.get("cpu_ns_per_event"), "cpu_ns_per_event_e": e_.get("cpu_ns_per_event")}
        log(f"recorder: producer rate on/off {recorder['events_per_s_r_to_e']}x, daemon CPU per event "
            f"{recorder['cpu_ns_per_event_r']} ns on, {recorder['cpu_ns_per_event_e']} ns off")
    # The history (docs/history.md): its cost at its defaults (b, against b0 with it off), and
    # the writer recording every record (y): its CPU, the bytes on disk, what it dropped.
    history = None
    if "y" in max_rows:
        runs = [r["daemon"]["history"] for r in max_rows["y"]]
        for h in runs:
            if h["offered"] != h["written"] + h["dropped"]:
                raise BenchError(f"row y: the history was offered {h['offered']}, wrote {h['written']} and "
                                 f"dropped {h['dropped']}")
        history = {
            "writer_cpu_ns_per_event": round(statistics.median(h["writer_cpu_ns"] / h["written"] for h in runs), 1),
            "disk_bytes_per_event": round(statistics.median(h["block_bytes"] / h["written"] for h in runs), 2),
            "frame_bytes_per_event": round(statistics.median(h["frame_bytes"] / h["written"] for h in runs), 2),
            "dropped_fraction": statistics.median(h["dropped"] / h["offered"] for h in runs),
            "runs": runs,
            "read": history_read,
        }
        history["disk_to_frame"] = round(history["disk_bytes_per_event"] / history["frame_bytes_per_event"], 3)
        targets["y_writer_cpu_ns_per_event"] = t("y", history["writer_cpu_ns_per_event"], "<= 200",
                                                 history["writer_cpu_ns_per_event"] <= 200)
        targets["y_disk_to_frame"] = t("y", history["disk_to_frame"], "<= 0.25", history["disk_to_frame"] <= 0.25)
        if history_read:
            x = history_read["scan"]["events_per_s"]
            targets["y_scan_events_per_s"] = t("y", x, ">= 5e6", x >= 5e6)
            q = history_read.get("unit_query")
            if q:
                ms = round(1000 * q["seconds_median"], 1)
                targets["y_unit_hour_query_ms"] = t("y", ms, "<= 200 (1 GiB)", ms <= 200 and q["events_found"] == 10)
        log(f"history: writer {history['writer_cpu_ns_per_event']} ns/event, "
            f"{history['disk_bytes_per_event']} bytes on disk per event of {history['frame_bytes_per_event']}, "
            f"dropped {100 * history['dropped_fraction']:.2f} %")
    if "b" in configurations and "b0" in configurations:
        on, off = configurations["b"]["cpu_ns_per_event"], configurations["b0"]["cpu_ns_per_event"]
        if on is not None and off is not None:
            targets["b_history_default_cost_ns"] = t("b", round(on - off, 1), "<= 15", on - off <= 15)
            history = dict(history or {}, default_cost_ns_per_event=round(on - off, 1))
    if counters:
        r = counters["threads"]["switches_per_s_on_to_off"]
        targets["counters_pingpong_ratio"] = t("counters", r, ">= 0.9", r >= 0.9)
    if host_price:
        a, x = host_price["ratio_all"], host_price["ratio_exec"]
        targets["h_open_loop_all"] = t("h", a, ">= 0.58", a >= 0.58)
        targets["h_open_loop_exec_only"] = t("h", x, ">= 0.95", x >= 0.95)
    if flood:
        x = flood["marked_execs_delivered_ratio"]
        targets["l_flood_execs_delivered"] = t("l", x, "== 1.0", x == 1.0)
        targets["l_flood_attributed"] = t("l", flood["all_attributed"], "true", flood["all_attributed"])
    if "o" in export_rows:
        o = export_rows["o"]
        targets["o_ratio_to_e"] = t("o", o["ratio_to_e_events_per_s"], ">= 0.25", o["ratio_to_e_events_per_s"] >= 0.25)
        targets["o_cpu_ns_per_event_at_half_rate"] = t("o", o["cpu_ns_per_event_at_half_rate"], "<= 400",
                                                       o["cpu_ns_per_event_at_half_rate"] <= 400)
    c_cpu = configurations.get("c", {}).get("cpu_ns_per_event")
    targets["c_cpu_ns_per_event"] = t("c", c_cpu, "<= 250", c_cpu is not None and c_cpu <= 250)
    if "c" in half:
        p99 = half["c"]["latency_p99_us"]
        targets["c_p99_us_at_half_zero_loss"] = t("c", p99, "<= 5000", p99 <= 5000)
    if "c" in zl and "a'" in zl and zl["a'"] > 0:
        x = round(zl["c"] / zl["a'"], 2)
        targets["c_zero_loss_vs_a_prime"] = t("c", x, ">= 3.0", x >= 3.0)

    machine, kernel = machine_info()
    result = {
        "machine": machine,
        "kernel": kernel,
        "parameters": {
            "records_per_call": args.records_per_call, "record_size": args.record_size,
            "producer_cpus": args.producer_cpus, "consumer_cpu": args.consumer_cpu,
            "daemon_cpus": str(args.consumer_cpu) if args.consumer_cpu >= 0 else "any",
            "pages_per_cpu": args.pages, "watermark": "a quarter of the ring (perfrelayd's default)",
            "duration_s": args.duration, "sweep_duration_s": args.sweep_duration, "repeat": args.repeat,
            "latency_sample_every": 64,
        },
        "configurations": configurations,
        "zero_loss": {row: {"rate": sw["zero_loss_rate"], "producer_bound": sw["producer_bound"],
                            "ratio_to_baseline": (round(sw["zero_loss_rate"] / zl["a"], 3)
                                                  if zl.get("a") else None),
                            "points": [{k: p[k] for k in ("rate_target", "offered_per_s", "events_per_s", "lost")}
                                       for p in sw["points"]]}
                      for row, sw in sweeps.items()},
        "half_zero_loss": half,
        "export": export,
        "export_otlp": export_rows.get("o"),
        "export_otlp_gzip": export_rows.get("g"),
        "recorder": recorder,
        "history": history,
        "counters": counters,
        "capture": capture,
        "burst": burst,
        "process_storm": process_storm,
        "host_price": host_price,
        "flood": flood,
        "targets": targets,
        "elapsed_s": round(time.monotonic() - started, 1),
        "command": " ".join(["bench/run"] + user_args),
    }
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    series = {name: sweeps.get(name, {}).get("points", []) + max_rows[name] for name in max_rows}
    for name, sw in sweeps.items():
        series.setdefault(name, sw["points"])
    if series:
        plot(args.out, series)

    print(f"{'row':4} {'events/s':>10} {'ratio':>6} {'min cl.':>7} {'deliv %':>7} {'lost %':>7} {'cpu ns/ev':>9} "
          f"{'cl ns/ev':>8} {'p50 us':>8} {'p99 us':>8}  config")
    for name, s in configurations.items():
        print(f"{name:4} {s['events_per_s'] / 1e6:9.2f}M {s['ratio_to_baseline'] or 0:6.2f} "
              f"{s.get('min_client_ratio_to_baseline') or 0:7.2f} "
              f"{100 * s['delivered_fraction']:7.2f} {100 * s['loss_fraction']:7.2f} {s['cpu_ns_per_event'] or 0:9.1f} "
              f"{s.get('client_cpu_ns_per_event') or 0:8.1f} {s['latency_p50_us'] or 0:8.1f} "
              f"{s['latency_p99_us'] or 0:8.1f}  {s['description']}")
    for row, sw in sweeps.items():
        print(f"zero-loss rate ({row}): {sw['zero_loss_rate'] / 1e6:.3f} M/s"
              f"{' (producer-bound)' if sw['producer_bound'] else ''}")
    for row, r in half.items():
        print(f"at half that rate ({row}): p50 {r['latency_p50_us']} us, p99 {r['latency_p99_us']} us, "
              f"{r['cpu_ns_per_event'] or 0:.1f} CPU ns/event")
    for row, ex in export_rows.items():
        print(f"{row}    {ex['events_per_s'] / 1e6:9.3f}M  {ex['ratio_to_e_events_per_s']:.4f} of (e); "
              f"{ex['cpu_ns_per_event_at_half_rate']:.0f} CPU ns/event at half that rate = "
              f"{ex['ratio_to_e_client_cpu_per_event']}x "
              f"(e)'s binary client ({ex['e_client_cpu_ns_per_event']:.0f})  {ex['description']}"
              + (f"; the receiver's capacity {ex['receiver_capacity_per_s'] / 1e6:.2f} M/s"
                 if ex.get("receiver_capacity_per_s") else ""))
    for c in burst or ():
        print(f"burst (k) at {c['pages_per_cpu']} pages per CPU, ReaderNice={c['reader_nice']}: "
              f"{c['failures']} of {c['attempts']} records lost ({100 * c['failures'] / max(c['attempts'], 1):.2f} %)")
    if capture:
        print(f"capture: a loopback TCP stream runs at {capture['tcp_stream_on_to_off']}x its rate without a capture; "
              f"{capture['daemon_cpu_ns_per_packet']} daemon CPU ns per captured packet at {capture['packet_rate']}/s")
    for mode in ("threads", "processes") if counters else ():
        c = counters[mode]
        print(f"counters: ping-pong of two {mode}: {c['switches_per_s_on_to_off']}x the context switches/s with "
              f"counters on vs off, {c['ns_per_switch_added']} ns added per switch")
    for k, v in targets.items():
        print(f"target {k}: {v['measured']} (want {v['target']}): {'met' if v['met'] else 'MISSED'}")
    print(f"{b.runs} runs in {result['elapsed_s']} s; results in {args.out}/results.json and throughput.png")


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        log(f"error: {e}")
        sys.exit(1)
