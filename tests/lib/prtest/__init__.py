# SPDX-License-Identifier: LGPL-2.1-or-later
"""Shared harness for perfrelay's integration tests: a daemon per test with its own pin root,
config and stdout channel, readiness via sd_notify, and cleanup that leaves no pins behind."""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
BPFFS = "/sys/fs/bpf"

# Set by tests/conftest.py: the tests run under pytest, against this daemon binary.
_pytest = False
_binary = None


def use_pytest(binary):
    global _pytest, _binary
    _pytest = True
    _binary = binary


def daemon_binary():
    """The perfrelayd under test: pytest's --perfrelayd (or the build tree's); run as a script
    (`python3 test_X.py PERFRELAYD`, main()), its first argument."""
    if _binary is None and not _pytest and len(sys.argv) > 1:
        return os.path.abspath(sys.argv[1])
    if _binary is None:
        raise Failure("no daemon binary: run the tests with pytest (tests/pytest.ini)")
    return _binary


def build_root():
    """The build tree of the daemon under test."""
    return os.path.dirname(os.path.dirname(daemon_binary()))


def source_root():
    """The source tree (this package is tests/lib/prtest/, three below it)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def skip(reason):
    """This test (or, outside a test, the module) cannot run here: a skip, with its reason. Only
    for what the machine lacks; a failure is never reported as one."""
    if _pytest:
        import pytest

        pytest.skip(reason, allow_module_level=True)
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


def main(path):
    """`python3 test_X.py PERFRELAYD [pytest args]` (the kernels suite's guest runs them so): the
    file under pytest, with meson's exit statuses (77: nothing but skips)."""
    import pytest

    sys.exit(pytest.main([path, f"--perfrelayd={sys.argv[1]}", *sys.argv[2:]]))


def require_root_and_bpf():
    if os.geteuid() != 0:
        skip("needs root (BPF, perf_event_open, bpffs)")
    for fs, where in (("bpf", BPFFS), ("tracefs", "/sys/kernel/tracing")):
        if not os.path.ismount(where):
            r = subprocess.run(["mount", "-t", fs, fs, where], capture_output=True)
            if r.returncode != 0:
                skip(f"{fs} is not mounted at {where} and cannot be mounted: {r.stderr.decode().strip()}")
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        skip("kernel without BTF")


def possible_cpus():
    with open("/sys/devices/system/cpu/possible") as f:
        return max(int(p.split("-")[-1]) for p in f.read().strip().split(",")) + 1


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def check_eq(got, want, what):
    if got != want:
        raise Failure(f"{what}: got {got!r}, want {want!r}")


_daemons = []  # every Daemon of the test file, stopped after a failed test (tests/conftest.py)


class Daemon:
    """perfrelayd --stdout under test. Events are collected by a thread so the pipe never fills."""

    def __init__(self, binary, tag, config="", pin_path=None, stdout=True, extra_args=()):
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix=f"perfrelay-{tag}-")
        self.pin_path = pin_path or f"{BPFFS}/perfrelay-test-{tag}-{os.getpid()}"
        self.config_path = os.path.join(self.dir, "perfrelay.conf")
        self.write_config(config)
        self.stdout = stdout
        self.extra_args = list(extra_args)
        self.proc = None
        self.events = []
        self.cond = threading.Condition()
        self.stderr_lines = []
        self.bad_lines = []  # stdout lines that were not valid JSON: always a bug
        self.started = []    # every daemon process this object started
        _daemons.append(self)

    def write_config(self, config):
        # Every daemon listens in its own directory unless the test names a socket (a later
        # SocketPath= wins), so that tests never touch /run/perfrelay. [Daemon] comes last so
        # that a config of bare keys still lands there.
        self.socket_path = os.path.join(self.dir, "events.sock")
        for line in config.splitlines():
            if line.strip().startswith("SocketPath="):
                self.socket_path = line.split("=", 1)[1].strip()
        with open(self.config_path, "w") as f:
            # The history in the test's directory too: never /var/lib/perfrelay.
            f.write(f"[Socket]\nSocketPath={self.dir}/events.sock\n[History]\nHistoryPath={self.dir}/history\n"
                    f"[Daemon]\nPinPath={self.pin_path}\n{config}\n")

    def command(self):
        """The daemon's command line as start() runs it: the same consumers (--stdout wants every
        type), so the same probes attached."""
        return [self.binary, "--config", self.config_path] + (["--stdout"] if self.stdout else []) + self.extra_args

    def start(self, timeout=30):
        # A test that failed with its daemon running must not leave it orphaned: the next
        # start says so instead of losing track of it (cleanup() kills every one started).
        if self.proc is not None and self.proc.poll() is None:
            raise Failure(f"a daemon (pid {self.proc.pid}) is still running from an earlier step")
        with self.cond:
            self.events = []
        self.stderr_lines = []
        notify_path = os.path.join(self.dir, "notify.sock")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        notify.settimeout(timeout)
        env = dict(os.environ, NOTIFY_SOCKET=notify_path)
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.started.append(self.proc)
        self.threads = [threading.Thread(target=self._read_stdout, args=(self.proc,), daemon=True),
                        threading.Thread(target=self._read_stderr, args=(self.proc,), daemon=True)]
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + timeout
        try:
            while True:
                msg = notify.recv(4096).decode()
                if "READY=1" in msg.split("\n"):
                    break
                if time.monotonic() > deadline:
                    raise Failure("daemon did not send READY=1")
        except socket.timeout:
            self.proc.kill()
            self.proc.wait()
            self.threads[1].join(5)
            raise Failure("daemon did not send READY=1 within %ss; stderr:\n%s" % (timeout, self.stderr()))
        finally:
            notify.close()
        return self

    def _read_stdout(self, proc):
        for line in proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError as e:
                self.bad_lines.append(f"{e}: {line[:300]!r}")
                continue
            with self.cond:
                self.events.append(ev)
                self.cond.notify_all()

    def _read_stderr(self, proc):
        for line in proc.stderr:
            self.stderr_lines.append(line.decode(errors="replace").rstrip("\n"))
            sys.stderr.write("  daemon: " + self.stderr_lines[-1] + "\n")

    def stderr(self):
        return "\n".join(self.stderr_lines)

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def socket_fds(self):
        """The sockets the daemon holds now (their "socket:[inode]" names)."""
        fds = f"/proc/{self.proc.pid}/fd"
        links = set()
        for f in os.listdir(fds):
            try:
                links.add(os.readlink(f"{fds}/{f}"))
            except FileNotFoundError:
                pass  # closed while we looked
        return {l for l in links if l.startswith("socket:")}

    def wait_event(self, pred, what, timeout=10):
        """Waits for an event matching pred; the daemon's flush interval bounds the latency."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for ev in self.events:
                    if pred(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Failure(f"no event for {what} within {timeout}s ({len(self.events)} events seen)")
                self.cond.wait(left)

    def wait_events(self, pred, count, what, timeout=20):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = [ev for ev in self.events if pred(ev)]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Failure(f"{what}: {len(got)} of {count} events within {timeout}s")
                self.cond.wait(left)

    def client(self, request, hello=False, **kw):
        """A subscriber on this daemon's socket (SocketClient; its hello line read if `hello`)."""
        c = SocketClient(self.socket_path, request, **kw)
        if hello:
            c.hello()
        return c

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc is None:
            return None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            raise Failure(f"daemon did not exit within {timeout}s of signal {sig}")
        for t in self.threads:
            t.join(10)  # EOF on both pipes: every line the daemon wrote has been collected
        self.proc = None
        return rc

    def cleanup(self):
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.proc = None
        subprocess.run([self.binary, "--config", self.config_path, "--cleanup"], capture_output=True)
        leftover = os.path.exists(self.pin_path)
        subprocess.run(["rm", "-rf", self.dir])
        if leftover:
            subprocess.run(["rm", "-rf", self.pin_path])
            raise Failure(f"--cleanup left {self.pin_path} behind")


