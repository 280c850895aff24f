#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Packet capture (docs/capture.md): in a network namespace of its own, a server and a client in
one unit's cgroup and another pair in another unit's; `perfrelayctl capture --unit` writes
pcapng that tshark reads, with that unit's TCP handshake and payload and nothing of the other
unit; CaptureBytes=64 truncates (caplen 64, len the real length); a rate limit drops packets
and counts them exactly, in GetStats() and in the pcapng interface statistics' isb_ifdrop; a
capture ends when its requester leaves the bus; only root may capture."""
import os
import shutil
import signal
import struct
import subprocess
import sys
import uuid

import pytest

from prtest import UnitCgroup, cgroup2_mount, check, check_eq, daemon_binary, delegate_cgroup, main, skip, wait_for

BINARY = daemon_binary()

CG2 = cgroup2_mount()
if CG2 is None:
    skip("no cgroup2 mount (captures attach to a unit's cgroup)")
for tool in ("tshark", "tcpdump", "ip", "busctl"):
    if not shutil.which(tool):
        skip(f"{tool} is not installed (scripts/lib.sh installs tshark, tcpdump, iproute2 and systemd's busctl)")
NETNS = f"perfrelay-cap-{os.getpid()}"

SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
data = b""
while not data.endswith(b"\\n"):
    chunk = c.recv(65536)
    if not chunk:
        break
    data += chunk
c.sendall(b"ack:" + data[:16] + b"\\n")
c.close()
"""
CLIENT = """
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(sys.argv[2].encode() + b"\\n")
while not c.recv(65536).endswith(b"\\n"):
    pass
c.close()
"""
DATAGRAMS = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    s.sendto(b"datagram %d" % i, ("127.0.0.1", int(sys.argv[1])))
"""


class NetnsUnit(UnitCgroup):
    def popen(self, code, *args, **kw):
        """python3 -c code in this unit's cgroup and in the test's network namespace."""
        return super().popen(["ip", "netns", "exec", NETNS, sys.executable, "-c", code, *map(str, args)], **kw)


def ctl(*args, **kw):
    return subprocess.Popen([bus.ctl, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PERFRELAY_SOCKET=kw.pop("daemon").socket_path), **kw)


def captures():
    return {c["id"]: c for c in bus.stats()["capture"]["captures"]}


def active_capture():
    """The id of the capture perfrelayctl started (wait until it runs)."""
    return wait_for(lambda: next((i for i, c in captures().items() if c["active"]), None),
                    "a capture is active", timeout=20)


def converse(unit, port, payload):
    server = unit.popen(SERVER, port, stdout=subprocess.PIPE, text=True)
    check_eq(server.stdout.readline().strip(), "listening", "the server listens")
    client = unit.popen(CLIENT, port, payload)
    check_eq(client.wait(30), 0, "the client talked to the server")
    check_eq(server.wait(30), 0, "the server answered")


def stop_capture(p):
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    check_eq(p.returncode, 0, f"perfrelayctl capture exits 0 (stderr: {err.strip()})")
    return err


def tshark(path, *fields, filter_=None):
    cmd = ["tshark", "-r", path, "-T", "fields"] + [a for f in fields for a in ("-e", f)]
    if filter_:
        cmd += ["-Y", filter_]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    check_eq(r.returncode, 0, f"tshark reads {path} (stderr: {r.stderr.strip()})")
    # Booleans as 1/0: Wireshark 4.2 and later (Debian 13) print them True/False.
    return [[{"True": "1", "False": "0"}.get(v, v) for v in line.split("\t")] for line in r.stdout.splitlines()]


def pcapng_blocks(path):
    """(type, body) of every block; checks each block's two length fields agree."""
    data = open(path, "rb").read()
    off, out = 0, []
    while off < len(data):
        btype, blen = struct.unpack_from("<II", data, off)
        check(blen >= 12 and blen % 4 == 0 and off + blen <= len(data), f"block at {off}: length {blen}")
        check_eq(struct.unpack_from("<I", data, off + blen - 4)[0], blen, "trailing block length")
        out.append((btype, data[off + 8:off + blen - 4]))
        off += blen
    return out


