#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Process identity (docs/events.md, "Process identity"): every process event carries the
exec_id of its process image and its parent's; an exec carries its nearest ancestors, the
executable as the kernel resolved it (path, device, inode) and the working directory; an image
keeps its exec_id across a daemon restart."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys

import pytest

from prtest.busclient import as_user
from prtest import FileMonitor, check, check_eq, daemon_binary, main, wait_for

BINARY = daemon_binary()
HEX16 = set("0123456789abcdef")


@pytest.fixture(scope="module", autouse=True)
def _setup(stats_bus, make_daemon, workdir):
    global WORK, BUS
    WORK, BUS = workdir, stats_bus
    d = make_daemon("ancestry", config="[Probes]\nProbes=exec exit fork open\n[Recorder]\nRecorderTypes=all\n")
    # A table of 256 entries: a user's few hundred processes overfill it.
    d_small = make_daemon("ancestry-small", start=False,
                          config="[Probes]\nProbes=exec exit fork open\n[Readers]\nProcessTableEntries=256\n")
    return {"d": d, "d_small": d_small}


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup["d"]


@pytest.fixture(scope="module", name="d_small")
def _fixture_d_small(_setup):
    return _setup["d_small"]


def ctl(*args, user=None):
    """perfrelayctl on the test's bus, as `user` (busclient.as_user()); its stdout."""
    r = subprocess.run(as_user(user, [BUS.ctl, *args]), capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=BUS.address))
    check_eq(r.returncode, 0, f"perfrelayctl {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def is_exec_id(v):
    return isinstance(v, str) and len(v) == 16 and set(v) <= HEX16 and v != "0" * 16


def marker(tag):
    return f"prac-{tag}-{random.randrange(10**9)}"


def exec_of(d, arg, what):
    """The exec event whose argv holds `arg`."""
    return d.wait_event(lambda e: e["type"] == "exec" and arg in e["argv"], what)


def test_child_of_a_shell(d):
    """A shell whose argv holds a marker runs /bin/true with another: the child's parent image is
    the shell's, and its first ancestor is the shell, then this test."""
    shell_marker, child_marker = marker("sh"), marker("true")
    # "; exit" keeps sh from exec'ing /bin/true in its own process (dash does for a last command).
    subprocess.run(["/bin/sh", "-c", f"/bin/true {child_marker}; exit $?", shell_marker], check=True)
    sh = exec_of(d, shell_marker, "the shell's exec")
    child = exec_of(d, child_marker, "the child's exec")
    check(is_exec_id(sh["exec_id"]) and is_exec_id(child["exec_id"]), f"exec ids: {sh['exec_id']}, {child['exec_id']}")
    check(sh["exec_id"] != child["exec_id"], "two images, two ids")
    check_eq(child["parent_exec_id"], sh["exec_id"], "the child's parent_exec_id is the shell's exec_id")
    anc = child["ancestors"]
    check(len(anc) >= 2, f"the child has its ancestors: {anc}")
    check_eq((anc[0]["exec_id"], anc[0]["pid"], anc[0]["comm"]), (sh["exec_id"], sh["pid"], "sh"),
             "ancestors[0] is the shell")
    check_eq(anc[1]["pid"], os.getpid(), "ancestors[1] is this test")
    check_eq(anc[1]["exec_id"], sh["parent_exec_id"], "the shell's parent is the same image in both")
    check(len(anc) <= 8, "at most 8 ancestors")
    # The child's list is the shell and the shell's list, cut at 8.
    check_eq([a["exec_id"] for a in anc[1:]], [a["exec_id"] for a in sh["ancestors"]][:len(anc) - 1],
             "the shell's ancestors continue the child's")
    # Every event of the shell's image carries its id: its fork of the child (whose new image,
    # before its exec, is the shell's copy: another id) and its exit.
    fork = d.wait_event(lambda e: e["type"] == "fork" and e["parent_pid"] == sh["pid"], "the shell's fork")
    check_eq(fork["parent_exec_id"], sh["exec_id"], "the fork's new process has the shell as parent")
    check(fork["exec_id"] not in (sh["exec_id"], child["exec_id"]), "the forked copy is an image of its own")
    ex = d.wait_event(lambda e: e["type"] == "exit" and e["pid"] == sh["pid"], "the shell's exit")
    check_eq(ex["exec_id"], sh["exec_id"], "the shell's exit has its exec_id")
    cex = d.wait_event(lambda e: e["type"] == "exit" and e["pid"] == child["pid"], "the child's exit")
    check_eq((cex["exec_id"], cex["parent_exec_id"]), (child["exec_id"], sh["exec_id"]), "the child's exit")


def test_executable_and_working_directory(d):
    """The executable as the kernel resolved it (through a symlink), its device and inode, and
    the working directory."""
    real = os.path.join(WORK, "prac-real-true")
    link = os.path.join(WORK, "prac-link")
    cwd = os.path.join(WORK, "prac-cwd")
    shutil.copy("/bin/true", real)
    os.symlink(real, link)
    os.mkdir(cwd)
    m = marker("exe")
    subprocess.run([link, m], check=True, cwd=cwd)
    ev = exec_of(d, m, "the exec through a symlink")
    st = os.stat(real)
    check_eq(ev["exe"], os.path.realpath(real), "exe: the file the kernel runs, not the symlink")
    check_eq(ev["filename"], link, "filename: the path execve() was given")
    check_eq((ev["exe_dev"], ev["exe_ino"]), (f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino),
             "exe_dev and exe_ino are the file's")
    check_eq(ev["cwd"], os.path.realpath(cwd), "cwd: the working directory at exec")

    # A binary replaced under the same name since (a new file renamed over it, as a package
    # manager does): a new inode, allocated while the old one still existed.
    shutil.copy("/bin/true", real + ".new")
    os.rename(real + ".new", real)
    m2 = marker("exe2")
    subprocess.run([real, m2], check=True, cwd="/")
    ev2 = exec_of(d, m2, "the exec of the replaced binary")
    check_eq(ev2["exe"], ev["exe"], "the same path")
    check(ev2["exe_ino"] != ev["exe_ino"], "a replaced binary shows by its inode")
    check_eq(ev2["cwd"], "/", "cwd /")


def test_exec_id_survives_a_restart(d):
    """A long-lived process keeps its exec_id across a daemon restart: the id comes from the
    kernel, not from the daemon."""
    m = marker("long")
    path = os.path.join(WORK, m)
    # A child that opens `path` each time it reads a line: its opens carry its image's id.
    opener = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\nfor line in sys.stdin:\n    open(sys.argv[1], 'a').close()\n    print('ok', flush=True)\n",
         path, m],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ev = exec_of(d, m, "the long-lived process's exec")
        opener.stdin.write("x\n")
        opener.stdin.flush()
        check_eq(opener.stdout.readline().strip(), "ok", "the first open")
        first = d.wait_event(lambda e: e["type"] == "open" and e["path"] == path, "the first open")
        check_eq(first["exec_id"], ev["exec_id"], "the open's exec_id is its process's")
        check_eq(first["parent_exec_id"], ev["parent_exec_id"], "and its parent's")

        check_eq(d.stop(), 0, "daemon stop")
        d.start()
        opener.stdin.write("x\n")
        opener.stdin.flush()
        check_eq(opener.stdout.readline().strip(), "ok", "the open after the restart")
        again = d.wait_event(lambda e: e["type"] == "open" and e["path"] == path, "the open after the restart")
        check_eq(again["exec_id"], ev["exec_id"], "the same exec_id after a daemon restart")
    finally:
        opener.stdin.close()
        opener.wait(10)


