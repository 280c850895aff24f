#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The event socket end to end (docs/protocol.md): filters per client, unit filters through a
transient cgroup, a slow client that loses only its own events (counted and reported), bad
input and connection storms that leave the daemon up with its fd count back at baseline, and a
non-root client that sees only its own events."""
import json
import os
import random
import resource
import shutil
import signal
import socket
import struct
import sys
import subprocess
import tempfile
import threading
import time

import pytest

from prtest import (cgroup2_mount, check, check_eq, daemon_binary, Failure, hold_connections, main, on_each_cpu,
                    read_line, wait_for)
from prtest.schema import validate

BINARY = daemon_binary()
# Limits the tests exercise. ClientQueueBytes is the minimum; readers get 256 pages per ring
# so that the burst of the slow-client test is never lost in the kernel.
MAX_CLIENTS = 100
MAX_CLIENTS_PER_UID = 90
TIMEOUT_MS = 200
# OnDemand=no: the fd counts below must not move with the probes the clients' types attach and
# detach (their links are fds too; test_demand.py checks that behaviour).
CONFIG = f"""[Probes]
OnDemand=no
[Ring]
PagesPerCpu=256
[Socket]
ClientQueueBytes=64K
MaxClients={MAX_CLIENTS}
MaxClientsPerUid={MAX_CLIENTS_PER_UID}
RequestTimeoutMs={TIMEOUT_MS}
MaxRequestBytes=64K
MaxJsonDepth=8
"""
NOBODY, NOGROUP = 65534, 65534

# A request that matches nothing: for connections that only need to hold a slot.
MATCH_NOTHING = {"subscribe": {"types": [65000]}}

# The marker binary: its comm ("prmk" + 6 digits) names nothing else on the machine.
MARKER_NAME = f"prmk{random.randrange(10**6):06d}"


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, workdir):
    global WORK, MARKER, FD_BASELINE
    WORK = workdir
    MARKER = os.path.join(WORK, MARKER_NAME)
    shutil.copy("/bin/true", MARKER)
    os.chmod(MARKER, 0o755)

    d = make_daemon("socket", stdout=False, start=False)
    # In a directory the daemon makes (0755). Clients that are not root need to reach the socket:
    # the parents must be searchable too.
    d.write_config(CONFIG + f"SocketPath={d.dir}/run/events.sock\n")
    os.chmod(d.dir, 0o711)
    d.start()
    # With no client connected, after one has come and gone (sd-event makes its timerfd for the
    # first request timeout and keeps it): every test must return to this.
    sockets = d.socket_fds()
    warmup = socket.socket(socket.AF_UNIX)
    warmup.connect(d.socket_path)
    warmup.sendall(b"{}\n")
    warmup.recv(4096)
    warmup.close()
    # The baseline is taken once the daemon has noticed the close and dropped the connection (a
    # socket it held before may also have gone, e.g. a transient sd_notify socket).
    wait_for(lambda: d.socket_fds() <= sockets, "the daemon closes a client that went away", timeout=10)
    FD_BASELINE = d.fd_count()
    # 1000 connections at once need as many descriptors in this process.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup


def error_of(d, request, raw=True, timeout=10):
    """Sends a request and returns the error line, checking that the daemon then closes."""
    c = d.client(request, raw=raw)
    try:
        msgs = c.wait_eof("refused connection", timeout)
        check_eq(len(msgs), 1, f"one line before the close, got {msgs}")
        check_eq(msgs[0]["type"], "error", "the line is an error line")
        validate(msgs[0])
        return msgs[0]
    finally:
        c.close()


def events_of(c, type_=None):
    return [m for m in c.messages() if m["type"] not in ("hello", "lost") and (type_ is None or m["type"] == type_)]


def is_barrier(m):
    return any(str(a).startswith("barrier-") for a in m.get("argv", [])) or "-barrier-" in m.get("path", "")


def wait_fd_baseline(d, baseline, what, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        check(d.proc.poll() is None, f"daemon still running after {what}")
        n = d.fd_count()
        if n == baseline:
            return
        if time.monotonic() > deadline:
            fds = {f: os.readlink(f"/proc/{d.proc.pid}/fd/{f}") for f in os.listdir(f"/proc/{d.proc.pid}/fd")}
            raise Failure(f"after {what}: daemon has {n} fds, baseline {baseline}: {fds}")
        time.sleep(0.02)


def test_socket_file(d):
    st = os.stat(d.socket_path)
    check_eq(oct(st.st_mode & 0o777), oct(0o660), "socket mode")
    check_eq(oct(os.stat(os.path.dirname(d.socket_path)).st_mode & 0o777), oct(0o755), "socket directory mode")
    c = d.client({})
    h = c.hello()
    validate(h)
    check_eq((h["protocol"], h["schema"], h["format"], h["access"]), (1, 3, "json", "all"), "hello fields")
    check(h["client_id"] >= 1, "client id")
    c.close()
    wait_fd_baseline(d, FD_BASELINE, "one client")


def test_two_filters(d):
    """An exec client and an open client each get exactly what matches."""
    execs = d.client({"subscribe": {"types": ["exec"], "comm": [MARKER_NAME]}})
    opens = d.client({"subscribe": {"types": ["open"], "pid": [os.getpid()]}})
    binary = d.client({"subscribe": {"types": ["exec"], "comm": [MARKER_NAME]}, "format": "binary"})
    for c in (execs, opens, binary):
        c.wait_subscribed()
    # A client that half-closes after its request keeps receiving.
    opens.sock.shutdown(socket.SHUT_WR)

    fd, open_marker = tempfile.mkstemp(prefix="perfrelay-open-marker-", dir=WORK)
    os.close(fd)
    p = subprocess.run([MARKER, "exec-marker"])
    check_eq(p.returncode, 0, "marker ran")
    os.close(os.open(open_marker, os.O_RDONLY))

    ex = execs.wait(lambda m: m["type"] == "exec", "exec of the marker")
    check_eq((ex["filename"], ex["argv"], ex["comm"]), (MARKER, [MARKER, "exec-marker"], MARKER_NAME), "exec content")
    validate(ex)
    # mkstemp opened it O_RDWR; ours is the read-only open.
    op = opens.wait(lambda m: m["type"] == "open" and m["path"] == open_marker and m["flags"] & 3 == os.O_RDONLY,
                    "open of the marker path")
    check_eq((op["pid"], op["result"] >= 0, op["uid"]), (os.getpid(), True, 0), "open content")
    validate(op)

    def barrier(cpu):
        subprocess.run([MARKER, f"barrier-{cpu}"], check=True)
        os.close(os.open(f"{open_marker}-barrier-{cpu}", os.O_RDONLY | os.O_CREAT, 0o600))
    cpus = on_each_cpu(barrier)
    for cpu in cpus:
        execs.wait(lambda m: m.get("argv") == [MARKER, f"barrier-{cpu}"], f"exec barrier on CPU {cpu}")
        opens.wait(lambda m: m.get("path") == f"{open_marker}-barrier-{cpu}", f"open barrier on CPU {cpu}")

    got_exec = [m for m in events_of(execs) if not is_barrier(m)]
    check_eq(len(got_exec), 1, f"the exec client gets exactly the marker exec: {got_exec}")
    got_open = [m for m in events_of(opens) if not is_barrier(m)]
    check(all(m["type"] == "open" and m["pid"] == os.getpid() for m in got_open),
          f"the open client gets only opens of this process: {[m for m in got_open if m['type'] != 'open'][:3]}")
    check(not any(m["type"] == "exec" for m in got_open), "no exec events for the open client")
    check(not any(m["type"] == "open" for m in got_exec), "no open events for the exec client")
    for m in got_open:
        validate(m)

    # The binary client: the hello line, then one frame holding the exec record, then one per
    # barrier exec (same filter).
    want = 1 + len(cpus)

    def split_frames(data):
        out, off = [], 0
        while len(data) - off >= 4 and len(data) - off >= 4 + struct.unpack_from("<I", data, off)[0]:
            (n,) = struct.unpack_from("<I", data, off)
            out.append(data[off + 4:off + 4 + n])
            off += 4 + n
        return out, off

    deadline = time.monotonic() + 10
    with binary.cond:
        while True:
            nl = binary.data.find(b"\n")
            data = bytes(binary.data[nl + 1:]) if nl >= 0 else b""
            records, used = split_frames(data)
            if len(records) >= want:
                break
            check(time.monotonic() < deadline and not binary.eof, f"{want} binary frames within 10s")
            binary.cond.wait(0.5)
        hello = json.loads(binary.data[:nl])
    check_eq(hello["format"], "binary", "binary hello")
    check_eq((len(records), used), (want, len(data)), "the marker's frame and one per barrier, nothing else")
    frames = struct.pack("<I", len(records[0])) + records[0]
    length = len(records[0])
    magic, version, flags, type_, size, producer, cpu, seq, ts = struct.unpack_from("<HBBHHIIQQ", frames, 4)
    check_eq((magic, version, type_, size, producer), (0x5250, 1, 1, length, 1), "exec record header")
    pid, ppid, uid, gid, cgroup_id, argc, argv_len, trunc = struct.unpack_from("<IIIIQHHB", frames, 4 + 32)
    check_eq((pid, argc, seq, cpu), (ex["pid"], 2, ex["seq"], ex["cpu"]), "exec record fields")
    comm = frames[4 + 32 + 32:4 + 32 + 32 + 16].split(b"\0")[0].decode()
    check_eq(comm, MARKER_NAME, "comm in the binary record")
    for c in (execs, opens, binary):
        c.close()
    wait_fd_baseline(d, FD_BASELINE, "two filters")


def test_unit_filter(d):
    """A unit filter matches the exec of a process the test puts into a transient cgroup."""
    cg2 = cgroup2_mount()
    check(cg2 is not None, "a cgroup2 mount (needed for unit names)")
    unit = f"perfrelay-test-{os.getpid()}.scope"
    cgdir = os.path.join(cg2, unit)
    os.mkdir(cgdir)
    by_unit = by_comm = None
    try:
        by_unit = d.client({"subscribe": {"unit": [unit]}})
        by_comm = d.client({"subscribe": {"types": ["exec"], "comm": [MARKER_NAME]}})
        by_unit.hello()
        by_comm.hello()

        def enter_cgroup():
            with open(os.path.join(cgdir, "cgroup.procs"), "w") as f:
                f.write("0")  # the writing process itself, before it execs

        inside = subprocess.Popen([MARKER, "in-cgroup"], preexec_fn=enter_cgroup)
        inside.wait()
        outside = subprocess.run([MARKER, "outside"])
        check_eq(outside.returncode, 0, "marker ran")

        ev = by_unit.wait(lambda m: m["type"] == "exec", "exec in the transient cgroup")
        check_eq((ev["pid"], ev["argv"], ev["unit"]), (inside.pid, [MARKER, "in-cgroup"], unit), "exec with its unit")
        validate(ev)
        by_comm.wait(lambda m: m["type"] == "exec" and m["argv"][1:] == ["outside"], "exec outside the cgroup")
        inside_ev = by_comm.wait(lambda m: m["type"] == "exec" and m["argv"][1:] == ["in-cgroup"], "exec inside")
        check_eq(inside_ev.get("unit"), unit, "the unit is in every JSON client's line")

        def barrier(cpu):
            subprocess.run([MARKER, f"barrier-{cpu}"], preexec_fn=enter_cgroup, check=True)
        for cpu in on_each_cpu(barrier):
            by_unit.wait(lambda m: m.get("argv") == [MARKER, f"barrier-{cpu}"], f"barrier on CPU {cpu}")
        got = [m for m in events_of(by_unit) if not is_barrier(m)]
        check_eq([m["argv"] for m in got], [[MARKER, "in-cgroup"]], "the unit client gets only the cgroup's exec")
    finally:
        for c in (by_unit, by_comm):
            if c:
                c.close()
        deadline = time.monotonic() + 10
        while True:
            try:
                os.rmdir(cgdir)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    wait_fd_baseline(d, FD_BASELINE, "unit filter")


def burst_child(path, n, go_r, end_r):
    """In a forked child: wait for "go", open path n times (paced, see below), wait for "end"."""
    os.read(go_r, 1)
    # Chunks with short pauses (about 25000 opens/s): a burst far beyond the slow client's
    # queue, but one that a Python client on a loaded 2-CPU machine keeps up with (its queue
    # and socket buffer hold some 1400 events: 50 ms of this).
    for i in range(n):
        os.close(os.open(path, os.O_RDONLY))
        if i % 100 == 99:
            time.sleep(0.004)
    on_each_cpu(lambda cpu: os.close(os.open(f"{path}-barrier-{cpu}", os.O_RDONLY | os.O_CREAT, 0o600)))
    os.read(end_r, 1)
    os._exit(0)


def test_slow_client(d):
    """A client that stops reading loses only its own events, counted and reported; another
    client gets the whole burst in per-CPU order; on_overflow=disconnect closes the client."""
    n = 20000
    fd, path = tempfile.mkstemp(prefix="perfrelay-burst-", dir=WORK)
    os.close(fd)
    go_r, go_w = os.pipe()
    end_r, end_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            burst_child(path, n, go_r, end_r)
        finally:
            os._exit(1)
    clients = []
    try:
        request = {"subscribe": {"types": ["open"], "pid": [pid]}}
        fast = d.client(request)
        slow = d.client(request, read=False)
        quitter = d.client(dict(request, on_overflow="disconnect"), read=False)
        clients = [fast, slow, quitter]
        for c in clients:
            c.wait_subscribed()
        os.write(go_w, b"x")

        # The child ends its burst with a barrier open on each CPU: once the reading client has
        # them all, it has every event of the burst it will ever get. Counted in the raw bytes
        # while the burst runs: parsing now would slow the reader.
        barriers = [json.dumps({"path": f"{path}-barrier-{cpu}"}, separators=(",", ":"))[1:-1].encode()
                    for cpu in sorted(os.sched_getaffinity(0))]
        deadline = time.monotonic() + 60
        while not all(fast.count(b) for b in barriers):
            check(time.monotonic() < deadline and not fast.eof, "the reading client gets the burst's barriers")
            time.sleep(0.1)
        got = [m for m in events_of(fast) if m["path"] == path]
        check_eq(len(got), n, "the reading client got every open of the burst")
        check(not any(m["type"] == "lost" and m["count"] for m in fast.messages()), "the reading client lost nothing")
        last = {}
        for m in got:
            check(m["seq"] > last.get(m["cpu"], -1), f"per-CPU order: seq {m['seq']} after {last.get(m['cpu'])} on CPU {m['cpu']}")
            last[m["cpu"]] = m["seq"]
        offered = len(events_of(fast))  # the same filter: what the slow client was offered

        # The slow client reads now: its queued events, then the lost count of the rest.
        slow.start()
        deadline = time.monotonic() + 30
        while True:
            msgs = slow.messages()
            received = [m for m in msgs if m["type"] == "open"]
            lost = sum(m["count"] for m in msgs if m["type"] == "lost")
            if received and len(received) + lost >= offered or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        check(lost > 0, "the slow client lost events")
        check_eq(len(received) + lost, offered, f"slow client: received {len(received)} + lost {lost} = offered")
        seqs = [m["seq"] for m in received if m["cpu"] == received[0]["cpu"]]
        check_eq(seqs, sorted(seqs), "the slow client's events stay in order")
        for m in msgs:
            if m["type"] == "lost":
                validate(m)

        # The client that asked to be disconnected was.
        quitter.start()
        msgs = quitter.wait_eof("on_overflow=disconnect client", timeout=10)
        events = [m for m in msgs if m["type"] == "open"]
        check(len(events) < n, "the disconnected client did not get the whole burst")
        check(not any(m["type"] == "lost" and m["count"] for m in msgs), "no lost line for a client that asked to be disconnected")
        errors = [m for m in msgs if m["type"] == "error"]
        check_eq([m["error"] for m in errors], ["overflow"], "an overflow error line")
        check_eq(msgs[-1]["type"], "error", "the error is the last line")
        validate(errors[0])
        # Nothing after its first loss: on every CPU it got a gapless prefix of what the
        # reading client (same filter, lost nothing) got, and then nothing more.
        for cpu in {m["cpu"] for m in events}:
            mine = [m["seq"] for m in events if m["cpu"] == cpu]
            theirs = [m["seq"] for m in events_of(fast, "open") if m["cpu"] == cpu]
            check_eq(mine, theirs[:len(mine)], f"the disconnected client's events on CPU {cpu} end at its first loss")
    finally:
        for c in clients:
            c.close()
        os.write(end_w, b"x")
        os.waitpid(pid, 0)
        for f in (go_r, go_w, end_r, end_w):
            os.close(f)
    wait_fd_baseline(d, FD_BASELINE, "slow client")


def test_hello_means_subscribed(d):
    """An event made after the client has read its hello line reaches that client: the
    subscription is in effect before the hello is written (a user starts a workload on it)."""
    fd, path = tempfile.mkstemp(prefix="perfrelay-hello-", dir=WORK)
    os.close(fd)
    request = {"subscribe": {"types": ["open"], "pid": [os.getpid()]}}
    # Other processes' opens keep the readers draining, as on a busy host: an event is then
    # read within microseconds of being made, not at the next idle flush.
    load = subprocess.Popen(["sh", "-c", f"while :; do : < {path}; done"])
    try:
        for i in range(100):
            c = d.client(request)
            try:
                c.wait_subscribed()
                os.close(os.open(path, os.O_RDONLY))
                for cpu in on_each_cpu(lambda cpu: os.close(os.open(f"{path}-barrier-{cpu}", os.O_RDONLY | os.O_CREAT, 0o600))):
                    c.wait(lambda m: m.get("path") == f"{path}-barrier-{cpu}", f"connection {i}: barrier of CPU {cpu}")
                check(any(m.get("path") == path for m in c.messages()), f"connection {i}: the open made right after its hello")
            finally:
                c.close()
    finally:
        load.kill()
        load.wait()


def test_malformed(d):
    e = error_of(d, b'{"subscribe": {"types": ["exec"}\n')
    check_eq(e["error"], "bad-request", "malformed JSON")
    e = error_of(d, b'{"subscribe": {"pid": ["1"]}}\n')
    check_eq(e["error"], "bad-request", "wrong type")
    check("subscribe.pid" in e["message"], f"the message names the field: {e['message']}")
    e = error_of(d, b'{"subscribe": {"types": ["exec"]}, "bogus": true}\n')
    check_eq(e["error"], "bad-request", "unknown key")
    e = error_of(d, b"\xff\xfe\n")
    check_eq(e["error"], "bad-request", "not UTF-8")
    # A client that connects and closes without a word does no harm.
    s = socket.socket(socket.AF_UNIX)
    s.connect(d.socket_path)
    s.close()
    wait_fd_baseline(d, FD_BASELINE, "malformed requests")


def test_too_large(d):
    c = d.client(b"", raw=True)

    def send():
        try:
            c.sock.sendall(b'{"subscribe":{"comm":["' + b"a" * (1 << 20) + b'"]}}\n')
        except OSError:
            pass  # the daemon closes before it has read everything
    t = threading.Thread(target=send, daemon=True)
    t.start()
    msgs = c.wait_eof("1 MiB request")
    t.join(10)
    check_eq([m["error"] for m in msgs], ["too-large"], "1 MiB request")
    validate(msgs[0])
    c.close()
    wait_fd_baseline(d, FD_BASELINE, "1 MiB request")


def test_timeout(d):
    start = time.monotonic()
    e = error_of(d, b'{"subscribe": {', timeout=10)
    elapsed = time.monotonic() - start
    check_eq(e["error"], "timeout", "a request that never ends")
    check(TIMEOUT_MS / 1000 * 0.9 <= elapsed < 3, f"timed out after {elapsed:.3f}s (RequestTimeoutMs={TIMEOUT_MS})")
    # Nothing at all is a timeout too.
    e = error_of(d, b"", timeout=10)
    check_eq(e["error"], "timeout", "a silent client")
    wait_fd_baseline(d, FD_BASELINE, "timeout")


def test_too_deep(d):
    e = error_of(d, b"[" * 1000 + b"]" * 1000 + b"\n")
    check_eq(e["error"], "too-deep", "deep nesting")
    e = error_of(d, b'{"subscribe":{"pid":[[[[[[[1]]]]]]]}}\n')
    check_eq(e["error"], "too-deep", "nine levels")
    wait_fd_baseline(d, FD_BASELINE, "deep nesting")


def held_paths(d):
    """What the daemon's descriptors point to now."""
    fds, out = f"/proc/{d.proc.pid}/fd", []
    for f in os.listdir(fds):
        try:
            out.append(os.readlink(f"{fds}/{f}"))
        except FileNotFoundError:
            pass  # closed while we looked
    return out


