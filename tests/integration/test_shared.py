#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The shared fan-out path (docs/shared-ring.md) end to end: a client stopped for 10 s loses
exactly what the daemon counts for it and then reads on; a client that writes garbage into the
only memory it can write, and tries to map the ring writable, changes nothing for the daemon or
for the client beside it on the same ring; a client of another uid never receives an event of
another uid through a shared ring, and never shares a ring with one that sees more. Figures come
from GetStats() (perfrelayctl stats --json)."""
import json
import mmap
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from prtest import Daemon, Failure, FileMonitor, check, check_eq, daemon_binary, hold_connections, main, wait_for
from prtest.steady import PRODUCER, STEADY_TYPE, SteadyProducer

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
CTL = os.path.join(BUILDDIR, "client", "perfrelayctl")
CPU = min(os.sched_getaffinity(0))
NOBODY = 65534
ALLOWED_GID = 4242  # an AllowGroups= group that no account on the machine needs
# The smallest shared ring: 512 KiB per reader, a few thousand steady records.
CONFIG = "[Probes]\nProbes=none\n[Socket]\nSharedRingBytes=512K\n"



@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf, stats_bus):
    global BUS
    BUS = stats_bus


def producer_settled():
    """The producer's figures once the daemon read everything the kernel accepted."""
    return wait_for(lambda: (lambda q: q if q["attempts"] == q["received"] + q["failures"] else None)(BUS.producer(PRODUCER)),
                    "the daemon read everything the kernel accepted")


def shared_clients(st=None):
    st = st or BUS.stats()
    return [c for c in st["client_list"] if c.get("shared")]


def steady_events(lines):
    events = [e for e in lines if e.get("type") != "lost"]
    lost = sum(e["count"] for e in lines if e.get("type") == "lost")
    return events, lost


def test_stopped_client():
    """Stopped for 10 s while the producer laps its ring many times: it loses exactly what the
    daemon counts as dropped for it, is told so, and reads on."""
    d = Daemon(BINARY, "shared-stop", stdout=False, config=CONFIG)
    prod = mon = None
    try:
        d.start()
        prod = SteadyProducer(BUILDDIR, d.pin_path, CPU)
        mon = FileMonitor(d.socket_path, "--type", str(STEADY_TYPE))
        wait_for(lambda: len(shared_clients()) == 1, "the monitor reads a shared ring")
        prod.cmd("rate 20000")
        wait_for(lambda: BUS.producer(PRODUCER)["received"] > 20000, "records flow")
        mon.proc.send_signal(signal.SIGSTOP)
        time.sleep(10)  # the behaviour under test: a client that does not read for 10 s
        stopped_at = BUS.producer(PRODUCER)["received"]
        mon.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: BUS.producer(PRODUCER)["received"] > stopped_at + 40000, "records flow after the stop")
        prod.cmd("rate 0")
        p = producer_settled()

        def settled():
            c = shared_clients()
            return c[0] if c and c[0]["offered"] == p["received"] and c[0]["sent"] + c[0]["dropped"] == c[0]["offered"] \
                else None
        c = wait_for(settled, "the monitor read what is left", timeout=30)
        lines = mon.stop()
        mon = None
        events, lost = steady_events(lines)
        print(f"stopped client: producer {p['received']} received; client {c}; monitor {len(events)} events, "
              f"{lost} in lost notices")
        check(c["dropped"] > 100000, f"a 10 s stop at 20000/s lapped its 512 KiB ring: dropped {c['dropped']}")
        check_eq(lost, c["dropped"], "the lost notices add up to the daemon's dropped")
        check_eq(len(events), c["sent"], "every event it was sent, and only those, was read")
        check_eq(c["sent"] + c["dropped"], p["received"], "offered = sent + dropped = what the daemon received")
        first_lost = next(i for i, e in enumerate(lines) if e.get("type") == "lost")
        check(first_lost > 0 and len(lines) - first_lost > 40000 * 0.9,
              f"events before the stop and after it (lost notice at line {first_lost} of {len(lines)})")
        seqs = [e["seq"] for e in events]
        check(all(b > a for a, b in zip(seqs, seqs[1:])), "in order, none twice")
        prod.close()
        check_eq(d.stop(), 0, "clean exit")
    finally:
        if mon:
            mon.stop()
        if prod:
            prod.close()
        d.cleanup()


