# SPDX-License-Identifier: LGPL-2.1-or-later
"""Debian containers under a real systemd, for the system suite: a rootfs per release (Debian 12
"bookworm", Debian 13 "trixie") is debootstrapped once and cached; each test boots a copy with
systemd-nspawn, bpffs bound in, runs commands inside with nsenter and powers it off. A release
other than the machine's own also gets a build root (BuildRoot): that release with perfrelay's
build dependencies, in which the tree is built for it, since what this machine builds links this
machine's libraries. Skips (77) only where nspawn cannot run at all. Tests take containers as the
`container` fixture (tests/system/conftest.py)."""
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time

from prtest import skip

MIRROR = "http://deb.debian.org/debian"
# Each release's rootfs: the libraries perfrelay links, as the release names them (Debian 13 has
# the t64 libraries and nats.c 3.10), and what the tests use inside. bash-completion and man-db:
# the package test completes and reads pages as a user would.
COMMON = ("systemd,systemd-sysv,dbus,libbpf1,libjson-c5,zlib1g,bpftool,python3,nats-server,libnss-systemd,"
          "libprotobuf-c1,bash-completion,man-db")
RELEASES = {
    "bookworm": COMMON + ",libelf1,libnats3.4,libcurl4",
    "trixie": COMMON + ",libelf1t64,libnats3.10,libcurl4t64",
}
# The release this machine runs: its own builds are installed into its containers directly.
HOST_RELEASE = subprocess.run(["sh", "-c", ". /etc/os-release && echo \"$VERSION_CODENAME\""],
                              capture_output=True, text=True).stdout.strip()
# Rootfs and build roots are kept across runs and clones (a fresh CI clone would otherwise
# debootstrap them every time); a stamp names what each was made from, and a stale one is made again.
CACHE = os.environ.get("PERFRELAY_SYSTEM_CACHE", os.path.expanduser("~/.cache/perfrelay/system"))


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


def _stamp(what):
    return "perfrelay-rootfs-" + hashlib.sha256(what.encode()).hexdigest()[:12]


def _debootstrap(path, release, packages, stamp):
    """PATH: RELEASE debootstrapped with PACKAGES, unless it is there already with STAMP."""
    if os.path.exists(os.path.join(path, "etc", stamp)):
        return path
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    print(f"debootstrapping {release} into {path} (once; cached)", flush=True)
    run("debootstrap", "--variant=minbase", f"--include={packages}", release, tmp, MIRROR, stdout=subprocess.DEVNULL)
    open(os.path.join(tmp, "etc", stamp), "w").close()
    os.rename(tmp, path)
    return path


def ensure_rootfs(release):
    return _debootstrap(os.path.join(CACHE, f"rootfs-{release}"), release, RELEASES[release],
                        _stamp(release + RELEASES[release]))


def nspawn_command(root, *cmd, binds=()):
    """CMD run once in ROOT under systemd-nspawn (no init: /proc, /sys and /dev set up, the
    machine's network), with BINDS ("HOST:INSIDE" or "HOST")."""
    args = ["systemd-nspawn", "-q", "-D", root, "--register=no", "--keep-unit", "--setenv=DEBIAN_FRONTEND=noninteractive"]
    args += [f"--bind={b}" for b in binds]
    return args + ["--"] + list(cmd)


class BuildRoot:
    """RELEASE with perfrelay's build dependencies (apt-get build-dep of debian/control, so the
    list is the package's own), cached like the rootfs; a second stamp covers debian/control."""

    def __init__(self, release, source):
        self.release = release
        self.root = os.path.join(CACHE, f"buildroot-{release}")
        with open(os.path.join(source, "debian", "control")) as f:
            stamp = _stamp(release + f.read())
        if not os.path.exists(os.path.join(self.root, "etc", stamp)):
            # A root made for another debian/control gets the new build dependencies added.
            _debootstrap(self.root, release, "dpkg-dev,debhelper,fakeroot,ca-certificates", _stamp(release))
            control = os.path.join(self.root, "var", "tmp", "control")
            os.makedirs(control + "/debian", exist_ok=True)
            shutil.copy(os.path.join(source, "debian", "control"), control + "/debian/control")
            print(f"installing perfrelay's build dependencies into {self.root}", flush=True)
            run(*nspawn_command(self.root, "sh", "-c", "apt-get update -q && apt-get build-dep -y -q /var/tmp/control"),
                stdout=subprocess.DEVNULL)
            shutil.rmtree(control)
            open(os.path.join(self.root, "etc", stamp), "w").close()

    def run(self, *cmd, binds=(), **kw):
        kw.setdefault("check", True)
        return subprocess.run(nspawn_command(self.root, *cmd, binds=binds), **kw)


class Container:
    """A booted copy of the rootfs. Use as a context manager: the copy is removed at exit."""

    def __init__(self, name, release="bookworm"):
        self.release = release
        self.rootfs = ensure_rootfs(release)
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
