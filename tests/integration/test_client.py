#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelayctl monitor against a real daemon: a line for a command run in another process,
--json lines that validate against the published JSON Schemas (docs/schema/), exit 0 on
SIGINT/SIGTERM, exit 1 with a message when the daemon refuses, goes away or is not there."""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from prtest import check, check_eq, daemon_binary, Failure, main, run_true
from prtest.schema import SCHEMA_DIR, schemas_by_type, validator_self_test

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
CTL = os.path.join(BUILDDIR, "client", "perfrelayctl")

if not os.access(CTL, os.X_OK):
    raise Failure(f"{CTL} was not built")


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, workdir):
    global WORK, SOCK
    WORK = workdir
    SOCK = os.path.join(WORK, "events.sock")
    d = make_daemon("client", config=f"[Socket]\nSocketPath={SOCK}", stdout=False)
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup



# ---- perfrelayctl monitor as a child process ----

class Monitor:
    def __init__(self, *args, socket_path=None):
        self.proc = subprocess.Popen([CTL, "monitor", "--socket", socket_path or SOCK] + list(args),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = []
        self.err = []
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
                        threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True)]
        for t in self.threads:
            t.start()

    def _read(self, pipe, into):
        for raw in pipe:
            with self.cond:
                into.append(raw.decode("utf-8", errors="replace").rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_line(self, pred, what, timeout=10):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    if pred(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self.threads[0].is_alive()):
                    raise Failure(f"no line for {what} within {timeout}s; stdout: {self.lines[-10:]}, "
                                  f"stderr: {self.err}")
                self.cond.wait(min(left, 0.2))

    def wait_exit(self, timeout=10):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Failure(f"perfrelayctl did not exit within {timeout}s")
        for t in self.threads:
            t.join(5)
        return rc

    def stop(self, sig=signal.SIGINT):
        self.proc.send_signal(sig)
        return self.wait_exit()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_until_seen(monitor, make_event, matches, what, tries=20):
    """Makes an event in another process until the monitor shows it: the first may come before
    the subscription is in place. Returns the matching line."""
    for _ in range(tries):
        token = make_event()
        try:
            return monitor.wait_line(lambda line: matches(line, token), what, timeout=1)
        except Failure:
            if monitor.proc.poll() is not None:
                raise
    return monitor.wait_line(lambda line: matches(line, token), what, timeout=10)


def seconds_of_day(hms):
    h, m, s = hms.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


# ---- tests ----

def test_monitor_shows_exec():
    marker = f"perfrelay-client-marker-{os.getpid()}"
    m = Monitor("--type", "exec")
    try:
        header = m.wait_line(lambda line: True, "the header")
        check(header.split()[:6] == ["TIME", "TYPE", "PID", "UID", "COMM", "DETAILS"], f"header: {header!r}")
        line = run_until_seen(m, lambda: run_true(marker),
                              lambda line, pid: f" {pid} " in line and marker in line, "the marker's exec")
        cols = line.split(None, 5)
        check(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}", cols[0]), f"TIME column: {line!r}")
        now = time.localtime()
        drift = abs(seconds_of_day(cols[0]) - (now.tm_hour * 3600 + now.tm_min * 60 + now.tm_sec)) % 86400
        check(min(drift, 86400 - drift) < 30, f"TIME is local wall-clock time (line {cols[0]}, now {time.strftime('%T')})")
        check_eq(cols[1], "exec", "TYPE column")
        check_eq(cols[3], "0", "UID column")
        check_eq(cols[4], "true", "COMM column")
        check_eq(cols[5], f"/bin/true {marker}", "DETAILS: filename and arguments")
        # --type exec was passed on: nothing else shows up.
        others = [line for line in m.lines[1:] if line.split()[1] != "exec"]
        check_eq(others, [], "lines of other types")
        rc = m.stop(signal.SIGINT)
        check_eq(rc, 0, f"exit status after SIGINT (stderr: {m.err})")
        check_eq(m.err, [], "nothing on stderr")
    finally:
        m.kill()


def test_monitor_details():
    m = Monitor("--type", "exit", "--type", "open", "--type", "connect", "--type", "fork")
    try:
        m.wait_line(lambda line: line.startswith("TIME"), "the header")

        def exit_with_code():
            p = subprocess.Popen(["/bin/sh", "-c", "exit 7"])
            p.wait()
            return p.pid
        line = run_until_seen(m, exit_with_code, lambda line, pid: line.split()[1:3] == ["exit", str(pid)],
                              "an exit with code 7")
        check(re.search(r" code 7, runtime \d+(\.\d+)?(us|ms|s)$", line), f"exit details: {line!r}")

        path = os.path.join(WORK, "open-marker")

        def open_missing():
            try:
                os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                pass
            return path
        line = run_until_seen(m, open_missing, lambda line, p: f" {p} " in line, "an open of a missing file")
        check(line.endswith(f"{path} O_RDONLY|O_CLOEXEC = -ENOENT"), f"open details: {line!r}")

        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]

        def connect():
            socket.create_connection(("127.0.0.1", port)).close()
            return port
        line = run_until_seen(m, connect, lambda line, p: f"127.0.0.1:{p} " in line, "a connect")
        srv.close()
        check(line.endswith(f"127.0.0.1:{port} = 0"), f"connect details: {line!r}")

        def fork():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            return pid
        line = run_until_seen(m, fork, lambda line, pid: line.split()[1] == "fork" and f"child {pid}" in line,
                              "a fork")
        check_eq(line.split()[2], str(os.getpid()), "fork PID column is the parent")
        check_eq(m.stop(signal.SIGTERM), 0, f"exit status after SIGTERM (stderr: {m.err})")
    finally:
        m.kill()


def test_json_lines_validate():
    validator_self_test()
    validator, by_type = schemas_by_type()
    for t in ("exec", "exit", "fork", "open", "connect"):
        check(t in by_type, f"a schema in {SCHEMA_DIR} for type {t} (found {sorted(by_type)})")

    marker = f"perfrelay-json-marker-{os.getpid()}"
    path = os.path.join(WORK, "json-open-marker\n\"quoted\"")
    m = Monitor("--json")
    try:
        def make():
            run_true(marker)  # exec, fork (of this test), exit
            try:
                os.close(os.open(path, os.O_RDONLY | os.O_CREAT, 0o600))  # a path that needs escaping
            except OSError:
                pass
            srv = socket.socket()
            srv.bind(("127.0.0.1", 0))
            srv.listen()
            socket.create_connection(srv.getsockname()).close()
            srv.close()
            return marker
        run_until_seen(m, make, lambda line, mk: mk in line and '"type":"exec"' in line, "the marker's exec")
        # The open probe is attached for the monitor before its hello (OnDemand=): an open of
        # a make() that ran before is not traced, so the open, too, is made until it shows.
        run_until_seen(m, make, lambda line, mk: '"type":"open"' in line and "json-open-marker" in line,
                       "the marker's open")
        # The fork is emitted on the parent's CPU, the exec and exit on the child's, the connect
        # on ours: rings of different CPUs arrive in no fixed order, so wait for each type. And
        # the first make() may have run while the monitor was subscribing (it does not wait for
        # the monitor's hello): its fork can predate the subscription, its exec not, so each
        # type is made again until it shows.
        for t in ("exec", "exit", "fork", "open", "connect"):
            run_until_seen(m, make, lambda line, _, t=t: f'"type":"{t}"' in line, f"a {t} line")
        rc = m.stop(signal.SIGINT)
        check_eq(rc, 0, f"exit status after SIGINT (stderr: {m.err})")
    finally:
        m.kill()

    seen = {}
    for line in m.lines:
        ev = json.loads(line)  # raw lines, unchanged: each one JSON object
        check(isinstance(ev, dict) and "type" in ev, f"an event object: {line[:200]!r}")
        check(ev["type"] in by_type, f"a schema for type {ev['type']!r}")
        errs = validator.errors(ev, validator.load(by_type[ev["type"]]), by_type[ev["type"]])
        check_eq(errs, [], f"schema errors of {line[:300]!r}")
        seen[ev["type"]] = seen.get(ev["type"], 0) + 1
    for t in ("exec", "exit", "fork", "open", "connect"):
        check(seen.get(t, 0) > 0, f"validated at least one {t} line (seen {seen})")
    opened = [json.loads(line) for line in m.lines if "json-open-marker" in line]
    check(any(ev.get("path") == path for ev in opened), "a path with a newline and quotes survives the round trip")


def test_refused_subscription():
    m = Monitor("--type", "no-such-type")
    rc = m.wait_exit()
    check_eq(rc, 1, "exit status when the daemon refuses")
    err = "\n".join(m.err)
    check("refused" in err and "no-such-type" in err and SOCK in err, f"message names the problem: {err!r}")
    check_eq(m.lines, [], "nothing on stdout")


def test_daemon_goes_away(d):
    m = Monitor("--type", "exec")
    try:
        m.wait_line(lambda line: line.startswith("TIME"), "the header")
        rc = d.stop()
        check_eq(rc, 0, "daemon exit status")
        rc = m.wait_exit(15)
        check_eq(rc, 1, "monitor exit status when the daemon stops")
        err = "\n".join(m.err)
        # "shut down" when the goodbye line arrived, "closed the connection" when it did not.
        check(re.search(r"perfrelayd (shut down|closed the connection)", err),
              f"monitor says the daemon went away: {err!r}")
    finally:
        m.kill()


def test_no_daemon():
    # The daemon is stopped: the socket is gone (or refuses).
    m = Monitor("--type", "exec")
    rc = m.wait_exit()
    check_eq(rc, 1, "exit status without a daemon")
    err = "\n".join(m.err)
    check(SOCK in err and ("No such file or directory" in err or "Connection refused" in err),
          f"message names the socket and the error: {err!r}")
    m = Monitor(socket_path=os.path.join(WORK, "x" * 120))
    check_eq(m.wait_exit(), 1, "exit status for a path too long for a socket")
    check("File name too long" in "\n".join(m.err), f"message for a long path: {m.err}")


if __name__ == "__main__":
    main(__file__)