class Collected:
    """Messages a reader thread of the object collects: self.msgs, appended under self.cond,
    and self.eof once its source ended. Call _collect_init() before starting the thread."""

    def _collect_init(self):
        self.msgs = []
        self.cond = threading.Condition()
        self.eof = False

    def _detail(self):
        return f"eof={self.eof}"

    def wait(self, pred, what, timeout=10):
        """The first message that pred accepts, waiting up to `timeout` s for it."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for m in self.msgs:
                    if pred(m):
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or self.eof:
                    raise Failure(f"{what}: not received within {timeout}s ({self._detail()})")
                self.cond.wait(left)


class SocketClient:
    """A subscriber on the event socket at `path`: sends `request` (a dict, or the raw bytes
    when raw=True, nothing when empty), then a thread collects what comes back (at once unless
    read=False: start() begins reading, so that the client's queue can fill meanwhile) as fast as
    it comes; lines are parsed when asked for. The socket_client fixture closes it after the
    test."""

    def __init__(self, path, request, read=True, raw=False, rcvbuf=None, discard=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if rcvbuf:
            # A small receive buffer: the daemon's queue for this client fills sooner.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect(path)
        if not raw:
            request = json.dumps(request).encode() + b"\n"
        if request:
            self.sock.sendall(request)
        self.data = bytearray()
        self.eof = False
        self.cond = threading.Condition()
        self.thread = None
        self.parsed = 0
        self.msgs = []
        self.returned = 0  # events() handed out so far
        # discard: a busy reader that keeps nothing after the first line (its hello): for
        # load, wait_subscribed() only.
        self.discard = discard
        if read:
            self.start()

    def start(self):
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                chunk = b""
            with self.cond:
                if not chunk:
                    self.eof = True
                    self.cond.notify_all()
                    return
                if not (self.discard and b"\n" in self.data):
                    self.data += chunk
                self.cond.notify_all()

    def _parse(self):
        # Only the complete lines are taken under the lock; parsing them outside it keeps the
        # reading thread from waiting on us.
        with self.cond:
            end = self.data.rfind(b"\n") + 1
            if end <= self.parsed:
                return
            text = bytes(self.data[self.parsed:end])
            self.parsed = end
        self.msgs += [json.loads(line) for line in text.split(b"\n")[:-1]]

    def messages(self):
        self._parse()
        return list(self.msgs)

    def binary_notices(self):
        """A binary client's notices (docs/protocol.md, "Lost"): the JSON behind the count of each
        PERFRELAY_TYPE_LOST record that carries one, in order."""
        with self.cond:
            data = bytes(self.data)
        pos, out = data.find(b"\n") + 1, []
        while pos > 0 and len(data) - pos >= 4:
            (n,) = struct.unpack_from("<I", data, pos)
            if len(data) - pos - 4 < n:
                break
            rec = data[pos + 4:pos + 4 + n]
            (rtype,) = struct.unpack_from("<H", rec, 4)
            if rtype == 0x7fff and n > 40:
                out.append(json.loads(rec[40:]))
            pos += 4 + n
        return out

    def count(self, needle):
        with self.cond:
            return self.data.count(needle)

    def wait(self, pred, what, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            self._parse()
            got = [m for m in self.msgs if pred(m)]
            if got:
                return got[0]
            with self.cond:
                left = deadline - time.monotonic()
                if left <= 0 or (self.eof and self.parsed == len(self.data)):
                    raise Failure(f"{what}: not received within {timeout}s ({len(self.msgs)} messages, eof={self.eof})")
                self.cond.wait(min(left, 0.2))

    def wait_eof(self, what, timeout=10):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not self.eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Failure(f"{what}: connection not closed within {timeout}s")
                self.cond.wait(left)
        self._parse()
        check_eq(self.parsed, len(self.data), f"{what}: no partial line before EOF")
        return list(self.msgs)

    def wait_subscribed(self, timeout=10):
        """Returns once the hello line has arrived, without consuming anything."""
        if self.thread is None:
            self.sock.settimeout(timeout)
            check(self.sock.recv(1, socket.MSG_PEEK) == b"{", "a hello line")
            self.sock.settimeout(None)
            return
        with self.cond:
            while b"\n" not in self.data:
                check(self.cond.wait(timeout), "a hello line in time")

    def hello(self, timeout=10):
        """The hello line, waited for; a Failure if the daemon answered otherwise. A client that
        does not read yet (read=False) reads up to it here, and nothing is read after that."""
        if self.thread is None:
            self.sock.settimeout(timeout)
            while b"\n" not in self.data:
                chunk = self.sock.recv(4096)
                if not chunk:
                    raise Failure("the connection closed before a hello line")
                self.data += chunk
            self.sock.settimeout(None)
        h = self.wait(lambda m: True, "hello line", timeout)
        check_eq(self.msgs[0]["type"], "hello", f"first line is the hello line ({self.msgs[0]})")
        return h

    def events(self, n, timeout=20):
        """The next n events (neither the hello line nor lost notices), in order."""
        got = []

        def enough():
            got[:] = [m for m in self.messages() if m["type"] not in ("hello", "lost")]
            return len(got) >= self.returned + n

        wait_for(enough, f"{n} events (eof={self.eof})", timeout)
        out = got[self.returned:self.returned + n]
        self.returned += n
        return out

    def close(self):
        # shutdown() first: close() alone leaves the connection open while the reading thread
        # is inside recv().
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self.thread:
            self.thread.join(5)


def read_line(sock, timeout=None):
    """Reads from a socket up to and including the first newline (or EOF); returns the bytes."""
    sock.settimeout(timeout)
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf


HOLD_CONNECTIONS = r"""
import json, socket, sys
path, n, request = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode() + b"\n"
socks, replies = [], []
for i in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    socks.append(s)
    try:
        s.sendall(request)
    except OSError:
        pass  # refused at once
for s in socks:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(1)
        if not chunk:
            break
        buf += chunk
    replies.append(json.loads(buf) if buf else None)
print(json.dumps(replies), flush=True)
sys.stdin.readline()
"""


def hold_connections(socket_path, n, request, uid="nobody", gid="nogroup", groups=None):
    """n connections from uid (a name or a number: the socket needs no account) that each send
    `request` (a dict) and read their first line (hello or error) and nothing after: their
    queues fill. The first line of the returned process's stdout is the list of those replies;
    the connections close when its stdin gets a line."""
    groups = f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"
    return subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={gid}", groups, sys.executable, "-c",
                             HOLD_CONNECTIONS, socket_path, str(n), json.dumps(request)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def cgroup2_mount():
    """Where the cgroup2 hierarchy is mounted (unit names come from its paths), or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "cgroup2" and fields[3] == "/":
                return fields[4]
    return None


# Moves itself into a cgroup once everything it needs is open, makes exactly n openat() calls
# there, and moves back out: the cgroup's opens are those n, no more.
_OPENER = r"""
import os, sys
inside, outside, path, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
out = os.open(outside, os.O_WRONLY)
into = os.open(inside, os.O_WRONLY)
os.write(into, b"0")
for _ in range(n):
    os.close(os.open(path, os.O_RDONLY))
os.write(out, b"0")
"""


def opens_in_cgroup(cgroup_path, path, n):
    """Exactly n openat() calls of `path` made inside the cgroup directory `cgroup_path` (by a
    child that joins it for them and leaves it afterwards)."""
    with open("/proc/self/cgroup") as f:
        rel = [line.strip().split("::", 1)[1] for line in f if line.startswith("0::")][0]
    outside = os.path.join(cgroup2_mount(), rel.lstrip("/"), "cgroup.procs")
    subprocess.run([sys.executable, "-c", _OPENER, os.path.join(cgroup_path, "cgroup.procs"), outside, path, str(n)],
                   check=True, timeout=120)


def delegate_cgroup(path, uid):
    """What systemd does for Delegate=yes (and for a user's manager): the cgroup and the files that
    control its subtree belong to the user, who may then make cgroups below it."""
    for p in (path, *(os.path.join(path, f) for f in ("cgroup.procs", "cgroup.subtree_control", "cgroup.threads"))):
        os.chown(p, uid, uid)


# A Python program that fails openat() as fast as a Python loop can, until killed: a flood of
# open records (tests/integration/test_flood.py, bench/flood_bench.py).
OPEN_FLOOD = r"""
import os
while True:
    try:
        os.open("/nonexistent/perfrelay-flood", os.O_RDONLY)
    except FileNotFoundError:
        pass
"""


class UnitCgroup:
    """A cgroup named like a service so that it resolves to a unit (perfrelay-TAG-PID.service, or
    `name`), directly under the cgroup2 root or below `parent` (a relative path whose missing
    directories it makes and removes), for processes the test starts in it."""

    def __init__(self, tag, parent="", name=None):
        root = cgroup2_mount()
        if root is None:
            raise Failure("no cgroup2 mount")
        self.name = name or f"perfrelay-{tag}-{os.getpid()}.service"
        self.made = []
        where = root
        for part in filter(None, parent.split("/")):
            where = os.path.join(where, part)
            if not os.path.isdir(where):
                os.mkdir(where)
                self.made.append(where)
        self.path = os.path.join(where, self.name)
        os.mkdir(self.path)
        self.id = os.stat(self.path).st_ino  # the cgroup id is the directory's inode

    @classmethod
    def existing(cls, path):
        """A cgroup someone else made (removed with the others by remove())."""
        cg = cls.__new__(cls)
        cg.name, cg.path, cg.made = os.path.basename(path), path, []
        cg.id = os.stat(path).st_ino
        return cg

    def enter(self):
        """A preexec_fn: the child joins this cgroup before it execs."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write("0")

    def popen(self, cmd, **kw):
        return subprocess.Popen(cmd, preexec_fn=self.enter, **kw)

    def remove(self):
        if os.path.isdir(self.path):
            os.rmdir(self.path)
        for where in reversed(self.made):
            try:
                os.rmdir(where)
            except OSError:
                pass  # another cgroup of the test is still in it; that one removes it


def bpftool_json(*args):
    r = subprocess.run(["bpftool", "-j"] + list(args), capture_output=True, text=True)
    try:
        out = json.loads(r.stdout)
        parsed = True
    except ValueError:
        out, parsed = None, False  # an update's answer is a JSON null: parsed, not a failure
    # Debian 13's bpftool (7.5) prints a perf_event link whole, then exits with 255 and no
    # message: what it printed is the answer. A real failure prints {"error": ...}.
    failed = r.returncode != 0 and (out is None or (isinstance(out, dict) and "error" in out))
    if not parsed or failed:
        raise Failure(f"bpftool {' '.join(args)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
    return out


steps_passed = 0  # steps of this process that passed (step())


def step(name, on_failure=None):
    """A decorator that runs the function at once as one named step of a longer sequence (the
    system tests): prints "ok NAME" when it returns; when it raises, calls on_failure(name, e)
    (which may exit) and lets the exception go on."""
    def run(fn):
        global steps_passed
        try:
            fn()
        except Exception as e:
            if on_failure:
                on_failure(name, e)
            raise
        steps_passed += 1
        print(f"ok {name}", flush=True)
        return fn
    return run


def kernel_version(release=None):
    """(major, minor) of a kernel release such as "5.10" or "6.1.0-56-amd64": the running
    kernel's by default."""
    return tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", release or os.uname().release).groups())


# Whether the daemon pins its probes' links on this kernel (docs/kernels.md, link_pin: Linux
# 5.15; the kernels suite runs the tests on 5.10 too): without, the probes detach with the
# daemon, and checks of pinned links do not apply.
LINK_PIN = kernel_version() >= (5, 15)


def link_ids(pin_path, prefix="handle_"):
    """The ids of the BPF links pinned under pin_path/links whose names start with prefix, by
    name (the built-in probes' are handle_exec, handle_open_enter, ...)."""
    links = os.path.join(pin_path, "links")
    return {name: bpftool_json("link", "show", "pinned", os.path.join(links, name))["id"]
            for name in sorted(os.listdir(links)) if name.startswith(prefix)}


def run_true(*args):
    """Runs /bin/true with args (a marker that events of exec, fork and exit carry) to its end;
    its pid."""
    p = subprocess.Popen(["/bin/true", *args])
    p.wait()
    return p.pid


def producer_counters(pin_path, producer):
    """Sums a producer's per-CPU (attempts, failures) from the pinned counters array."""
    key = [str(b) for b in producer.to_bytes(4, "little")]
    out = bpftool_json("map", "lookup", "pinned", f"{pin_path}/counters", "key", *key)
    attempts = failures = 0
    for v in out["values"]:
        val = v["value"]
        if isinstance(val, dict):
            attempts += val["attempts"]
            failures += val["failures"]
        else:  # raw bytes without BTF
            raw = bytes(int(b, 16) for b in val)
            attempts += int.from_bytes(raw[0:8], "little")
            failures += int.from_bytes(raw[8:16], "little")
    return attempts, failures


def on_cpu(fn):
    """Runs fn pinned to one CPU: everything it makes happen lands in that CPU's ring in order,
    and a ring reaches every subscriber in order, so an event that arrives proves that every
    event emitted before it on that CPU has been seen."""
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(saved)})
    try:
        return fn()
    finally:
        os.sched_setaffinity(0, saved)