def isb_options(body):
    """isb_ifrecv and isb_ifdrop of an Interface Statistics Block's body."""
    off, opts = 12, {}
    while off + 4 <= len(body):
        code, length = struct.unpack_from("<HH", body, off)
        if code == 0:
            break
        opts[code] = body[off + 4:off + 4 + length]
        off += 4 + ((length + 3) & ~3)
    return {k: struct.unpack("<Q", v)[0] for k, v in opts.items() if k in (4, 5)}


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, stats_bus):
    """The daemons, and a network namespace of the module's own for its conversations."""
    global bus
    bus = stats_bus
    d = make_daemon("capture", stdout=False, config="[Probes]\nProbes=none\n", start=False)
    d64 = make_daemon("capture64", stdout=False, config="[Probes]\nProbes=none\n[Capture]\nCaptureBytes=64\n",
                      start=False)
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        subprocess.run(["ip", "-n", NETNS, "link", "set", "lo", "up"], check=True)
        yield {"d": d, "d64": d64}
    finally:
        subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True)


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup["d"]


@pytest.fixture(scope="module", name="d64")
def _fixture_d64(_setup):
    return _setup["d64"]


def test_unit_capture(d):
    d.start()
    mine, other = NetnsUnit("capmine"), NetnsUnit("capother")
    out = os.path.join(d.dir, "mine.pcapng")
    marker, foreign = f"perfrelay-capture-{uuid.uuid4().hex[:12]}", f"other-unit-{uuid.uuid4().hex[:12]}"
    try:
        p = ctl("capture", "--unit", mine.name, "-w", out, daemon=d)
        cid = active_capture()
        st = captures()[cid]
        check_eq((st["unit"], st["direction"], st["bytes"]), (mine.name, "both", 128), "the capture's settings")
        converse(mine, 8080, marker)
        converse(other, 9090, foreign)
        err = stop_capture(p)
    finally:
        mine.remove()
        other.remove()
    st = captures()[cid]
    check_eq(st["active"], False, "the capture ended with perfrelayctl")
    check_eq(st["seen"], st["captured"] + st["rate_dropped"] + st["failed"], "seen = captured + dropped + failed")
    check_eq(st["rate_dropped"] + st["failed"], 0, "nothing lost at this rate")
    frames = tshark(out, "tcp.srcport", "tcp.dstport", "tcp.flags.syn", "tcp.flags.ack", "tcp.payload")
    check_eq(len(frames), st["captured"], f"every captured packet is in the file ({err.strip()})")
    ports = {int(f[0]) for f in frames} | {int(f[1]) for f in frames}
    check(8080 in ports, f"the unit's connection is there: ports {ports}")
    check(9090 not in ports, "and none of the other unit's traffic")
    syn = [f for f in frames if f[2] == "1" and f[3] == "0" and f[1] == "8080"]
    synack = [f for f in frames if f[2] == "1" and f[3] == "1" and f[0] == "8080"]
    ack = [f for f in frames if f[2] == "0" and f[3] == "1" and f[1] == "8080"]
    check(syn and synack and ack, "the TCP handshake: SYN, SYN-ACK, ACK")
    payloads = b"".join(bytes.fromhex(f[4].replace(":", "")) for f in frames if f[4])
    check(marker.encode() in payloads, "the client's payload bytes")
    check(b"ack:" + marker.encode()[:16] in payloads, "and the server's answer")
    check(foreign.encode() not in payloads, "no byte of the other unit's payload")
    blocks = pcapng_blocks(out)
    check_eq(blocks[0][0], 0x0A0D0D0A, "a section header first")
    isbs = [isb_options(b) for t, b in blocks if t == 5]
    check(isbs and isbs[0].get(5) == 0, f"the interface statistics say nothing was dropped: {isbs}")
    d.stop()


