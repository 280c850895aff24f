# SPDX-License-Identifier: LGPL-2.1-or-later
"""A Debian 12 container under a real systemd, for the system suite: the rootfs is
debootstrapped once and cached in the build tree; each test boots a copy with systemd-nspawn,
bpffs bound in, runs commands inside with nsenter and powers it off. Skips (77) only where
nspawn cannot run at all. Tests take it as the `container` fixture (tests/system/conftest.py)."""
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time

from prtest import skip

# The stamp names the package list: a cached rootfs made from another list is made again.
# bash-completion and man-db: the package test completes and reads pages as a user would.
PACKAGES = ("systemd,systemd-sysv,dbus,libbpf1,libjson-c5,libelf1,zlib1g,bpftool,python3,libnats3.4,nats-server,libnss-systemd,"
            "libcurl4,libprotobuf-c1,bash-completion,man-db")
STAMP = "perfrelay-rootfs-" + hashlib.sha256(PACKAGES.encode()).hexdigest()[:12]


def run(*args, **kw):
    kw.setdefault("check", True)
    return subprocess.run(list(args), **kw)


def require():
    if os.geteuid() != 0:
        skip("needs root (debootstrap, systemd-nspawn, BPF)")
    for tool in ("systemd-nspawn", "debootstrap", "nsenter"):
        if not shutil.which(tool):
            skip(f"{tool} is not installed")
    if not os.path.ismount("/sys/fs/bpf"):
        skip("bpffs is not mounted")


def ensure_rootfs(build):
    rootfs = os.path.join(build, "system-rootfs")
    if os.path.exists(os.path.join(rootfs, "etc", STAMP)):
        return rootfs
    tmp = rootfs + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(rootfs, ignore_errors=True)
    print("debootstrapping the Debian 12 rootfs (once; cached in the build tree)", flush=True)
    run("debootstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm", tmp,
        "http://deb.debian.org/debian", stdout=subprocess.DEVNULL)
    open(os.path.join(tmp, "etc", STAMP), "w").close()
    os.rename(tmp, rootfs)
    return rootfs


class Container:
    """A booted copy of the rootfs. Use as a context manager: the copy is removed at exit."""

    def __init__(self, build, name):
        self.rootfs = ensure_rootfs(build)
        self.root = tempfile.mkdtemp(prefix=f"perfrelay-{name}-", dir="/var/tmp")
        self.name = f"perfrelay-{name}-{os.getpid()}"
        self.log_path = self.root + ".console.log"
        self.nspawn = None
        self.init = None
        run("cp", "-a", "--reflink=auto", self.rootfs + "/.", self.root)

    def path(self, rel):
        return os.path.join(self.root, rel.lstrip("/"))

    def write(self, rel, text, mode=None):
        os.makedirs(os.path.dirname(self.path(rel)), exist_ok=True)
        with open(self.path(rel), "w") as f:
            f.write(text)
        if mode is not None:
            os.chmod(self.path(rel), mode)

    def _container_init(self):
        """PID 1 of the container: the child of systemd-nspawn."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.nspawn.poll() is not None:
                return None
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        with open(f"/proc/{pid}/stat") as f:
                            if int(f.read().rsplit(")", 1)[1].split()[1]) == self.nspawn.pid:
                                return int(pid)
                    except (OSError, ValueError, IndexError):
                        pass
            time.sleep(0.1)
        return None

    def boot(self):
        with open(self.path("etc/hostname"), "w") as f:
            f.write("perfrelay-test\n")
        with open(self.log_path, "w") as log:
            self.nspawn = subprocess.Popen(
                ["systemd-nspawn", "-q", "-D", self.root, "-b", "--keep-unit", "--register=no",
                 f"--machine={self.name}", "--bind=/sys/fs/bpf", "--bind-ro=/sys/kernel/tracing",
                 "--capability=CAP_BPF,CAP_PERFMON", "--system-call-filter=bpf perf_event_open"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.init = self._container_init()
        if self.init is None:
            with open(self.log_path) as f:
                skip(f"systemd-nspawn cannot run here: {f.read()[-800:]}")
        deadline = time.monotonic() + 120
        while True:
            st = self.run("systemctl", "is-system-running").stdout.strip()
            if st in ("running", "degraded"):
                return
            if time.monotonic() > deadline or self.nspawn.poll() is not None:
                with open(self.log_path) as f:
                    raise SystemExit(f"FAIL: the container did not boot ({st!r}):\n{f.read()[-2000:]}")
            time.sleep(0.2)

    def run(self, *args, **kw):
        """A command inside the container (its mount, UTS, IPC, network and PID namespaces)."""
        return subprocess.run(["nsenter", "-t", str(self.init), "-m", "-u", "-i", "-n", "-p", "--"] + list(args),
                              capture_output=True, text=True, **kw)

    def popen(self, *args, **kw):
        return subprocess.Popen(["nsenter", "-t", str(self.init), "-m", "-u", "-i", "-n", "-p", "--"] + list(args),
                                **kw)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.nspawn is not None and self.nspawn.poll() is None:
            init = self._container_init()
            if init:
                self.init = init
                self.run("systemctl", "poweroff")
            try:
                self.nspawn.wait(60)
            except subprocess.TimeoutExpired:
                self.nspawn.send_signal(signal.SIGKILL)
                self.nspawn.wait()
        shutil.rmtree(self.root, ignore_errors=True)
        if os.path.exists(self.log_path):
            os.unlink(self.log_path)
        return False