def test_shutdown_figures():
    """At shutdown what a member has not read stays in its mapping, never written again: it is
    sent, not dropped. A libperfrelay monitor stopped through the shutdown reads every event
    afterwards; a member that read nothing is told in its goodbye that all of them were sent."""
    d = Daemon(BINARY, "shared-shutdown", stdout=False, config=CONFIG)
    prod = mon = raw = None
    N = 1000  # within the 512 KiB ring: nothing is lapped
    try:
        d.start()
        prod = SteadyProducer(BUILDDIR, d.pin_path, CPU)
        request = ctl_request("--type", str(STEADY_TYPE))
        mon = FileMonitor(d.socket_path, "--type", str(STEADY_TYPE))
        wait_for(lambda: len(shared_clients()) == 1, "the monitor reads a shared ring")
        raw, hello, ring_fd, page_fd = raw_shared_client(d.socket_path, request)
        st = BUS.stats()
        check_eq((st["shared"]["rings"], st["shared"]["clients"]), (1, 2), "both on one ring set")
        mon.proc.send_signal(signal.SIGSTOP)
        prod.cmd(f"burst {N}")
        check_eq(producer_settled()["received"], N, "the daemon read the burst")
        wait_for(lambda: all(c["offered"] == N for c in shared_clients()), "both members were offered it")
        check_eq(d.stop(), 0, "clean exit")
        mon.proc.send_signal(signal.SIGCONT)
        mon.proc.wait(30)
        lines = mon.stop()
        mon = None
        events, lost = steady_events(lines)
        check_eq((len(events), lost), (N, 0), "the stopped monitor read every event after the shutdown")
        raw.settimeout(10)
        rest = b""
        while True:
            b = raw.recv(65536)
            if not b:
                break
            rest += b
        goodbye = [json.loads(l) for l in rest.split(b"\n") if l.strip()][-1]
        check_eq(goodbye, {"type": "goodbye", "reason": "shutdown", "offered": N, "sent": N, "dropped": 0},
                 "the goodbye of a member that read nothing: all sent (they are in its mapping)")
        os.close(ring_fd)
        os.close(page_fd)
    finally:
        if raw:
            raw.close()
        if mon:
            mon.proc.send_signal(signal.SIGCONT)
            mon.stop()
        if prod:
            prod.close()
        d.cleanup()