def test_unit_is_not_a_users_decoy(d):
    """A user may make cgroups in the subtree delegated to them, named like any system unit: one in
    their user manager's subtree (user@UID.service) and one below a Delegate=yes service. Without
    systemd to ask, `capture --unit` takes the root-made cgroup under system.slice, and only its
    packets; two root-made cgroups of one name are refused, the error naming both."""
    d.start()
    uid = 4243
    name = f"perfrelay-decoy-{os.getpid()}.service"
    users = f"user.slice/user-{uid}.slice"
    units = [NetnsUnit("", parent=f"{users}/user@{uid}.service/app.slice", name=name),
             NetnsUnit("", parent=f"system.slice/perfrelay-delegate-{os.getpid()}.service", name=name),
             NetnsUnit("", parent="system.slice", name=name)]
    decoy, decoy2, real = units
    delegate_cgroup(os.path.dirname(os.path.dirname(decoy.path)), uid)
    for u in (decoy, decoy2):
        delegate_cgroup(os.path.dirname(u.path), uid)
        os.chown(os.path.dirname(u.path), uid, uid)
        delegate_cgroup(u.path, uid)
    out = os.path.join(d.dir, "decoy.pcapng")
    marker, foreign = f"real-unit-{uuid.uuid4().hex[:12]}", f"decoy-unit-{uuid.uuid4().hex[:12]}"
    try:
        p = ctl("capture", "--unit", name, "-w", out, daemon=d)
        cid = active_capture()
        check_eq(captures()[cid]["cgroup"], f"/system.slice/{name}", "the capture is of the root-made cgroup")
        converse(real, 8081, marker)
        converse(decoy, 9091, foreign)
        converse(decoy2, 9092, foreign)
        err = stop_capture(p)
        frames = tshark(out, "tcp.srcport", "tcp.dstport", "tcp.payload")
        ports = {int(f[0]) for f in frames} | {int(f[1]) for f in frames}
        check(8081 in ports, f"the unit's connection is there: ports {ports} ({err.strip()})")
        check(not ports & {9091, 9092}, f"none of the decoys' traffic: ports {ports}")
        payloads = b"".join(bytes.fromhex(f[2].replace(":", "")) for f in frames if f[2])
        check(marker.encode() in payloads and foreign.encode() not in payloads, "the real unit's payload only")

        twin = NetnsUnit("", parent=f"perfrelay-twin-{os.getpid()}.slice", name=name)
        units.append(twin)
        r = subprocess.run([bus.ctl, "capture", "--unit", name, "-w", "/dev/null"], capture_output=True, text=True,
                           timeout=30, env=dict(os.environ, PERFRELAY_SOCKET=d.socket_path))
        check(r.returncode != 0 and f"/system.slice/{name}" in r.stderr and
              f"/perfrelay-twin-{os.getpid()}.slice/{name}" in r.stderr,
              f"an ambiguous unit name is refused, naming both cgroups: {r.stderr.strip()}")
    finally:
        for u in reversed(units):
            u.remove()
    d.stop()


def test_truncation(d64):
    d64.start()
    mine = NetnsUnit("captrunc")
    out = os.path.join(d64.dir, "trunc.pcapng")
    big = "x" * 1000
    try:
        p = ctl("capture", "--unit", mine.name, "-w", out, daemon=d64)
        cid = active_capture()
        check_eq(captures()[cid]["bytes"], 64, "CaptureBytes=64 is the capture's length")
        converse(mine, 8081, big)
        stop_capture(p)
    finally:
        mine.remove()
    frames = tshark(out, "frame.len", "frame.cap_len", "tcp.len")
    data = [(int(a), int(b)) for a, b, t in frames if t and int(t) >= 1000]
    check(data, f"the 1000-byte segments are there: {frames}")
    for length, caplen in data:
        check_eq(caplen, 64, "caplen 64")
        check(length >= 1040, f"len is the real length ({length})")
    check(all(int(b) <= 64 for _, b, _ in frames), "no packet above 64 bytes captured")
    d64.stop()