def descendants(d, root_pid):
    """The pids of root_pid's descendants, from the fork events the daemon published."""
    pids, grew = {root_pid}, True
    while grew:
        grew = False
        for e in list(d.events):
            if e["type"] == "fork" and e["parent_pid"] in pids and e["child_tgid"] not in pids:
                pids.add(e["child_tgid"])
                grew = True
    return pids - {root_pid}


def client_offered(client_id):
    for c in BUS.stats()["client_list"]:
        if c["id"] == client_id:
            return c["offered"]
    raise AssertionError(f"client {client_id} is not in GetStats' client_list")


def test_ancestor_filter(d, socket_client):
    """Opens by descendants of a marker process (its children and grandchildren) are delivered
    to "ancestor" subscribers, by the marker's comm and by its exec_id; opens of the same file by
    other processes are not; GetStats counts the table."""
    sh = os.path.join(WORK, "prac-anc-sh")  # the marker's comm: its file name, 11 bytes
    shutil.copy(os.path.realpath("/bin/sh"), sh)
    target = os.path.join(WORK, marker("target"))
    open(target, "w").close()
    m = marker("anc")
    by_comm = socket_client(d.socket_path, {"subscribe": {"types": ["open"], "ancestor": {"comm": ["prac-anc-sh"]}}})
    by_comm_id = by_comm.hello()["client_id"]
    # perfrelayctl monitor --ancestor (libperfrelay's ancestor lists), subscribed before the
    # marker starts: it shows in GetStats' client list.
    before = {c["id"] for c in BUS.stats()["client_list"]}
    mon = FileMonitor(d.socket_path, "--type", "open", "--ancestor", "prac-anc-sh")
    wait_for(lambda: {c["id"] for c in BUS.stats()["client_list"]} - before - {by_comm_id}, "the monitor's subscription")
    script = 'read go; cat "$1" >/dev/null; /bin/sh -c \'cat "$1" >/dev/null; exit 0\' inner "$1"; read done'
    proc = subprocess.Popen([sh, "-c", script, m, target], stdin=subprocess.PIPE, text=True)
    try:
        ev = exec_of(d, m, "the marker's exec")
        by_id = socket_client(d.socket_path, {"subscribe": {"types": ["open"], "ancestor": {"exec_id": [ev["exec_id"]]}}})
        by_id_id = by_id.hello()["client_id"]
        proc.stdin.write("go\n")
        proc.stdin.flush()
        # The same file opened by processes that do not descend from the marker: this test and
        # a child of it.
        open(target).close()
        subprocess.run(["cat", target], check=True, capture_output=True)
        proc.stdin.write("done\n")
        proc.stdin.flush()
        check_eq(proc.wait(10), 0, "the marker shell exits")
    finally:
        if proc.poll() is None:
            proc.kill()
    d.wait_event(lambda e: e["type"] == "exit" and e["pid"] == proc.pid, "the marker's exit")
    # Five opens: this test's two (it made the file), its cat's, the marker's child's and
    # grandchild's.
    opens = d.wait_events(lambda e: e["type"] == "open" and e["path"] == target, 5, "the five opens of the target")
    below = descendants(d, proc.pid)
    theirs = {e["pid"] for e in opens if e["pid"] in below}
    check_eq(len(theirs), 2, f"two of the opens are the marker's child's and grandchild's: {opens}, {below}")
    others = [e for e in opens if e["pid"] not in below]
    check_eq(len([e for e in others if e["pid"] == os.getpid()]), 2, "this test's two opens")
    check_eq(len(others), 3, "three opens of the target are not the marker's descendants'")

    for c, cid in ((by_comm, by_comm_id), (by_id, by_id_id)):
        # Every open the daemon matched to the client has arrived: the match was decided when
        # the daemon published the events (before its standard output showed them).
        offered = client_offered(cid)
        wait_for(lambda: len([x for x in c.messages() if x["type"] == "open"]) >= offered,
                 f"client {cid}: its {offered} events")
        got = [x for x in c.messages() if x["type"] == "open"]
        check_eq(len(got), offered, f"client {cid}: as many events as offered")
        check_eq({x["pid"] for x in got if x["path"] == target}, theirs,
                 f"client {cid}: the descendants' opens of the target, and no other process's")
        stray = [x for x in got if x["pid"] not in below]
        check_eq(stray, [], f"client {cid}: no open of a process outside the marker's subtree")

    wait_for(lambda: {x["pid"] for x in mon.lines() if x.get("path") == target} == theirs,
             "perfrelayctl monitor --ancestor: the descendants' opens of the target")
    check_eq([x for x in mon.stop() if x["pid"] not in below], [], "the monitor shows no other process's open")

    # The flight recorder's snapshot through D-Bus Snapshot() (its a{sv} filter's ancestor_comm).
    snap = [json.loads(x) for x in ctl("snapshot", "--json", "--type", "open", "--ancestor", "prac-anc-sh").splitlines()]
    opened = [x for x in snap if x["type"] == "open"]
    check_eq({x["pid"] for x in opened if x["path"] == target}, theirs, "the snapshot's opens of the target")
    check_eq([x for x in opened if x["pid"] not in below], [], "the snapshot has no other process's open")

    st = BUS.stats()["processes"]
    check(st["capacity"] >= 4096 and st["bytes"] > 0, f"the table's size: {st}")
    check(st["seeded"] > 0 and st["live"] > 0 and st["inserted"] >= st["seeded"], f"seeded at start: {st}")
    check(st["exited"] > 0, f"exits noted: {st}")