def raw_shared_client(socket_path, request):
    """Connects without libperfrelay and returns (socket, hello, ring fd, member page fd)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(socket_path)
    s.sendall(json.dumps(request).encode() + b"\n")
    data, fds, _, _ = socket.recv_fds(s, 4096, 4)
    hello = json.loads(data.split(b"\n", 1)[0])
    check("shared" in hello and len(fds) == 2, f"the daemon shares: {hello}, {len(fds)} descriptors")
    return s, hello, fds[0], fds[1]


def test_garbage_client():
    """A client that scribbles over its member page and tries to map the ring writable: the
    daemon and the well-behaved client on the same ring do not notice."""
    d = Daemon(BINARY, "shared-garbage", stdout=False, config=CONFIG)
    prod = mon = None
    stop = threading.Event()
    try:
        d.start()
        prod = SteadyProducer(BUILDDIR, d.pin_path, CPU)
        mon = FileMonitor(d.socket_path, "--type", str(STEADY_TYPE))
        wait_for(lambda: len(shared_clients()) == 1, "the monitor reads a shared ring")
        sock, hello, ring_fd, page_fd = raw_shared_client(
            d.socket_path, {"subscribe": {"types": [STEADY_TYPE]}, "format": "json", "shared": True})
        st = BUS.stats()
        check_eq(st["shared"]["rings"], 1, "the same subscription shares one ring set")
        check_eq(st["shared"]["clients"], 2, "two members")

        size = os.fstat(ring_fd).st_size
        try:
            mmap.mmap(ring_fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            raise Failure("the ring set could be mapped writable")
        except PermissionError:
            pass
        for what, fn in (("write", lambda: os.write(ring_fd, b"x")),
                         ("ftruncate", lambda: os.ftruncate(ring_fd, 0))):
            try:
                fn()
                raise Failure(f"{what} on the ring's descriptor succeeded")
            except OSError:
                pass
        try:
            os.ftruncate(page_fd, 0)
            raise Failure("the member page could be truncated (the daemon would fault on it)")
        except PermissionError:
            pass
        ring_view = mmap.mmap(ring_fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        page = mmap.mmap(page_fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        rng = random.Random(1)

        def scribble():
            while not stop.is_set():
                page[:] = rng.randbytes(4096)

        t = threading.Thread(target=scribble)
        t.start()
        prod.cmd("rate 20000")
        wait_for(lambda: BUS.producer(PRODUCER)["received"] > 60000, "records flow while the page is garbage", timeout=30)
        stop.set()
        t.join()
        prod.cmd("rate 0")
        p = producer_settled()
        good = wait_for(lambda: next((c for c in shared_clients() if c["pid"] == mon.proc.pid and
                                      c["sent"] == p["received"]), None),
                        "the monitor read everything", timeout=30)
        st = BUS.stats()
        bad = [c for c in st["client_list"] if c["pid"] == os.getpid()]
        for c in bad:
            check(c["sent"] + c["dropped"] <= c["offered"], f"the garbage client's figures hold: {c}")
        check_eq(len(bad) + st["shared"]["hostile"], 1, "the garbage client is listed, or was closed as hostile")
        lines = mon.stop()
        mon = None
        events, lost = steady_events(lines)
        check_eq((len(events), lost), (p["received"], 0), "the monitor beside it got every event, none lost")
        check_eq((good["offered"], good["dropped"]), (p["received"], 0), "its figures: everything offered and sent")
        page.close()
        for fd in (ring_fd, page_fd):
            os.close(fd)
        check(any(ring_view[4096:]), "the mapping holds events while the ring set lives")
        sock.close()
        wait_for(lambda: BUS.stats()["shared"]["rings"] == 0, "the ring set goes with its last member")
        # A client that keeps its mapping after it left keeps none of the daemon's pages.
        check(not any(ring_view[:]), "the ring set's memory is freed, though a former member still maps it")
        ring_view.close()
        st = BUS.stats()
        check_eq(st["clients"]["offered"], st["clients"]["delivered"] + st["clients"]["dropped"],
                 "offered = delivered + dropped over every client")
        prod.close()
        check_eq(d.stop(), 0, "clean exit")
    finally:
        stop.set()
        if mon:
            mon.stop()
        if prod:
            prod.close()
        d.cleanup()


def test_uid_scoping():
    """A client of uid nobody gets a ring of its own uid's events: the exec of a root process is
    in root's ring only, the exec of nobody's process in both. A client of uid nobody in an
    AllowGroups= group sees everything, and so shares root's ring."""
    work = tempfile.mkdtemp(prefix="perfrelay-shared-uid-")
    os.chmod(work, 0o755)
    marker = f"prsh{random.randrange(10**6):06d}"
    path = os.path.join(work, marker)
    shutil.copy("/bin/true", path)
    os.chmod(path, 0o755)
    d = Daemon(BINARY, "shared-uid", stdout=False,
               config=f"[Probes]\nProbes=exec\n[Socket]\nSharedRingBytes=512K\nAllowGroups={ALLOWED_GID}\n")
    os.chmod(d.dir, 0o711)
    mons = []
    try:
        d.start()
        os.chmod(d.socket_path, 0o666)
        root = FileMonitor(d.socket_path, "--type", "exec")
        mons.append(root)
        nobody = FileMonitor(d.socket_path, "--type", "exec", user=NOBODY)
        mons.append(nobody)
        allowed = FileMonitor(d.socket_path, "--type", "exec", user=NOBODY, extra_groups=[ALLOWED_GID])
        mons.append(allowed)
        st = wait_for(lambda: (lambda s: s if len(shared_clients(s)) == 3 else None)(BUS.stats()),
                      "the three monitors read shared rings")
        check_eq(st["shared"]["rings"], 2, "access classes never share a ring; the same class does")
        for _ in range(5):
            subprocess.run([path, "root"], check=True)
            subprocess.run([path, "nobody"], check=True, user=NOBODY)

        def seen(m, uid):
            with open(m.out.name) as f:
                return sum(1 for line in f if marker in line and f'"uid":{uid},' in line)
        wait_for(lambda: seen(root, 0) == 5 and seen(root, NOBODY) == 5 and seen(nobody, NOBODY) == 5 and
                 seen(allowed, 0) == 5 and seen(allowed, NOBODY) == 5,
                 "every exec reached the monitors that may see it", timeout=20)
        root_lines, nobody_lines = root.stop(), nobody.stop()
        allowed.stop()
        mons = []
        others = [e for e in nobody_lines if e.get("type") == "exec" and e.get("uid") != NOBODY]
        check_eq(others, [], "nobody's ring holds no event of another uid")
        check(any(e.get("uid") == 0 for e in root_lines), "root's does")
        check_eq(d.stop(), 0, "clean exit")
    finally:
        for m in mons:
            m.stop()
        d.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def ctl_request(*args):
    """The request line perfrelayctl monitor sends with ARGS, read from a listener of our own."""
    work = tempfile.mkdtemp(prefix="perfrelay-shared-req-")
    path = os.path.join(work, "s")
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lst.bind(path)
    lst.listen(1)
    p = subprocess.Popen([CTL, "monitor", "--json", "--socket", path] + list(args),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lst.settimeout(10)
        conn, _ = lst.accept()
        conn.settimeout(10)
        data = b""
        while b"\n" not in data:
            b = conn.recv(4096)
            check(b, "perfrelayctl sends a request line")
            data += b
        conn.close()
        return json.loads(data.split(b"\n", 1)[0])
    finally:
        p.kill()
        p.wait()
        lst.close()
        shutil.rmtree(work, ignore_errors=True)


# A member of the shared ring as a non-root user in an AllowGroups= group, without libperfrelay:
# it tries to reopen the ring set read-write, then keeps its read-only mapping and answers, for
# each marker on stdin, whether the mapping holds it; at EOF it reads the socket to its end.
REVOKED_MEMBER = r"""
import json, mmap, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
data, fds, _, _ = socket.recv_fds(s, 4096, 4)
hello = json.loads(data.split(b"\n", 1)[0])
try:
    os.close(os.open(f"/proc/self/fd/{fds[0]}", os.O_RDWR))
    reopen = "opened"
except PermissionError:
    reopen = "refused"
print(json.dumps({"hello": hello, "reopen": reopen, "fds": len(fds), "uid": os.getuid()}), flush=True)
view = mmap.mmap(fds[0], os.fstat(fds[0]).st_size, mmap.MAP_SHARED, mmap.PROT_READ)
for line in sys.stdin:
    print(json.dumps({"found": view.find(line.strip().encode()) >= 0}), flush=True)
s.settimeout(10)
rest = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    rest += b
print(json.dumps({"lines": [l for l in rest.decode().split("\n") if l.strip()]}), flush=True)
"""


def test_revoked_member():
    """A reload takes away the AllowGroups= access of a member of root's shared ring: it gets
    access-revoked, and the mapping it keeps holds nothing from after the reload (the ring set
    is never written again); root's libperfrelay monitor on the same ring is moved to a fresh
    one and misses nothing, gets nothing twice. The member, a non-root user, cannot reopen the
    ring set read-write."""
    gid = ALLOWED_GID
    base = "[Probes]\nProbes=exec\n[Socket]\nSharedRingBytes=512K\n"
    d = Daemon(BINARY, "shared-revoke", stdout=False, config=base + f"AllowGroups={gid}\n")
    os.chmod(d.dir, 0o711)
    tag = random.randrange(10**9)
    before, after = f"before-revoke-{tag}", f"after-revoke-{tag}"
    mon = member = None
    try:
        d.start()
        os.chmod(d.socket_path, 0o666)
        # Only the markers' execs: those of the figures' queries would keep it one behind.
        request = ctl_request("--type", "exec", "--comm", "true")
        mon = FileMonitor(d.socket_path, "--type", "exec", "--comm", "true")
        wait_for(lambda: len(shared_clients()) == 1, "root's monitor reads a shared ring")
        member = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", f"--groups={gid}", sys.executable,
                                   "-c", REVOKED_MEMBER, d.socket_path, json.dumps(request)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = json.loads(member.stdout.readline() or "{}")
        check(first, f"the member's first line: {member.stderr.read() if not first else ''}")
        check_eq((first["uid"], first["hello"].get("access"), first["fds"]), (NOBODY, "all", 2),
                 "the member, nobody in an AllowGroups= group, sees everything through a shared ring")
        check_eq(first["reopen"], "refused", "a non-root member cannot reopen the ring set read-write")
        st = BUS.stats()
        check_eq((st["shared"]["rings"], st["shared"]["clients"]), (1, 2), "it shares root's ring set")

        def mapping_holds(marker):
            member.stdin.write(marker + "\n")
            member.stdin.flush()
            return json.loads(member.stdout.readline())["found"]

        def monitor_saw(marker):
            return sum(1 for e in mon.lines() if e.get("type") == "exec" and e.get("argv", [])[1:] == [marker])

        subprocess.run(["/bin/true", before], check=True)
        wait_for(lambda: monitor_saw(before) == 1, "root's monitor gets the marker before the reload")
        wait_for(lambda: mapping_holds(before), "the member's mapping holds it", timeout=10)

        d.write_config(base)
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: BUS.stats()["shared"]["moved"] == 1, "the reload moves root's monitor to a fresh ring set")
        subprocess.run(["/bin/true", after], check=True)
        wait_for(lambda: monitor_saw(after) == 1, "root's monitor gets the marker after the reload")
        check(not mapping_holds(after), "the revoked member's mapping holds nothing from after the reload")
        member.stdin.close()
        last = json.loads(member.stdout.readline() or "{}")
        member.wait(10)
        lines = [json.loads(line) for line in last.get("lines", [])]
        check(lines and lines[-1].get("error") == "access-revoked", f"the member's last line: {lines[-1:]}")

        st = wait_for(lambda: (lambda s: s if len(shared_clients(s)) == 1 and
                               shared_clients(s)[0]["offered"] == shared_clients(s)[0]["sent"] + shared_clients(s)[0]["dropped"]
                               else None)(BUS.stats()),
                      "root's monitor, the one shared client left, has read what it was offered (across the move)")
        check_eq(st["shared"]["rings"], 1, "the old ring set went with its last member")
        check_eq(shared_clients(st)[0]["dropped"], 0, "nothing dropped in the move")
        lines = mon.stop()
        mon = None
        check_eq((sum(1 for e in lines if e.get("argv", [])[1:] == [before]),
                  sum(1 for e in lines if e.get("argv", [])[1:] == [after])), (1, 1),
                 "both markers, once each")
        check_eq([e for e in lines if e.get("type") == "lost"], [], "no loss told")
        check_eq(d.stop(), 0, "clean exit")
    finally:
        if member and member.poll() is None:
            member.kill()
            member.wait()
        if mon:
            mon.stop()
        d.cleanup()