def test_fd_passed(d):
    fd, path = tempfile.mkstemp(prefix="perfrelay-passed-fd-", dir=WORK)
    c = d.client(b"", raw=True)
    socket.send_fds(c.sock, [b'{"subscribe":{}}\n'], [fd, fd])
    os.close(fd)
    msgs = c.wait_eof("passed fd")
    check_eq([m["error"] for m in msgs], ["fd-passed"], "passing file descriptors")
    c.close()
    wait_fd_baseline(d, FD_BASELINE, "passed fd")
    held = held_paths(d)
    check(path not in held, "the daemon does not hold the passed file")
    # After the request, passed fds are closed too, and the client stays subscribed: once the
    # daemon no longer holds the file, an event for this client still reaches it.
    marker = f"{path}-after"
    c = d.client({"subscribe": {"types": ["open"], "pid": [os.getpid()]}})
    c.hello()
    fd = os.open(path, os.O_RDONLY)
    socket.send_fds(c.sock, [b"ignored"], [fd])
    os.close(fd)
    deadline = time.monotonic() + 10
    while path in held_paths(d):
        check(time.monotonic() < deadline, "the daemon closes an fd passed after the request")
        time.sleep(0.01)
    os.close(os.open(marker, os.O_RDONLY | os.O_CREAT, 0o600))
    c.wait(lambda m: m.get("path") == marker, "an event after passing an fd")
    check(not c.eof, "a subscriber that passes an fd later stays connected")
    c.close()
    wait_fd_baseline(d, FD_BASELINE, "fd passed after the request")