def on_each_cpu(fn):
    """Runs fn(cpu) pinned to each online CPU in turn. An event fn makes lands in that CPU's ring
    behind everything emitted there before, and a ring reaches a client in order: once a client
    has the barrier events of every CPU, it has every earlier event too. This is how the tests
    prove that something did not arrive, without sleeping."""
    saved = os.sched_getaffinity(0)
    try:
        for cpu in sorted(saved):
            os.sched_setaffinity(0, {cpu})
            fn(cpu)
    finally:
        os.sched_setaffinity(0, saved)
    return sorted(saved)


def free_port():
    """A TCP port on loopback that nothing listens on now (for a server the test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FileMonitor:
    """perfrelayctl monitor --json ARGS of this build into a file (so that a monitor the test
    stops fills nothing but its ring); lines() reads what it wrote so far, stop() ends it and
    returns every line."""

    def __init__(self, socket_path, *args, user=None, extra_groups=None):
        self.out = tempfile.NamedTemporaryFile(prefix="perfrelay-mon-", delete=False)
        os.chmod(self.out.name, 0o666)
        self.proc = subprocess.Popen([os.path.join(build_root(), "client", "perfrelayctl"), "monitor", "--json",
                                      "--socket", socket_path] + list(args),
                                     stdout=self.out, stderr=subprocess.PIPE, user=user, extra_groups=extra_groups)

    def lines(self):
        with open(self.out.name) as f:
            return [json.loads(line) for line in f if line.endswith("}\n")]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(30)
        self.out.close()
        lines = self.lines()
        os.unlink(self.out.name)
        return lines


def wait_for(pred, what, timeout=30, interval=0.02):
    """Polls pred() until it returns something true and returns that; a Failure after `timeout`
    seconds. For what the daemon (or a server) makes true in its own time, e.g. counters it
    stores at the end of a batch: a bounded wait for a condition that must come true, never a
    sleep standing in for one."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not within {timeout}s")
        time.sleep(interval)


def stop_daemons():
    """The next test starts from no running daemon, as it would after a pass."""
    for dm in _daemons:
        if dm.proc is not None and dm.proc.poll() is None:
            dm.proc.kill()
            dm.proc.wait()
        dm.proc = None
