#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Process identity (docs/events.md, "Process identity"): every process event carries the
exec_id of its process image and its parent's; an exec carries its nearest ancestors, the
executable as the kernel resolved it (path, device, inode) and the working directory; an image
keeps its exec_id across a daemon restart."""
import os
import random
import shutil
import subprocess
import sys

import pytest

from prtest import check, check_eq, daemon_binary, main

BINARY = daemon_binary()
HEX16 = set("0123456789abcdef")


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, workdir):
    global d, WORK
    WORK = workdir
    d = make_daemon("ancestry", config="[Probes]\nProbes=exec exit fork open\n")


def is_exec_id(v):
    return isinstance(v, str) and len(v) == 16 and set(v) <= HEX16 and v != "0" * 16


def marker(tag):
    return f"prac-{tag}-{random.randrange(10**9)}"


def exec_of(arg, what):
    """The exec event whose argv holds `arg`."""
    return d.wait_event(lambda e: e["type"] == "exec" and arg in e["argv"], what)


def test_child_of_a_shell():
    """A shell whose argv holds a marker runs /bin/true with another: the child's parent image is
    the shell's, and its first ancestor is the shell, then this test."""
    shell_marker, child_marker = marker("sh"), marker("true")
    # "; exit" keeps sh from exec'ing /bin/true in its own process (dash does for a last command).
    subprocess.run(["/bin/sh", "-c", f"/bin/true {child_marker}; exit $?", shell_marker], check=True)
    sh = exec_of(shell_marker, "the shell's exec")
    child = exec_of(child_marker, "the child's exec")
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


def test_executable_and_working_directory():
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
    ev = exec_of(m, "the exec through a symlink")
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
    ev2 = exec_of(m2, "the exec of the replaced binary")
    check_eq(ev2["exe"], ev["exe"], "the same path")
    check(ev2["exe_ino"] != ev["exe_ino"], "a replaced binary shows by its inode")
    check_eq(ev2["cwd"], "/", "cwd /")


def test_exec_id_survives_a_restart():
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
        ev = exec_of(m, "the long-lived process's exec")
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


if __name__ == "__main__":
    main(__file__)