def read_reply(s):
    buf = read_line(s)
    return json.loads(buf.split(b"\n")[0]) if buf else None


def as_nobody(*args, **kw):
    return subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_connection_storm(d):
    """1000 connections at once: MaxClientsPerUid= for root; then MaxClientsPerUid= for another
    uid, and MaxClients= for the uids other than root together (root's do not count there)."""
    os.chown(d.socket_path, -1, NOGROUP)  # lets nobody connect (the socket is 0660)
    socks = []
    helpers = []
    try:
        for _ in range(1000):
            s = socket.socket(socket.AF_UNIX)
            s.connect(d.socket_path)
            socks.append(s)
            try:
                s.sendall(json.dumps(MATCH_NOTHING).encode() + b"\n")
            except OSError:
                pass  # refused at once: the daemon closed without reading
        replies = [read_reply(s) for s in socks]
        hellos = [r for r in replies if r and r["type"] == "hello"]
        refused = [r for r in replies if r and r["type"] == "error"]
        check_eq(len(hellos), MAX_CLIENTS_PER_UID, "root's connections within MaxClientsPerUid=")
        check_eq(len(refused), 1000 - MAX_CLIENTS_PER_UID, "the rest refused")
        check(all(r["error"] == "too-many-clients" and "MaxClientsPerUid" in r["message"] for r in refused),
              f"refused with too-many-clients: {refused[0]}")
        validate(refused[0])
        check(d.proc.poll() is None, "daemon up")

        # Other uids: each within MaxClientsPerUid=, all of them within MaxClients=, whatever root holds.
        def connect_as(uid, n):
            helper = hold_connections(d.socket_path, n, MATCH_NOTHING, uid=uid, gid=NOGROUP)
            helpers.append(helper)
            line = helper.stdout.readline()
            check(line, f"uid {uid}'s helper answered: {helper.stderr.read() if not line else ''}")
            return json.loads(line)
        first = connect_as("nobody", MAX_CLIENTS_PER_UID + 5)
        check_eq([r["type"] for r in first].count("hello"), MAX_CLIENTS_PER_UID, "nobody gets its MaxClientsPerUid=")
        check(all("MaxClientsPerUid=" in r["message"] for r in first if r["type"] == "error"),
              f"the rest refused by MaxClientsPerUid=: {first[-1]}")
        check(all(r["access"] == "uid" for r in first if r["type"] == "hello"), "nobody's access is uid")
        second = connect_as("4999", 20)
        check_eq([r["type"] for r in second].count("hello"), MAX_CLIENTS - MAX_CLIENTS_PER_UID,
                 "another uid gets the slots left of MaxClients=")
        check(all("MaxClients=" in r["message"] for r in second if r["type"] == "error"),
              f"the rest refused by MaxClients=: {second[-1]}")
    finally:
        for helper in helpers:
            helper.stdin.write("done\n")
            helper.stdin.close()
            helper.wait(10)
        for s in socks:
            s.close()
    wait_fd_baseline(d, FD_BASELINE, "1000 connections")
    # And the slots are free again.
    c = d.client(MATCH_NOTHING)
    c.hello()
    c.close()
    wait_fd_baseline(d, FD_BASELINE, "a client after the storm")


