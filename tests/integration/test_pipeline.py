#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The event pipeline end to end: built-in probes -> pinned array -> rings -> readers -> JSON."""
import os
import socket
import subprocess
import tempfile

import pytest

from prtest import LINK_PIN, bpftool_json, check, check_eq, main, possible_cpus, producer_counters


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon):
    d = make_daemon("pipeline")
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup


def test_pinned_array(d):
    info = bpftool_json("map", "show", "pinned", f"{d.pin_path}/events")
    check_eq(info["type"], "perf_event_array", "map type")
    check_eq(info["flags"], 0x800, "map flags (BPF_F_PRESERVE_ELEMS)")
    check_eq(info["max_entries"], possible_cpus(), "max_entries")
    check_eq(info["bytes_key"], 4, "key size")
    check_eq(info["bytes_value"], 4, "value size")
    for link in ("handle_exec", "handle_exit", "handle_fork", "handle_open_enter", "handle_open_exit",
                 "handle_connect_enter", "handle_connect_exit"):
        check_eq(os.path.exists(f"{d.pin_path}/links/{link}"), LINK_PIN, f"link {link} pinned (where the kernel can)")


def test_exec_and_exit(d):
    p = subprocess.Popen(["/bin/true"])
    p.wait()
    ex = d.wait_event(lambda e: e["type"] == "exec" and e["pid"] == p.pid, "exec of /bin/true")
    check_eq(ex["filename"], "/bin/true", "exec filename")
    check_eq(ex["argv"], ["/bin/true"], "exec argv")
    check_eq(ex["ppid"], os.getpid(), "exec ppid")
    check_eq(ex["uid"], os.getuid(), "exec uid")
    check_eq(ex["comm"], "true", "exec comm")
    check(ex["cgroup_id"] > 0, "exec cgroup_id set")
    for key in ("ts", "cpu", "seq", "producer"):
        check(key in ex, f"exec has {key}")
    x = d.wait_event(lambda e: e["type"] == "exit" and e["pid"] == p.pid, "exit of /bin/true")
    check_eq(x["exit_code"], 0, "exit code of /bin/true")
    check_eq(x["signal"], 0, "exit signal")
    check(x["ts"] >= ex["ts"], "exit after exec")

    p = subprocess.Popen(["/bin/sh", "-c", "exit 3", "marker-arg"])
    p.wait()
    ex = d.wait_event(lambda e: e["type"] == "exec" and e["pid"] == p.pid, "exec of sh")
    check_eq(ex["argv"], ["/bin/sh", "-c", "exit 3", "marker-arg"], "exec argv with arguments")
    check_eq(ex["argc"], 4, "argc")
    check_eq(ex["argv_truncated"], False, "argv not truncated")
    x = d.wait_event(lambda e: e["type"] == "exit" and e["pid"] == p.pid, "exit of sh")
    check_eq(x["exit_code"], 3, "exit code of sh -c 'exit 3'")

    p = subprocess.Popen(["/bin/sleep", "60"])
    p.kill()
    p.wait()
    x = d.wait_event(lambda e: e["type"] == "exit" and e["pid"] == p.pid, "exit of killed sleep")
    check_eq(x["signal"], 9, "terminating signal")


def test_long_argv_truncated(d):
    args = ["/bin/true"] + ["x" * 100] * 10
    p = subprocess.Popen(args)
    p.wait()
    ex = d.wait_event(lambda e: e["type"] == "exec" and e["pid"] == p.pid, "exec with long argv")
    check_eq(ex["argv_truncated"], True, "argv_truncated")
    check_eq(ex["argv"][0], "/bin/true", "first argument kept")
    check(sum(len(a) + 1 for a in ex["argv"]) <= 512, "argv bounded by the ABI")


def test_open(d):
    fd, path = tempfile.mkstemp(prefix="perfrelay-open-marker-")
    os.close(fd)
    # mkstemp opened it O_RDWR; our marker open is the read-only one.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    os.close(fd)
    ev = d.wait_event(lambda e: e["type"] == "open" and e.get("path") == path and e["pid"] == os.getpid()
                      and e["flags"] & 3 == os.O_RDONLY, "read-only open of the marker path")
    check_eq(ev["result"], fd, "open result is the fd")
    check_eq(ev["flags"] & (os.O_NONBLOCK | os.O_CREAT), os.O_NONBLOCK, "open flags")
    check_eq(ev["uid"], os.getuid(), "open uid")
    os.unlink(path)
    missing = path + "-missing"
    try:
        os.open(missing, os.O_RDONLY)
    except FileNotFoundError:
        pass
    ev = d.wait_event(lambda e: e["type"] == "open" and e.get("path") == missing, "failed open")
    check_eq(ev["result"], -2, "failed open result is -ENOENT")


def test_connect(d):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    c = socket.create_connection(("127.0.0.1", port))
    c.close()
    srv.close()
    ev = d.wait_event(lambda e: e["type"] == "connect" and e["pid"] == os.getpid() and e["port"] == port,
                      f"connect to 127.0.0.1:{port}")
    check_eq(ev["address"], "127.0.0.1", "connect address")
    check_eq(ev["family_name"], "inet", "connect family")
    check_eq(ev["result"], 0, "connect result")


def test_fork(d):
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    ev = d.wait_event(lambda e: e["type"] == "fork" and e["child_pid"] == pid, "fork")
    check_eq(ev["parent_pid"], os.getpid(), "fork parent pid")
    check_eq(ev["child_tgid"], pid, "fork child tgid")
    x = d.wait_event(lambda e: e["type"] == "exit" and e["pid"] == pid, "exit of forked child")
    check_eq(x["exit_code"], 7, "child exit code")


def test_per_cpu_sequence(d):
    # A record's seq is its producer's attempt number on its CPU: never seen twice, and below
    # the producer's attempt counter on that CPU (tracepoint programs may be preempted, so
    # arrival order is not asserted here).
    with d.cond:
        # A "lost" line (the stdout writer fell behind on a loaded machine) is no record.
        evs = [e for e in d.events if e["type"] != "lost"]
    check(len(evs) > 0, "events received")
    seen = set()
    for e in evs:
        key = (e["producer"], e["cpu"], e["seq"])
        check(key not in seen, f"seq {key} received twice")
        seen.add(key)
    for producer in {e["producer"] for e in evs}:
        attempts, failures = producer_counters(d.pin_path, producer)
        mine = [e for e in evs if e["producer"] == producer]
        check(max(e["seq"] for e in mine) < attempts, f"producer {producer}: seq below attempts")
        check(len(mine) <= attempts - failures, f"producer {producer}: received <= attempts - failures")


def test_clean_stop_keeps_pins(d):
    rc = d.stop()
    check_eq(d.bad_lines, [], "lines on stdout that are not valid JSON")
    check_eq(rc, 0, "exit status after SIGTERM")
    info = bpftool_json("map", "show", "pinned", f"{d.pin_path}/events")
    check_eq(info["flags"], 0x800, "array still pinned after stop")
    check_eq(os.path.exists(f"{d.pin_path}/links/handle_exec"), LINK_PIN, "links stay pinned after stop (where the kernel can)")


if __name__ == "__main__":
    main(__file__)
