# SPDX-License-Identifier: LGPL-2.1-or-later
"""Row (k): what a compile-like burst loses at the daemon's defaults. perfrelayd runs its default
configuration (every probe, the flight recorder on; its own pin root and socket) with one JSON
client reading everything, while two workers compile perfrelay's own daemon sources with gcc
(-fsyntax-only: cc1 execs, thousands of header opens, forks and exits, as a parallel build
makes). The loss is the built-in producers' failures against their attempts, from the daemon's
exit statistics, for each configuration of ring size and reader nice value measured."""
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

# Built-in producers (bpf/event.h PERFRELAY_PRODUCER_*): exec, exit, fork, open, connect.
BUILTIN_PRODUCERS = (1, 2, 3, 4, 5)


def producer_totals(log_text):
    """Attempts and failures of the built-in producers from perfrelayd's exit statistics
    ("Producer N: A attempts, R received, M malformed, F failures (...)")."""
    attempts = failures = 0
    for line in log_text.splitlines():
        words = line.replace(",", "").replace(";", "").split()
        if "Producer" not in words:
            continue
        i = words.index("Producer")
        try:
            pid = int(words[i + 1].rstrip(":"))
        except (IndexError, ValueError):
            continue
        if pid in BUILTIN_PRODUCERS:
            attempts += int(words[words.index("attempts") - 1])
            failures += int(words[words.index("failures") - 1])
    return attempts, failures


WORKERS = 4  # twice the CPUs of the machine the defaults were chosen on, like make -j4 there
PASSES = 3
SCAN_OPENS = 300000


def compile_burst(src, build):
    """WORKERS workers, each compiling its share of the daemon's sources PASSES times with gcc
    -fsyntax-only (the front end: the opens and execs of a build, little of its optimizing)."""
    files = sorted(glob.glob(os.path.join(src, "daemon", "*.c"))) * PASSES
    incs = ["-I", build, "-I", os.path.join(src, "daemon"), "-I", os.path.join(src, "bpf"),
            "-I", os.path.join(src, "shared"), "-I", "/usr/include/json-c", "-D_GNU_SOURCE"]
    workers = []
    for w in range(WORKERS):
        script = "; ".join(f"gcc -fsyntax-only {' '.join(incs)} {f} 2>/dev/null" for f in files[w::WORKERS])
        workers.append(subprocess.Popen(["sh", "-c", script]))
    # And what a build's dependency scan does between them: one process looking for headers
    # along an include path, an openat() that fails after another, as fast as it can.
    scan = ("import os\nfor i in range(%d):\n    try: os.close(os.open('/usr/include/nothere-%%d.h' %% i, os.O_RDONLY))\n"
            "    except OSError: pass\n" % SCAN_OPENS)
    workers.append(subprocess.Popen([sys.executable, "-c", scan]))
    t0 = time.monotonic()
    for p in workers:
        p.wait()
    return time.monotonic() - t0


def run_one(Daemon, binary, src, build, pages, nice, log):
    work = tempfile.mkdtemp(prefix="perfrelay-bench-burst-")
    pin = f"/sys/fs/bpf/perfrelay-bench-burst-{os.getpid()}"
    d = Daemon(binary, work, pin, pages, None)
    # The defaults but for where it lives, the ring size and the readers' nice value.
    with open(d.config_path, "w") as f:
        f.write(f"[Daemon]\nPinPath={pin}\n[Ring]\nPagesPerCpu={pages}\n[Readers]\nReaderNice={nice}\n"
                f"[Socket]\nSocketPath={d.socket_path}\n[History]\nHistoryPath={work}/history\n")
    ctl = os.path.join(build, "client", "perfrelayctl")
    client = None
    try:
        d.start()
        client = subprocess.Popen([ctl, "monitor", "--json", "--socket", d.socket_path],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # the client's hello; the burst is what is measured, not its start
        seconds = compile_burst(src, build)
        client.send_signal(signal.SIGINT)
        client.wait(30)
        client = None
        d.stop()
        attempts, failures = producer_totals(d.log())
        log(f"burst at {pages} pages per CPU, ReaderNice={nice}: {failures} of {attempts} records lost "
            f"({seconds:.1f} s of compiling)")
        return {"pages_per_cpu": pages, "reader_nice": nice, "attempts": attempts, "failures": failures,
                "loss_fraction": failures / attempts if attempts else 0.0, "seconds": round(seconds, 2)}
    finally:
        if client:
            client.kill()
            client.wait()
        d.cleanup()


def run(Daemon, binary, src, build, repeat, configs, log):
    """configs: (pages, nice) pairs; each measured `repeat` times, interleaved."""
    runs = {c: [] for c in configs}
    for _ in range(repeat):
        for c in configs:
            runs[c].append(run_one(Daemon, binary, src, build, c[0], c[1], log))
    out = []
    for (pages, nice), rs in runs.items():
        out.append({"pages_per_cpu": pages, "reader_nice": nice,
                    "attempts": sum(r["attempts"] for r in rs), "failures": sum(r["failures"] for r in rs),
                    "runs": rs})
    return out