def test_fd_exhaustion(d):
    """Out of file descriptors, the daemon stops accepting for a moment instead of spinning,
    and the connections that waited in the backlog are served once descriptors are free."""
    limit = subprocess.run(["prlimit", "--pid", str(d.proc.pid), "--nofile", "--raw", "--noheadings",
                            "--output=SOFT,HARD"], capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["prlimit", "--pid", str(d.proc.pid), f"--nofile={FD_BASELINE + 5}:{limit[1]}"], check=True)
    clients = []
    try:
        clients = [d.client(MATCH_NOTHING) for _ in range(10)]
        for c in clients[:5]:
            c.wait_subscribed()
        # The daemon tried to accept the sixth and ran out of descriptors: it says so once.
        deadline = time.monotonic() + 10
        while "Failed to accept a connection" not in d.stderr():
            check(time.monotonic() < deadline, "the accept failure is logged")
            time.sleep(0.01)
        check_eq(sum(1 for c in clients[5:] if c.data), 0, "no answer while the daemon has no descriptor left")
        check(d.proc.poll() is None, "daemon up")
        for c in clients[:3]:
            c.close()
        for c in clients[5:8]:
            c.wait_subscribed()  # accepting resumed once descriptors were free
        subprocess.run(["prlimit", "--pid", str(d.proc.pid), f"--nofile={limit[0]}:{limit[1]}"], check=True)
        for c in clients[8:]:
            c.wait_subscribed()
        check("Failed to accept a connection" in d.stderr(), "the failure is logged")
        check_eq(d.stderr().count("Failed to accept a connection"), 1, "once, not on every retry")
    finally:
        subprocess.run(["prlimit", "--pid", str(d.proc.pid), f"--nofile={limit[0]}:{limit[1]}"])
        for c in clients:
            c.close()
    wait_fd_baseline(d, FD_BASELINE, "fd exhaustion")


