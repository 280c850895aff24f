# SPDX-License-Identifier: LGPL-2.1-or-later
"""The capture's cost (docs/capture.md), for bench.py: a loopback TCP stream's throughput from a
cgroup with a capture attached against none (alternating rounds), and perfrelayd's CPU per
captured packet at a fixed UDP packet rate. Starts its own dbus-daemon (captures are started
over D-Bus), perfrelayd and cgroup; removes them afterwards."""
import os
import shutil
import signal
import subprocess
import sys
import time


STREAM = """
import socket, sys, threading, time
dur = float(sys.argv[1])
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]
total = [0]
def server():
    c, _ = srv.accept()
    while True:
        n = len(c.recv(1 << 20))
        if not n:
            break
        total[0] += n
t = threading.Thread(target=server); t.start()
cl = socket.create_connection(("127.0.0.1", port))
buf = b"x" * (1 << 16)
end = time.monotonic() + dur
while time.monotonic() < end:
    cl.sendall(buf)
cl.close(); t.join()
print(total[0] / dur)
"""
PACED = """
import socket, sys, time
rate, dur, dest = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
start = time.monotonic(); n = 0
while True:
    now = time.monotonic() - start
    if now >= dur:
        break
    while n < rate * now:
        s.sendto(b"p" * 64, (dest, 9)); n += 1
    time.sleep(0.001)
print(n)
"""


def cpu_ns(pid):
    """Nanoseconds on a CPU of every thread of pid (schedstat: ns, not clock ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass
    return total


def run(build, repeat, duration, log):
    from prtest import Daemon, UnitCgroup, cgroup2_mount
    from prtest.statsbus import StatsBus
    cg2 = cgroup2_mount()
    if not cg2 or not shutil.which("dbus-daemon"):
        log("capture: skipped (no cgroup2 mount or no dbus-daemon)")
        return None
    binary = os.path.join(build, "daemon", "perfrelayd")
    bus = StatsBus(binary)
    d = Daemon(binary, "bench-capture", stdout=False,
               config="[Probes]\nProbes=none\n[Counters]\nCounters=none\n[Recorder]\nRecorder=no\n"
                      "[Capture]\nCapturePacketsPerSecond=0\n")
    cg = UnitCgroup("bench-capture")
    unit = cg.name
    # The paced packets leave over a veth into a namespace of their own (10.232.9.2 there).
    netns, host, peer = f"perfrelay-bench-{os.getpid()}", f"prb{os.getpid() % 100000}h", f"prb{os.getpid() % 100000}n"
    for cmd in (["ip", "netns", "add", netns], ["ip", "link", "add", host, "type", "veth", "peer", "name", peer],
                ["ip", "link", "set", peer, "netns", netns], ["ip", "addr", "add", "10.232.9.1/24", "dev", host],
                ["ip", "link", "set", host, "up"], ["ip", "-n", netns, "addr", "add", "10.232.9.2/24", "dev", peer],
                ["ip", "-n", netns, "link", "set", peer, "up"]):
        subprocess.run(cmd, check=True)

    def in_unit(code, *args):
        r = subprocess.run([sys.executable, "-c", code, *map(str, args)], preexec_fn=cg.enter, capture_output=True,
                           text=True, timeout=duration + 60)
        return float(r.stdout.strip())

    def capture():
        p = subprocess.Popen([bus.ctl, "capture", "--unit", unit, "-w", "/dev/null"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PERFRELAY_SOCKET=d.socket_path, DBUS_SYSTEM_BUS_ADDRESS=bus.address))
        deadline = time.monotonic() + 20
        while not any(c["active"] for c in bus.stats()["capture"]["captures"]):
            if time.monotonic() > deadline:
                raise RuntimeError("the capture did not start")
            time.sleep(0.05)
        return p

    def stop(p):
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        return bus.stats()["capture"]["captures"]

    try:
        d.start()
        ratios, rounds = [], []
        for _ in range(repeat):
            off = in_unit(STREAM, duration)
            p = capture()
            on = in_unit(STREAM, duration)
            caps = stop(p)
            rounds.append({"bytes_per_s_off": round(off), "bytes_per_s_on": round(on),
                           "packets": max(caps, key=lambda c: c["id"])["captured"]})
            ratios.append(on / off)
            log(f"capture: loopback TCP stream {off / 1e9:.2f} GB/s without a capture, {on / 1e9:.2f} GB/s with one "
                f"({on / off:.3f}x)")
        # Daemon CPU per captured packet at a fixed rate (the daemon's CPU minus its idle CPU
        # over the same time, measured without a capture first).
        rate = 50000
        idle0 = cpu_ns(d.proc.pid)
        in_unit(PACED, rate, duration, "10.232.9.2")
        idle = cpu_ns(d.proc.pid) - idle0
        p = capture()
        before = cpu_ns(d.proc.pid)
        sent = in_unit(PACED, rate, duration, "10.232.9.2")
        used = cpu_ns(d.proc.pid) - before
        caps = stop(p)
        captured = max(caps, key=lambda c: c["id"])["captured"]  # this run's capture: the newest
        ns = (used - idle) / captured if captured else None
        log(f"capture: {captured} of {int(sent)} packets at {rate}/s over a veth captured, daemon CPU {ns:.0f} ns "
            f"per packet")
        ratios.sort()
        return {"description": "a capture attached to the unit (docs/capture.md)",
                "tcp_stream_on_to_off": round(ratios[len(ratios) // 2], 3), "rounds": rounds,
                "daemon_cpu_ns_per_packet": round(ns, 1) if ns else None, "packet_rate": rate,
                "packet_path": "UDP over a veth, captured at the sending unit's egress",
                "packets_captured": captured}
    finally:
        if d.proc:
            d.stop()
        d.cleanup()
        cg.remove()
        subprocess.run(["ip", "link", "delete", host], capture_output=True)
        subprocess.run(["ip", "netns", "delete", netns], capture_output=True)
        bus.close()