def test_rate_limit(d):
    d.start()
    mine = NetnsUnit("caprate")
    out = os.path.join(d.dir, "rate.pcapng")
    try:
        p = ctl("capture", "--unit", mine.name, "--rate", "10", "--direction", "egress", "-w", out, daemon=d)
        cid = active_capture()
        check_eq(captures()[cid]["packets_per_second"], 10, "--rate lowers the capture's rate")
        sender = mine.popen(DATAGRAMS, 7777, 200)
        check_eq(sender.wait(30), 0, "200 datagrams sent")
        stop_capture(p)
    finally:
        mine.remove()
    st = captures()[cid]
    check_eq(st["seen"], 200, "the capture saw each datagram once (egress)")
    check(st["rate_dropped"] > 0 and st["captured"] <= 20, f"the rate limit dropped most: {st}")
    check_eq(st["seen"], st["captured"] + st["rate_dropped"] + st["failed"], "seen = captured + dropped + failed")
    blocks = pcapng_blocks(out)
    epbs = [b for t, b in blocks if t == 6]
    check_eq(len(epbs), st["captured"], "every captured packet is in the file")
    isb = isb_options(next(b for t, b in blocks if t == 5))
    check_eq(isb.get(5), st["rate_dropped"] + st["failed"], "isb_ifdrop is exactly the capture's drops")
    check_eq(isb.get(4), st["seen"], "isb_ifrecv what it saw")
    total = bus.stats()["capture"]
    check(total["rate_dropped"] >= st["rate_dropped"], f"the totals include it: {total}")
    d.stop()


def test_stop_under_load(d):
    """A capture stopped while its program runs flat out: the final figures are read after the
    runs in flight ended (a grace period after the detach), so the file holds exactly the
    packets the capture says it captured, and what it saw is captured + dropped + failed."""
    d.start()
    mine = NetnsUnit("capload")
    out = os.path.join(d.dir, "load.pcapng")
    sender = None
    try:
        p = ctl("capture", "--unit", mine.name, "--rate", "1000", "--direction", "egress", "-w", out, daemon=d)
        cid = active_capture()
        sender = mine.popen(DATAGRAMS, 7778, 10000000)
        wait_for(lambda: captures()[cid]["rate_dropped"] >= 1000 or None, "the capture runs above its rate",
                 timeout=60)
        stop_capture(p)
        check(sender.poll() is None, "the datagrams were still flowing when the capture stopped")
    finally:
        if sender:
            sender.kill()
            sender.wait(30)
        mine.remove()
    st = captures()[cid]
    check(st["rate_dropped"] > 0, f"the program ran far above the rate: {st}")
    check_eq(st["seen"], st["captured"] + st["rate_dropped"] + st["failed"], "seen = captured + dropped + failed")
    blocks = pcapng_blocks(out)
    isb = isb_options(next(b for t, b in blocks if t == 5))
    check_eq(isb.get(5), st["rate_dropped"] + st["failed"], "isb_ifdrop: the capture's drops, none in the client")
    check_eq(len([b for t, b in blocks if t == 6]), st["captured"], "the file holds every captured packet")
    d.stop()


def test_interface_capture(d):
    """An interface's capture (tc): every packet of a veth whose other end is in the namespace,
    from its Ethernet header on, whatever unit sent it."""
    d.start()
    host, peer = f"prc{os.getpid() % 100000}h", f"prc{os.getpid() % 100000}n"
    subprocess.run(["ip", "link", "add", host, "type", "veth", "peer", "name", peer], check=True)
    out = os.path.join(d.dir, "veth.pcapng")
    marker = f"veth-datagram-{uuid.uuid4().hex[:12]}"
    try:
        subprocess.run(["ip", "link", "set", peer, "netns", NETNS], check=True)
        subprocess.run(["ip", "addr", "add", "10.231.7.1/24", "dev", host], check=True)
        subprocess.run(["ip", "link", "set", host, "up"], check=True)
        subprocess.run(["ip", "-n", NETNS, "addr", "add", "10.231.7.2/24", "dev", peer], check=True)
        subprocess.run(["ip", "-n", NETNS, "link", "set", peer, "up"], check=True)
        ifindex = int(open(f"/sys/class/net/{host}/ifindex").read())
        p = ctl("capture", "--interface", host, "-w", out, daemon=d)
        cid = active_capture()
        check_eq((captures()[cid]["ifindex"], captures()[cid]["unit"]), (ifindex, ""), "an interface's capture")
        send = subprocess.run(["ip", "netns", "exec", NETNS, sys.executable, "-c",
                               "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                               "for i in range(5): s.sendto(sys.argv[1].encode(), ('10.231.7.1', 9999))",
                               marker], timeout=30)
        check_eq(send.returncode, 0, "datagrams sent over the veth")
        stop_capture(p)
    finally:
        subprocess.run(["ip", "link", "delete", host], capture_output=True)
    st = captures()[cid]
    frames = tshark(out, "eth.type", "udp.dstport", "data.data", filter_="udp.dstport == 9999 && !icmp")
    check_eq(len(frames), 5, f"the five datagrams, as Ethernet frames ({st})")
    check(all(f[0] == "0x0800" and bytes.fromhex(f[2].replace(":", "")) == marker.encode() for f in frames),
          f"Ethernet type IPv4 and the payload: {frames[:2]}")
    check_eq(len(tshark(out, "frame.number")), st["captured"], "every captured packet is in the file")
    check_eq(st["seen"], st["captured"] + st["rate_dropped"] + st["failed"], "seen = captured + dropped + failed")
    d.stop()