NOBODY_MONITOR = r"""
import json, socket, subprocess, sys, time
path, marker = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.connect(path)
s.sendall(b'{"subscribe":{"types":["exec"]}}\n')
f = s.makefile("rb")
print(f.readline().decode().strip(), flush=True)   # hello
sys.stdin.readline()                                # root has run its marker
subprocess.run(["/bin/true", marker])
events = []
deadline = time.monotonic() + 10
s.settimeout(0.5)
seen_at = None
while time.monotonic() < deadline and (seen_at is None or time.monotonic() < seen_at + 0.5):
    try:
        line = f.readline()
    except socket.timeout:
        continue
    if not line:
        break
    ev = json.loads(line)
    events.append(ev)
    if ev.get("argv", [None])[1:] == [marker]:
        seen_at = time.monotonic()
print(json.dumps(events), flush=True)
"""


NOBODY_LINES = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"subscribe":{"types":["exec"]}}\n')
for line in s.makefile("rb"):
    sys.stdout.write(line.decode())
    sys.stdout.flush()
"""


def test_non_root(d):
    """A client running as nobody sees its own exec and not root's."""
    os.chown(d.socket_path, -1, NOGROUP)
    tag = random.randrange(10**9)
    mine, roots = f"nobody-marker-{tag}", f"root-marker-{tag}"
    root_client = d.client({"subscribe": {"types": ["exec"]}})
    root_client.hello()
    helper = as_nobody("-c", NOBODY_MONITOR, d.socket_path, mine)
    try:
        hello = json.loads(helper.stdout.readline() or "{}")
        check_eq((hello.get("type"), hello.get("access")), ("hello", "uid"), f"nobody's hello: {helper.stderr.read() if not hello else hello}")
        subprocess.run(["/bin/true", roots])
        # Once root's client has it, every client's filter has seen it.
        root_client.wait(lambda m: m["type"] == "exec" and m["argv"][1:] == [roots], "root's marker exec")
        helper.stdin.write("go\n")
        helper.stdin.flush()
        out = helper.stdout.readline()
        helper.wait(20)
        check(out, f"nobody's helper printed its events: {helper.stderr.read()}")
        events = json.loads(out)
        check(any(e["argv"][1:] == [mine] for e in events), f"nobody sees its own exec ({len(events)} events)")
        check(not any(e["argv"][1:] == [roots] for e in events), "nobody does not see root's exec")
        check(all(e["uid"] == NOBODY for e in events), f"nobody sees only its uid: {[e['uid'] for e in events]}")
        root_client.wait(lambda m: m["type"] == "exec" and m["argv"][1:] == [mine], "root sees nobody's exec")
    finally:
        if helper.poll() is None:
            helper.kill()
        helper.wait()
        root_client.close()
    wait_fd_baseline(d, FD_BASELINE, "non-root client")


