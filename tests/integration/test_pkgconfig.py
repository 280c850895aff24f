#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""libperfrelay as a user gets it: `meson install` into a temporary DESTDIR, a program built with
nothing but `pkg-config --cflags --libs libperfrelay` against that copy, run against a daemon,
receives the exec event of a marker command (JSON and binary format)."""
import json
import os
import shlex
import shutil
import subprocess
import threading
import time

import pytest

from prtest import check, check_eq, daemon_binary, main, skip

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pkgconfig-client.c")

for tool in ("meson", "pkg-config", "cc", "readelf"):
    if not shutil.which(tool):
        skip(f"{tool} not found")

with open(os.path.join(BUILDDIR, "meson-info", "intro-buildoptions.json")) as f:
    _sanitize = next((o["value"] for o in json.load(f) if o["name"] == "b_sanitize"), "none")
if _sanitize != "none":
    # The sanitized build's libperfrelay needs the sanitizer runtime loaded first, which a plain
    # program built from pkg-config flags does not do; the plain build runs this test.
    skip(f"the build uses b_sanitize={_sanitize}: an installed sanitized library cannot serve a plain program")

state = {}


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, workdir):
    # root also for `meson install` of the whole project, if only into a DESTDIR (make_daemon)
    global WORK, DESTDIR, SOCK, PROG
    WORK = workdir
    DESTDIR = os.path.join(WORK, "destdir")
    SOCK = os.path.join(WORK, "events.sock")
    PROG = os.path.join(WORK, "pkgconfig-client")
    d = make_daemon("pkgconfig", config=f"[Socket]\nSocketPath={SOCK}", stdout=False)
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup



def installed_path(suffix):
    """Where `meson install` puts the build file ending in suffix, per the build's introspection."""
    with open(os.path.join(BUILDDIR, "meson-info", "intro-installed.json")) as f:
        installed = json.load(f)
    found = [dst for src, dst in installed.items() if src.endswith(suffix)]
    check_eq(len(found), 1, f"install destinations of *{suffix}")
    return found[0]


def test_install():
    r = subprocess.run(["meson", "install", "-C", BUILDDIR, "--no-rebuild", "--destdir", DESTDIR, "--quiet"],
                       capture_output=True, text=True)
    check_eq(r.returncode, 0, f"meson install exit status (stderr: {r.stderr.strip()})")
    pc = installed_path("/libperfrelay.pc")
    lib = installed_path("/libperfrelay.so.0.1.0")
    header = installed_path("/client/lib/perfrelay.h")
    for path in (pc, lib, header, os.path.join(os.path.dirname(header), "event.h")):
        check(os.path.isfile(DESTDIR + path), f"{path} installed into the DESTDIR")
    check(os.path.islink(DESTDIR + os.path.join(os.path.dirname(lib), "libperfrelay.so.0")), "soname link installed")
    state["pcdir"] = DESTDIR + os.path.dirname(pc)
    state["libdir"] = DESTDIR + os.path.dirname(lib)


def test_build_with_pkg_config():
    # Only the DESTDIR's .pc directory is added, and the sysroot makes its paths point into
    # the DESTDIR; the build tree is nowhere on the command line or in the environment.
    env = dict(os.environ, PKG_CONFIG_SYSROOT_DIR=DESTDIR, PKG_CONFIG_PATH=state["pcdir"])
    for var in ("CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH", "LD_LIBRARY_PATH", "PKG_CONFIG_LIBDIR"):
        env.pop(var, None)
    r = subprocess.run(["pkg-config", "--cflags", "--libs", "libperfrelay"], capture_output=True, text=True, env=env)
    check_eq(r.returncode, 0, f"pkg-config exit status (stderr: {r.stderr.strip()})")
    flags = shlex.split(r.stdout)
    check("-lperfrelay" in flags, f"-lperfrelay in {flags}")
    for flag in flags:
        if flag.startswith(("-I", "-L")):
            check(flag[2:].startswith(DESTDIR), f"{flag} points into the DESTDIR")
    check(any(f.startswith("-I") for f in flags) and any(f.startswith("-L") for f in flags),
          f"pkg-config gives the DESTDIR's include and library directories: {flags}")

    r = subprocess.run(["cc", "-Wall", "-Werror", "-o", PROG, SOURCE] + flags, capture_output=True, text=True,
                       env=env, cwd=WORK)
    check_eq(r.returncode, 0, f"cc exit status (stderr: {r.stderr.strip()})")
    r = subprocess.run(["readelf", "-d", PROG], capture_output=True, text=True, check=True)
    check("libperfrelay.so.0" in r.stdout, "the program needs libperfrelay.so.0")
    check("RPATH" not in r.stdout and "RUNPATH" not in r.stdout, "no rpath: the library comes from LD_LIBRARY_PATH")


def run_client(fmt):
    marker = f"perfrelay-pkgconfig-marker-{fmt}-{os.getpid()}"
    env = dict(os.environ, LD_LIBRARY_PATH=state["libdir"], MARKER=marker)
    p = subprocess.Popen([PROG, SOCK, fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    lines = []
    ready = threading.Event()

    def read():
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("READY"):
                ready.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        check(ready.wait(30), f"{fmt} client subscribed (output so far: {lines})")
        # The marker runs in its own process; repeated until the client has seen one, so a
        # slow first delivery cannot make the test flaky, while a client that never gets
        # one still fails.
        pids = []
        deadline = time.monotonic() + 30
        while p.poll() is None and time.monotonic() < deadline:
            m = subprocess.Popen(["/bin/true", marker])
            m.wait()
            pids.append(m.pid)
            time.sleep(0.2)
        rc = p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    t.join(5)
    stderr = p.stderr.read()
    check_eq(rc, 0, f"{fmt} client exit status (stdout: {lines}, stderr: {stderr.strip()})")
    libs = [line[4:] for line in lines if line.startswith("LIB ")]
    check_eq(len(libs), 1, "the client reports the library it loaded")
    check(os.path.realpath(libs[0]).startswith(os.path.realpath(state["libdir"]) + "/"),
          f"the installed copy was loaded, not the build tree's: {libs[0]}")
    got = [int(line.split()[1]) for line in lines if line.startswith("GOT ")]
    check_eq(len(got), 1, "one GOT line")
    check(got[0] in pids, f"the exec event is one of the marker's ({got[0]} in {pids})")


def test_json_client():
    run_client("json")


def test_binary_client():
    run_client("binary")


if __name__ == "__main__":
    main(__file__)