def test_stdout_stream(d):
    """-w - streams pcapng: tcpdump reads it from a pipe (`perfrelayctl capture -w - | tcpdump -r -`)."""
    d.start()
    mine = NetnsUnit("capstream")
    marker = f"streamed-{uuid.uuid4().hex[:12]}"
    try:
        p = subprocess.Popen([bus.ctl, "capture", "--unit", mine.name, "-w", "-"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=dict(os.environ, PERFRELAY_SOCKET=d.socket_path))
        reader = subprocess.Popen(["tcpdump", "-r", "-", "-n", "-A"], stdin=p.stdout,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
        p.stdout.close()
        active_capture()
        converse(mine, 8082, marker)
        p.send_signal(signal.SIGINT)
        check_eq(p.wait(60), 0, "perfrelayctl capture -w - exits 0")
        out, err = reader.communicate(timeout=60)
        check_eq(reader.returncode, 0, f"tcpdump read the stream (stderr: {err.strip()})")
        check("127.0.0.1.8082" in out and "Flags [S]" in out, f"tcpdump shows the connection's SYN: {out[:300]}")
        check(marker in out, "and the payload, which came through the pipe")
    finally:
        mine.remove()
    d.stop()


def test_requester_leaves_and_access(d):
    d.start()
    mine = NetnsUnit("capgone")
    try:
        # busctl starts a capture and exits: the capture goes with it.
        r = subprocess.run(["busctl", f"--address={bus.address}", "call", "org.perfrelay1", "/org/perfrelay1",
                            "org.perfrelay1.Manager", "StartCapture", "a{sv}", "1", "unit", "s", mine.name],
                           capture_output=True, text=True, timeout=30)
        check_eq(r.returncode, 0, f"StartCapture() (stderr: {r.stderr.strip()})")
        path = r.stdout.split()[1].strip('"')
        cid = int(path.rsplit("/", 1)[1])
        wait_for(lambda: captures().get(cid, {}).get("active") is False, "the capture ends with its requester",
                 timeout=20)
        os.chmod(bus.dir, 0o755)
        os.chmod(d.dir, 0o755)  # the daemon's socket, reachable for nobody too: the daemon refuses
        os.chown(d.socket_path, -1, 65534)  # (the socket is 0660)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--groups=65534", bus.ctl, "capture",
                            "--unit", mine.name, "-w", "/dev/null"], capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus.address, PERFRELAY_SOCKET=d.socket_path))
        check(r.returncode != 0 and "ControlGroups" in r.stderr, f"nobody may not capture: {r.stderr.strip()}")
        check(not any(c["active"] for c in captures().values()), "and no capture runs")
        r = subprocess.run([bus.ctl, "capture", "--unit", "no-such-unit-here.service", "-w", "/dev/null"],
                           capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, PERFRELAY_SOCKET=d.socket_path))
        check(r.returncode != 0 and "no-such-unit-here.service" in r.stderr,
              f"an unknown unit is named in the error: {r.stderr.strip()}")
    finally:
        mine.remove()
    d.stop()


if __name__ == "__main__":
    main(__file__)