def test_allow_groups_revoked(d):
    """A reload that takes a group out of AllowGroups= disconnects the clients that saw every
    event through it (access-revoked, nothing from after the reload); a client that only saw
    its own events keeps its connection (docs/protocol.md, Access)."""
    gid = 4242 + random.randrange(1000)  # a gid no account on the machine uses for this
    base = CONFIG + f"SocketPath={d.dir}/run/events.sock\n"
    os.chown(d.socket_path, -1, NOGROUP)
    tag = random.randrange(10**9)
    before, after = f"before-revoke-{tag}", f"after-revoke-{tag}"
    helpers = []
    root_client = None

    def helper(groups):
        p = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", groups, sys.executable, "-c", NOBODY_LINES,
                              d.socket_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        helpers.append(p)
        hello = json.loads(p.stdout.readline() or "{}")
        check_eq(hello.get("type"), "hello", f"nobody's hello: {hello or p.stderr.read()}")
        return p, hello["access"]

    def wait_access(groups, want):
        deadline = time.monotonic() + 10
        while True:
            p, access = helper(groups)
            p.kill()
            p.wait()
            if access == want:
                return
            check(time.monotonic() < deadline, f"a new client in group {gid} gets access {want!r} after the reload")
            time.sleep(0.05)

    try:
        d.write_config(base + f"AllowGroups={gid}\n")
        d.proc.send_signal(signal.SIGHUP)
        wait_access(f"--groups={gid}", "all")
        wide, access = helper(f"--groups={gid}")
        check_eq(access, "all", "a member of AllowGroups= sees every event")
        narrow, access = helper("--clear-groups")
        check_eq(access, "uid", "nobody without the group sees its own events")
        root_client = d.client({"subscribe": {"types": ["exec"]}})
        root_client.hello()
        subprocess.run(["/bin/true", before])
        root_client.wait(lambda m: m["type"] == "exec" and m["argv"][1:] == [before], "root's marker before the reload")
        got = []
        while not any(m.get("argv", [None])[1:] == [before] for m in got):
            line = wide.stdout.readline()
            check(line, "the wide client gets root's exec before the reload")
            got.append(json.loads(line))

        d.write_config(base)
        d.proc.send_signal(signal.SIGHUP)
        wait_access(f"--groups={gid}", "uid")  # the reload has been applied
        subprocess.run(["/bin/true", after])
        subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/bin/true", after])
        root_client.wait(lambda m: m["type"] == "exec" and m["argv"][1:] == [after] and m["uid"] == NOBODY,
                         "both markers after the reload")
        rest = [json.loads(l) for l in wide.stdout.read().splitlines()]  # to its end
        wide.wait(10)
        check(rest, "the wide client gets an error line")
        check_eq(rest[-1].get("type"), "error", "the wide client's last line")
        check_eq(rest[-1].get("error"), "access-revoked", "the wide client's error")
        validate(rest[-1])
        check(not any(m.get("argv", [None])[1:] == [after] for m in rest), "nothing from after the reload")
        # The client that only saw its own events is still there and gets nobody's marker.
        while True:
            line = narrow.stdout.readline()
            check(line, "the uid-only client stays connected")
            m = json.loads(line)
            if m.get("argv", [None])[1:] == [after]:
                check_eq(m["uid"], NOBODY, "the uid-only client gets its own exec")
                break
            check_eq(m.get("uid"), NOBODY, "the uid-only client sees only its own uid")
    finally:
        if root_client:
            root_client.close()
        for p in helpers:
            if p.poll() is None:
                p.kill()
            p.wait()
        d.write_config(base)
        d.proc.send_signal(signal.SIGHUP)
    wait_fd_baseline(d, FD_BASELINE, "revoked clients")


