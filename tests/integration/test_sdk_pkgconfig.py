#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The producer SDK as an outside project gets it: `meson install` into a temporary DESTDIR, then a
BPF producer outside the repository (the example's sources copied to a temporary directory, with
its own vmlinux.h) compiled with nothing but `pkg-config --cflags perfrelay-producer` against that
copy; its object carries PERFRELAY_RECORD()'s BTF declaration tags, which is what perfrelayd reads."""
import os
import shlex
import shutil
import subprocess

import pytest

from prtest import check, check_eq, daemon_binary, main, skip

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
SRCDIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(SRCDIR, "examples", "producer")

for tool in ("meson", "pkg-config", "clang", "bpftool"):
    if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
        skip(f"{tool} not found")
if not os.path.exists("/sys/kernel/btf/vmlinux"):
    skip("no /sys/kernel/btf/vmlinux to make the outside project's vmlinux.h from")
BPFTOOL = shutil.which("bpftool") or "/usr/sbin/bpftool"

state = {}


@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf, workdir):
    # root for `meson install` of the whole project, if only into a DESTDIR
    global WORK, DESTDIR, PROJECT
    WORK = workdir
    DESTDIR = os.path.join(WORK, "destdir")
    PROJECT = os.path.join(WORK, "project")


def test_install():
    r = subprocess.run(["meson", "install", "-C", BUILDDIR, "--no-rebuild", "--destdir", DESTDIR, "--quiet"],
                       capture_output=True, text=True)
    check_eq(r.returncode, 0, f"meson install exit status (stderr: {r.stderr.strip()})")
    pcs = [os.path.join(root, f) for root, _, files in os.walk(DESTDIR) for f in files
           if f == "perfrelay-producer.pc"]
    check_eq(len(pcs), 1, "perfrelay-producer.pc installed once")
    state["pcdir"] = os.path.dirname(pcs[0])


def test_build_outside_the_repository():
    env = dict(os.environ, PKG_CONFIG_SYSROOT_DIR=DESTDIR, PKG_CONFIG_PATH=state["pcdir"])
    for var in ("CPATH", "C_INCLUDE_PATH", "PKG_CONFIG_LIBDIR"):
        env.pop(var, None)
    r = subprocess.run(["pkg-config", "--cflags", "perfrelay-producer"], capture_output=True, text=True, env=env)
    check_eq(r.returncode, 0, f"pkg-config exit status (stderr: {r.stderr.strip()})")
    flags = shlex.split(r.stdout)
    incs = [f for f in flags if f.startswith("-I")]
    check(incs, f"pkg-config gives an include directory: {flags}")
    for flag in incs:
        check(flag[2:].startswith(DESTDIR), f"{flag} points into the DESTDIR")
        for h in ("event.h", "producer.bpf.h"):
            check(os.path.isfile(os.path.join(flag[2:], "perfrelay", h)), f"perfrelay/{h} under {flag}")

    os.makedirs(PROJECT)
    for f in ("example.bpf.c", "example.h"):
        shutil.copy(os.path.join(EXAMPLE, f), PROJECT)
    with open(os.path.join(PROJECT, "vmlinux.h"), "w") as out:
        subprocess.run([BPFTOOL, "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "c"],
                       stdout=out, check=True)
    arch = {"x86_64": "x86", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    obj = os.path.join(PROJECT, "example.bpf.o")
    r = subprocess.run(["clang", "-g", "-O2", "-target", "bpf", f"-D__TARGET_ARCH_{arch}", "-Wall", "-Werror",
                        "-I", PROJECT] + flags + ["-c", "example.bpf.c", "-o", obj],
                       capture_output=True, text=True, env=env, cwd=PROJECT)
    check_eq(r.returncode, 0, f"clang exit status (stderr: {r.stderr.strip()})")
    r = subprocess.run([BPFTOOL, "btf", "dump", "file", obj], capture_output=True, text=True, check=True)
    check("DECL_TAG 'perfrelay.type=0x8001'" in r.stdout, "the object declares record type 0x8001")
    check("DECL_TAG 'perfrelay.name=example'" in r.stdout, "the object names the record type 'example'")
    check("STRUCT 'example_rec' size=112" in r.stdout, "the record struct is in the object's BTF")


if __name__ == "__main__":
    main(__file__)