# The shell an exporter follows (Ancestors=prac-victim): a subshell of it waits, then opens.
VICTIM = r"""
( echo ready; read go; read x < "$1"; echo opened )
"""
# Its user's other shell, not below it: 400 live processes whose execs do not name the victim.
FLOOD = r"""
i=0
while [ $i -lt 400 ]; do sleep 120 & i=$((i + 1)); done
echo started
read go
"""


def test_eviction_attack(d_small, d, socket_client):
    """A user overfills the process table (256 entries here) with 400 live processes of their
    own, beside a shell an exporter's Ancestors= follows. The shell, a parent, is kept over the
    leaves: an open by its subshell (a fork without exec, whose record names no ancestor the
    table could learn again) still matches the ancestor filter; on 437f808 the oldest live entry
    went first, the shell, and the open matched nothing. A filter that fails closed gets it
    either way."""
    d.stop()  # the bus name is d_small's for this test
    d_small.start()
    sh = os.path.join(WORK, "prac-victim")  # comm: its file name
    shutil.copy(os.path.realpath("/bin/sh"), sh)
    os.chmod(sh, 0o755)
    target = os.path.join(WORK, marker("evict"))
    open(target, "w").close()
    os.chmod(target, 0o644)
    anc = {"comm": ["prac-victim"]}
    plain = socket_client(d_small.socket_path, {"subscribe": {"types": ["open"], "ancestor": anc}})
    closed = socket_client(d_small.socket_path,
                           {"subscribe": {"types": ["open"], "ancestor": dict(anc, incomplete=True)}})
    plain.hello()
    closed.hello()
    # One CPU: one ring, the events in order. As nobody: the attacker is a local user.
    user = ["taskset", "-c", str(min(os.sched_getaffinity(0))), "setpriv", "--reuid=nobody", "--regid=nogroup",
            "--clear-groups"]
    victim = subprocess.Popen(user + [sh, "-c", VICTIM, "victim", target], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    flood = None
    try:
        check_eq(victim.stdout.readline().strip(), "ready", "the victim's subshell waits")
        before = BUS.stats()["processes"]["evicted_live"]
        flood = subprocess.Popen(user + ["/bin/sh", "-c", FLOOD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, start_new_session=True)
        check_eq(flood.stdout.readline().strip(), "started", "the user's 400 processes started")
        # Emulated kernels (the kernels suite runs this file in its guests) take their time.
        d_small.wait_events(lambda e: e["type"] == "exec" and e["comm"] == "sleep", 400, "their execs", timeout=180)
        st = BUS.stats()["processes"]
        check(st["evicted_live"] - before >= 400 - 256, f"live entries were pushed out: {st}")
        victim.stdin.write("go\n")
        victim.stdin.flush()
        check_eq(victim.stdout.readline().strip(), "opened", "the subshell opened the file")
        ev = d_small.wait_event(lambda e: e["type"] == "open" and e["path"] == target and e["comm"] == "prac-victim",
                                "the subshell's open")
        # The fail-closed filter also takes opens whose lineage the small table lost (this
        # test's own, maybe): the subshell's is the one that counts.
        got = closed.wait(lambda x: x.get("path") == target and x["pid"] == ev["pid"], "the fail-closed filter gets it")
        check("lineage_incomplete" not in got, f"matched by the shell it saw, not for a gap: {got}")
        got = plain.wait(lambda x: x.get("path") == target, "the plain filter's copy")
        check_eq(got["pid"], ev["pid"], "the shell was kept: the plain ancestor filter matches its subshell")
    finally:
        for p in (victim, flood):
            if p:
                os.killpg(p.pid, signal.SIGKILL)  # the shell and what it started: its session
                p.wait()
        d_small.stop()
        d.start()


def test_ancestor_filter_refused(d, socket_client):
    """A malformed "ancestor" is refused with a message naming the field."""
    for ancestor, words in (({}, "names no process"), ({"exec_id": ["xyz"]}, "ancestor.exec_id[0]"),
                            ({"pid": [1]}, "unknown key"), ({"comm": ["a" * 16]}, "ancestor.comm[0]")):
        c = socket_client(d.socket_path, {"subscribe": {"ancestor": ancestor}})
        m = c.wait(lambda x: True, "the answer")
        check(m["type"] == "error" and m["error"] == "bad-request" and words in m["message"],
              f"{ancestor}: refused naming it: {m}")


def test_tree(d):
    """perfrelayctl tree: the live processes as a forest with their exec ids; --pid shows one
    subtree; an unprivileged caller sees only their own processes."""
    m = marker("tree")
    proc = subprocess.Popen(["/bin/sh", "-c", "sleep 600 & wait", m])
    sleeper = None
    try:
        ev = exec_of(d, m, "the tree marker's exec")
        sleeper = d.wait_event(lambda e: e["type"] == "exec" and e.get("parent_exec_id") == ev["exec_id"],
                               "the sleep's exec")
        rows = json.loads(ctl("tree", "--json"))
        by_id = {r["exec_id"]: r for r in rows}
        check(ev["exec_id"] in by_id and sleeper["exec_id"] in by_id, "the shell and its sleep are listed")
        sh, sl = by_id[ev["exec_id"]], by_id[sleeper["exec_id"]]
        check_eq((sh["pid"], sh["comm"]), (proc.pid, "sh"), "the shell's row")
        check_eq((sl["pid"], sl["comm"], sl["parent_exec_id"]), (sleeper["pid"], "sleep", ev["exec_id"]), "the sleep's row")
        check_eq(sl["depth"], sh["depth"] + 1, "the sleep is drawn under the shell")
        init = [r for r in rows if r["pid"] == 1]
        check(init and init[0]["depth"] == 0, "pid 1 is a root")

        sub = json.loads(ctl("tree", "--json", "--pid", str(proc.pid)))
        check_eq([(r["pid"], r["depth"]) for r in sub], [(proc.pid, 0), (sleeper["pid"], 1)], "--pid: the subtree")
        text = ctl("tree", "--pid", str(proc.pid))
        check(f"{sleeper['exec_id']}" in text and "└─sleep" in text, f"the drawn tree: {text}")

        mine = json.loads(ctl("tree", "--json", user="nobody"))
        check(all(r.get("uid") == 65534 for r in mine), "nobody sees only nobody's processes")
        check(sh["exec_id"] not in {r["exec_id"] for r in mine}, "nobody does not see root's shell")
    finally:
        if sleeper:
            os.kill(sleeper["pid"], signal.SIGKILL)
        proc.kill()
        proc.wait(10)


def test_other_users_ancestors_left_out(d):
    """A client that sees only its own uid's events gets its exec events with the ancestors that
    ran as its uid and no other (docs/security.md): the shell nobody started is there, this test
    (root) and every process above it are not, as /proc with hidepid= would hide them; root's
    client gets them all. The shell waits until nobody's client has its exec, so that the
    daemon knows whose it is before the child's exec comes."""
    nobody = 65534
    os.chmod(d.dir, 0o711)
    os.chmod(d.socket_path, 0o666)
    sh_marker, child_marker = marker("nsh"), marker("ntrue")
    mons = [FileMonitor(d.socket_path, "--type", "exec", user=nobody), FileMonitor(d.socket_path, "--type", "exec")]
    p = None
    try:
        wait_for(lambda: len([c for c in BUS.stats()["client_list"] if c["pid"] in (mons[0].proc.pid, mons[1].proc.pid)]) == 2,
                 "both monitors subscribed")
        p = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/bin/sh", "-c",
                              f"read x; /bin/true {child_marker}; exit $?", sh_marker], stdin=subprocess.PIPE)

        def event_of(m, arg):
            return next((e for e in m.lines() if e.get("type") == "exec" and arg in e.get("argv", [])), None)
        sh = wait_for(lambda: event_of(mons[0], sh_marker), "nobody's client gets its shell's exec")
        p.stdin.write(b"go\n")
        p.stdin.close()
        check_eq(p.wait(30), 0, "the shell's exit status")
        mine = wait_for(lambda: event_of(mons[0], child_marker), "nobody's client gets the child's exec")
        full = wait_for(lambda: event_of(mons[1], child_marker), "root's client gets it too")
        check_eq([a["exec_id"] for a in mine["ancestors"]], [sh["exec_id"]],
                 "nobody's client: its shell, and no ancestor of another user's")
        check_eq(full["ancestors"][0]["exec_id"], sh["exec_id"], "root's client: the shell first")
        check_eq(full["ancestors"][1]["pid"], os.getpid(), "then this test (root), and more above it")
        check_eq({k: v for k, v in mine.items() if k != "ancestors"}, {k: v for k, v in full.items() if k != "ancestors"},
                 "the rest of the event is the same for both")
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        for m in mons:
            m.stop()


if __name__ == "__main__":
    main(__file__)
