#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelay under a real systemd: a Debian 12 rootfs (debootstrapped once, cached in the build
tree) with this build installed by `meson install --destdir`, booted with systemd-nspawn and
bpffs bound in; inside.py then checks socket activation, the bus, reload, restart, SIGKILL,
the watchdog, perfrelay-export.service against a nats-server in the container,
perfrelay-metrics.socket scraped, and stop. Skips (77) only where nspawn cannot run at all."""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SOURCE, BUILD = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOTFS = os.path.join(BUILD, "system-rootfs")
# The stamp names the package list: a cached rootfs made from another list is made again.
PACKAGES = ("systemd,systemd-sysv,dbus,libbpf1,libjson-c5,libelf1,zlib1g,bpftool,python3,libnats3.4,nats-server,libnss-systemd,"
            "libcurl4,libprotobuf-c1")
STAMP = "perfrelay-rootfs-" + hashlib.sha256(PACKAGES.encode()).hexdigest()[:12]
SYSBUILD = os.path.join(BUILD, "system-build")
PIN = f"/sys/fs/bpf/perfrelay-system-{os.getpid()}"


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


def run(*args, **kw):
    kw.setdefault("check", True)
    return subprocess.run(list(args), **kw)


if os.geteuid() != 0:
    skip("needs root (debootstrap, systemd-nspawn, BPF)")
for tool in ("systemd-nspawn", "debootstrap", "nsenter"):
    if not shutil.which(tool):
        skip(f"{tool} is not installed")
if not os.path.ismount("/sys/fs/bpf"):
    skip("bpffs is not mounted")


def ensure_rootfs():
    stamp = os.path.join(ROOTFS, "etc", STAMP)
    if os.path.exists(stamp):
        return
    tmp = ROOTFS + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(ROOTFS, ignore_errors=True)
    print("debootstrapping the Debian 12 rootfs (once; cached in the build tree)", flush=True)
    run("debootstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm", tmp,
        "http://deb.debian.org/debian", stdout=subprocess.DEVNULL)
    open(os.path.join(tmp, "etc", STAMP), "w").close()
    os.rename(tmp, ROOTFS)


def build_for_usr():
    # Installed like a distribution package: /usr, /etc, units where systemd looks.
    if not os.path.exists(os.path.join(SYSBUILD, "build.ninja")):
        run("meson", "setup", "--prefix=/usr", "--sysconfdir=/etc", "--localstatedir=/var",
            "--buildtype=debugoptimized", "-Dfault_injection=true", SYSBUILD, SOURCE, stdout=subprocess.DEVNULL)
    run("meson", "compile", "-C", SYSBUILD, stdout=subprocess.DEVNULL)


def prepare_root(root):
    run("cp", "-a", "--reflink=auto", ROOTFS + "/.", root)
    run("meson", "install", "-C", SYSBUILD, "--no-rebuild", "--destdir", root, stdout=subprocess.DEVNULL)
    with open(os.path.join(root, "etc/perfrelay/perfrelay.conf.d/50-test.conf"), "w") as f:
        f.write(f"# The system test's own pin root, beside any live daemon's\n[Daemon]\nPinPath={PIN}\n")
    os.makedirs(os.path.join(root, "etc/systemd/system/perfrelay.service.d"), exist_ok=True)
    with open(os.path.join(root, "etc/systemd/system/perfrelay.service.d/50-test.conf"), "w") as f:
        f.write("# The watchdog test waits for this, not for the default 30 s\n[Service]\nWatchdogSec=3s\n"
                "# The test's pin root, writable under ProtectKernelTunables= (docs/config.md, PinPath=)\n"
                f"ExecStartPre=-+/bin/mkdir -p {PIN}\nReadWritePaths=-{PIN}\n")
    shutil.copy("/bin/true", os.path.join(root, "usr/local/bin/prsys-marker"))
    shutil.copy(os.path.join(HERE, "inside.py"), os.path.join(root, "root/inside.py"))
    with open(os.path.join(root, "etc/hostname"), "w") as f:
        f.write("perfrelay-test\n")


def container_init(nspawn):
    """PID 1 of the container: the child of systemd-nspawn."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if nspawn.poll() is not None:
            return None
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == nspawn.pid:
                            return int(pid)
                except (OSError, ValueError, IndexError):
                    pass
        time.sleep(0.1)
    return None


def inside(init, *args, **kw):
    return subprocess.run(["nsenter", "-t", str(init), "-m", "-u", "-i", "-n", "-p", "--"] + list(args),
                          capture_output=True, text=True, **kw)


def main():
    ensure_rootfs()
    build_for_usr()
    root = tempfile.mkdtemp(prefix="perfrelay-system-", dir="/var/tmp")
    log_path = os.path.join(root + ".console.log")
    nspawn = None
    try:
        prepare_root(root)
        with open(log_path, "w") as log:
            nspawn = subprocess.Popen(
                ["systemd-nspawn", "-q", "-D", root, "-b", "--keep-unit", "--register=no",
                 f"--machine=perfrelay-test-{os.getpid()}", "--bind=/sys/fs/bpf", "--bind-ro=/sys/kernel/tracing",
                 "--capability=CAP_BPF,CAP_PERFMON", "--system-call-filter=bpf perf_event_open"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        init = container_init(nspawn)
        if init is None:
            with open(log_path) as f:
                skip(f"systemd-nspawn cannot run here: {f.read()[-800:]}")
        deadline = time.monotonic() + 120
        while True:
            st = inside(init, "systemctl", "is-system-running").stdout.strip()
            if st in ("running", "degraded"):
                break
            if time.monotonic() > deadline or nspawn.poll() is not None:
                with open(log_path) as f:
                    raise SystemExit(f"FAIL: the container did not boot ({st!r}):\n{f.read()[-2000:]}")
            time.sleep(0.2)
        # What meson installed, set up as a package's maintainer scripts would.
        for cmd in (["systemd-sysusers"], ["systemd-tmpfiles", "--create"], ["systemctl", "daemon-reload"],
                    ["systemctl", "reload", "dbus"]):
            r = inside(init, *cmd)
            if r.returncode != 0:
                raise SystemExit(f"FAIL: {' '.join(cmd)}: {r.stderr}")
        r = inside(init, "python3", "/root/inside.py", PIN, timeout=600)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        return r.returncode
    finally:
        if nspawn is not None and nspawn.poll() is None:
            init = container_init(nspawn)
            if init:
                inside(init, "systemctl", "poweroff")
            try:
                nspawn.wait(60)
            except subprocess.TimeoutExpired:
                nspawn.send_signal(signal.SIGKILL)
                nspawn.wait()
        # The links and maps the container's daemon pinned on the host's bpffs.
        build_daemon = os.path.join(BUILD, "daemon", "perfrelayd")
        subprocess.run([build_daemon, "--pin-path", PIN, "--config", "/nonexistent/perfrelay.conf", "--cleanup"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
        if os.path.exists(log_path):
            os.unlink(log_path)


sys.exit(main())