def test_goodbye(d):
    c = d.client({"subscribe": {"types": ["exec"], "comm": [MARKER_NAME]}})
    c.hello()
    b = d.client({"format": "binary", "subscribe": {"types": [65000]}})
    b.wait_subscribed()
    for i in range(3):
        check_eq(subprocess.run([MARKER, f"goodbye-{i}"]).returncode, 0, "marker ran")
        c.wait(lambda m, i=i: m["type"] == "exec" and m["argv"][1:] == [f"goodbye-{i}"], f"exec {i}")
    rc = d.stop()
    check_eq(rc, 0, "exit status after SIGTERM")
    msgs = c.wait_eof("goodbye")
    events = [m for m in msgs if m["type"] == "exec"]
    check_eq(msgs[-1], {"type": "goodbye", "reason": "shutdown", "offered": len(events), "sent": len(events),
                        "dropped": 0}, "the last line: the client's final figures")
    validate(msgs[-1])
    with b.cond:
        while not b.eof:
            b.cond.wait(5)
        check(b.data.endswith(b"\n") and b.data.count(b"\n") == 1, "a binary client gets its hello and EOF")
    check(not os.path.exists(d.socket_path), "the socket file is removed at exit")
    check("Socket clients:" in d.stderr(), "the exit statistics count socket clients")
    c.close()
    b.close()


if __name__ == "__main__":
    main(__file__)