def test_ring_bytes_charged():
    """A ring set is memory the daemon holds for the uid that made it: its bytes are charged to
    that uid (and the users' pool) while it lives, so that a user whose next ring would pass
    MaxQueueBytesPerUid= is served on the socket instead; when the set goes, so does the charge."""
    d = Daemon(BINARY, "shared-charge", stdout=False,
               config="[Probes]\nProbes=none\n[Socket]\nSharedRingBytes=512K\nClientQueueBytes=256K\n"
                      "MaxQueueBytesPerUid=2M\n")
    os.chmod(d.dir, 0o711)
    holders = []

    def hold(comm):
        h = hold_connections(d.socket_path, 1, {"subscribe": {"comm": [comm]}, "shared": True}, uid=str(NOBODY))
        holders.append(h)
        return json.loads(h.stdout.readline())[0]

    try:
        d.start()
        os.chmod(d.socket_path, 0o666)
        check("shared" in hold("prring1"), "nobody's first subscription gets a ring set")
        st = BUS.stats()
        ring = st["shared"]["bytes"]
        check(ring > 1 << 20, f"a ring set of two 512 KiB rings and its header: {ring} bytes")
        check_eq((st["users"]["queue_bytes"], st["users"]["pool_queue_bytes"]), (ring, ring),
                 "its bytes are charged to nobody, in the users' pool")
        hello = hold("prring2")
        check_eq((hello.get("type"), "shared" in hello), ("hello", False),
                 "a second ring set would pass MaxQueueBytesPerUid=: served on the socket")
        st = BUS.stats()
        check_eq((st["shared"]["rings"], st["shared"]["fallbacks"]), (1, 1), "one ring set, one fallback counted")
        socket_queue = st["users"]["queue_bytes"] - ring
        check(0 < socket_queue <= 1 << 20, f"the socket client's queue is charged beside it: {socket_queue}")
        holders[0].stdin.write("done\n")
        holders[0].stdin.close()
        holders[0].wait(30)
        wait_for(lambda: BUS.stats()["shared"]["rings"] == 0, "the ring set goes with its member")
        check_eq(BUS.stats()["users"]["queue_bytes"], socket_queue, "and its charge with it")
        check("shared" in hold("prring3"), "then nobody may make one again")
        check_eq(d.stop(), 0, "clean exit")
    finally:
        for h in holders:
            if h.poll() is None:
                h.kill()
                h.wait()
        d.cleanup()


if __name__ == "__main__":
    main(__file__)
