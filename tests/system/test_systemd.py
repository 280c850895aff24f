#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelay under a real systemd, on Debian 12 and on Debian 13: the release's rootfs
(debootstrapped once, cached) with this tree built for that release (here, or in its build root,
nspawn.BuildRoot) and installed by `meson install --destdir`, booted with systemd-nspawn and
bpffs bound in; inside.py then checks the units, `systemd-analyze security`, socket activation,
the bus, reload, restart, SIGKILL, the watchdog, perfrelay-export.service against a nats-server
in the container, perfrelay-metrics.socket scraped, and stop. Skips (77) only where nspawn
cannot run at all."""
import functools
import os
import shutil
import subprocess
import sys

import pytest

import nspawn
from nspawn import run
from prtest import Failure, build_root, source_root

SOURCE, BUILD = source_root(), build_root()
HERE = os.path.dirname(os.path.abspath(__file__))
SYSBUILD = os.path.join(BUILD, "system-build")
PIN = f"/sys/fs/bpf/perfrelay-system-{os.getpid()}"


# Installed like a distribution package: /usr, /etc, units where systemd looks.
SETUP = ["--prefix=/usr", "--sysconfdir=/etc", "--localstatedir=/var", "--buildtype=debugoptimized",
         "-Dfault_injection=true"]


def install_build(release, c):
    """This tree, built for RELEASE, installed into the container's root: here for the machine's
    own release; for another, which links its own libraries, in that release's build root, with
    the tree, the build directory and the root bound in at fixed paths (meson keeps absolute ones)."""
    if release == nspawn.HOST_RELEASE:
        build, (src, out, dest), do = SYSBUILD, (SOURCE, SYSBUILD, c.root), run
    else:
        build, (src, out, dest) = f"{SYSBUILD}-{release}", ("/src", "/build", "/dest")
        os.makedirs(build, exist_ok=True)
        do = functools.partial(nspawn.BuildRoot(release, SOURCE).run,
                               binds=[f"{SOURCE}:{src}", f"{build}:{out}", f"{c.root}:{dest}"])
    if not os.path.exists(os.path.join(build, "build.ninja")):
        do("meson", "setup", *SETUP, out, src, stdout=subprocess.DEVNULL)
    do("meson", "compile", "-C", out, stdout=subprocess.DEVNULL)
    do("meson", "install", "-C", out, "--no-rebuild", "--destdir", dest, stdout=subprocess.DEVNULL)


def prepare_root(c):
    c.write("etc/perfrelay/perfrelay.conf.d/50-test.conf",
            f"# The system test's own pin root, beside any live daemon's\n[Daemon]\nPinPath={PIN}\n")
    c.write("etc/systemd/system/perfrelay.service.d/50-test.conf",
            "# The watchdog test waits for this, not for the default 30 s\n[Service]\nWatchdogSec=3s\n"
            "# The test's pin root, writable under ProtectKernelTunables= (docs/config.md, PinPath=)\n"
            f"ExecStartPre=-+/bin/mkdir -p {PIN}\nReadWritePaths=-{PIN}\n")
    shutil.copy("/bin/true", c.path("usr/local/bin/prsys-marker"))
    shutil.copy(os.path.join(HERE, "inside.py"), c.path("root/inside.py"))
    # inside.py's helpers are the tests' own (the package tests/lib/prtest: standard library only).
    shutil.copytree(os.path.join(os.path.dirname(HERE), "lib", "prtest"), c.path("root/prtest"),
                    ignore=shutil.ignore_patterns("__pycache__"))


@pytest.mark.parametrize("release", list(nspawn.RELEASES))
def test_units_under_systemd(container, release):
    c = None
    try:
        c = container(f"system-{release}", release)
        install_build(release, c)
        prepare_root(c)
        c.boot()
        os_release = c.run("sh", "-c", ". /etc/os-release && echo $VERSION_CODENAME").stdout.strip()
        if os_release != release:
            raise Failure(f"the {release} container runs {os_release!r}")
        print(f"{release}: {c.run('systemctl', '--version').stdout.splitlines()[0]}")
        # What meson installed, set up as a package's maintainer scripts would.
        for cmd in (["systemd-sysusers"], ["systemd-tmpfiles", "--create"], ["systemctl", "daemon-reload"],
                    ["systemctl", "reload", "dbus"]):
            r = c.run(*cmd)
            if r.returncode != 0:
                raise Failure(f"{' '.join(cmd)}: {r.stderr}")
        # inside.py runs its steps in the container (whose python has no pytest) and says which failed.
        r = c.run("python3", "/root/inside.py", PIN, timeout=600)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            raise Failure(f"inside.py exited with {r.returncode}: {r.stdout.strip().splitlines()[-1:]}")
    finally:
        # The links and maps the container's daemon pinned on the host's bpffs, once it is
        # down: a step that failed may have left it running, and --cleanup leaves the pins of
        # a live daemon alone (ci16 left them so).
        if c:
            c.__exit__(None, None, None)
        build_daemon = os.path.join(BUILD, "daemon", "perfrelayd")
        subprocess.run([build_daemon, "--pin-path", PIN, "--config", "/nonexistent/perfrelay.conf", "--cleanup"],
                       capture_output=True)
