#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The kernels suite (docs/kernels.md): boots Debian's own kernel packages under qemu with a
busybox initramfs that mounts the host's root read-only over 9p, and runs integration tests of
this build inside each guest. One result line per kernel and test; exit 77 when qemu, busybox or
no kernel package can be had."""
import concurrent.futures
import lzma
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from prtest import Failure, build_root, skip

BUILDDIR = build_root()
SRCDIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("PERFRELAY_KERNEL_CACHE", os.path.expanduser("~/.cache/perfrelay/kernels"))
# Each package: a kernel the project's users run. The archive keeps one ABI of a kernel at a time,
# so the newest matching package is picked. 5.10 is Debian 11's, from its own suites (SUITES),
# fetched through an apt state of this suite's own, never the machine's.
KERNELS = [("5.10", "linux-image-5.10.0-", r"^linux-image-5\.10\.0-\d+-amd64$"),
           ("6.1", "linux-image-6.1.0-", r"^linux-image-6\.1\.0-\d+-amd64$"),
           ("6.12", "linux-image-6.12.", r"^linux-image-6\.12\.\d+\+deb12-amd64$")]
SUITES = {"5.10": ["bullseye", "bullseye-security"]}
MIRROR = os.environ.get("PERFRELAY_DEBIAN_MIRROR", "http://deb.debian.org")
GUEST_TESTS = ["test_features", "test_pipeline", "test_restart", "test_accounting", "test_counters", "test_capture",
               "test_ancestry"]
BOOT_TIMEOUT = int(os.environ.get("PERFRELAY_KERNEL_BOOT_TIMEOUT", "900"))
KVM_BOOT_TIMEOUT = 30
KVM_FAILED = []  # the kernels KVM did not boot (boots run two at a time: a list is thread-safe)
# The 9p root, and for test_capture's interface capture a veth pair and tc's clsact qdisc and
# bpf classifier (Debian builds all of them as modules).
MODULES = ["virtio_pci", "9pnet_virtio", "9p", "veth", "sch_ingress", "cls_bpf"]


def read_module(path):
    """A module's bytes; newer Debian kernels ship them xz-compressed."""
    with open(path, "rb") as f:
        data = f.read()
    return lzma.decompress(data) if path.endswith(".xz") else data


def modinfo_depends(path):
    data = read_module(path)
    m = re.search(rb"depends=([^\0]*)\0", data)
    return [d for d in m.group(1).decode().split(",") if d] if m else []


def module_index(moddir):
    idx = {}
    for root, _, files in os.walk(moddir):
        for f in files:
            for ext in (".ko", ".ko.xz"):
                if f.endswith(ext):
                    idx[f[:-len(ext)].replace("-", "_")] = os.path.join(root, f)
    return idx


def module_order(idx, names, builtin):
    order, seen = [], set()

    def visit(n):
        n = n.replace("-", "_")
        if n in seen:
            return
        seen.add(n)
        if n not in idx:
            if n in builtin:
                return
            raise RuntimeError(f"module {n} is neither a module nor built in")
        for d in modinfo_depends(idx[n]):
            visit(d)
        order.append(idx[n])
    for n in names:
        visit(n)
    return order


def apt_env(suites):
    """The environment for apt-get and apt-cache: the machine's, or for other suites an apt
    configuration in CACHE of their own (sources, lists, archives), updated once a day."""
    if not suites:
        return None, None
    d = os.path.join(CACHE, "apt-" + suites[0])
    for sub in ("lists/partial", "cache/archives/partial"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    key = "/usr/share/keyrings/debian-archive-keyring.gpg"
    with open(os.path.join(d, "sources.list"), "w") as f:
        for suite in suites:
            archive = "debian-security" if suite.endswith("-security") else "debian"
            f.write(f"deb [signed-by={key}] {MIRROR}/{archive} {suite} main\n")
    with open(os.path.join(d, "apt.conf"), "w") as f:
        f.write(f'Dir::Etc::sourcelist "{d}/sources.list";\nDir::Etc::sourceparts "-";\n'
                f'Dir::State::Lists "{d}/lists";\nDir::Cache "{d}/cache";\n'
                # CACHE is under root's home, which apt's _apt user cannot enter.
                'APT::Sandbox::User "root";\n')
    env = dict(os.environ, APT_CONFIG=os.path.join(d, "apt.conf"))
    stamp = os.path.join(d, "updated")
    if not os.path.exists(stamp) or time.time() - os.path.getmtime(stamp) > 86400:
        r = subprocess.run(["apt-get", "update"], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            return None, f"apt-get update for {' '.join(suites)} failed: {r.stderr.strip()[-300:]}"
        open(stamp, "w").close()
    return env, None


def fetch_kernel(prefix, pattern, suites=None):
    """The newest package matching pattern, downloaded once into CACHE and unpacked there."""
    env, why = apt_env(suites)
    if why:
        return None, why
    r = subprocess.run(["apt-cache", "search", "--names-only", "^" + re.escape(prefix)], capture_output=True, text=True,
                       env=env)
    names = sorted({l.split()[0] for l in r.stdout.splitlines() if re.match(pattern, l.split()[0])},
                   key=lambda n: [int(x) for x in re.findall(r"\d+", n)])
    if not names:
        return None, "no package matches " + pattern
    pkg = names[-1]
    os.makedirs(CACHE, exist_ok=True)
    debs = [f for f in os.listdir(CACHE) if f.startswith(pkg + "_") and f.endswith(".deb")]
    if not debs:
        r = subprocess.run(["apt-get", "download", pkg], cwd=CACHE, capture_output=True, text=True, env=env)
        debs = [f for f in os.listdir(CACHE) if f.startswith(pkg + "_") and f.endswith(".deb")]
        if not debs:
            return None, f"apt-get download {pkg} failed: {r.stderr.strip()[-300:]}"
    root = os.path.join(CACHE, debs[0][:-4])
    if not os.path.isdir(os.path.join(root, "boot")):
        subprocess.run(["dpkg-deb", "-x", os.path.join(CACHE, debs[0]), root + ".tmp"], check=True)
        os.rename(root + ".tmp", root)
    return root, pkg


INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod /$m || echo "KERNELS: insmod $m failed"; done
mkdir -p /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /newroot || echo "KERNELS: 9p mount failed"
for d in tmp run var/tmp; do mount -t tmpfs tmpfs /newroot/$d; done
# The project's tree (and a build dir outside it) as shares of their own, mounted at their host
# paths after the tmpfs mounts: a checkout under /tmp (or on a file system of its own) would
# otherwise be hidden or missing in the guest.
{project_mounts}
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mount -t bpf bpf /newroot/sys/fs/bpf
mount -t tracefs tracefs /newroot/sys/kernel/tracing
mount -t cgroup2 cgroup2 /newroot/sys/fs/cgroup
ip link set lo up  # the connect checks use 127.0.0.1; -nic none leaves only lo
echo "KERNELS: booted $(uname -r)"
chroot /newroot /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp /bin/sh -c '{cmd}'
echo "KERNELS: done"
echo o > /proc/sysrq-trigger
sleep 30
"""


def project_shares():
    """(mount tag, host path) of the trees the guest needs at their own paths."""
    shares = [("project", SRCDIR)]
    if os.path.commonpath([SRCDIR, BUILDDIR]) != SRCDIR:
        shares.append(("projectbuild", BUILDDIR))
    return shares


def project_mounts():
    return "\n".join(f"mkdir -p /newroot{path} 2>/dev/null; mount -t 9p -o trans=virtio,version=9p2000.L,ro,"
                     f"msize=512000,cache=loose {tag} /newroot{path} || echo \"KERNELS: 9p mount of {path} failed\""
                     for tag, path in project_shares())


def build_initramfs(kroot, kver, work, cmd):
    ir = os.path.join(work, "initramfs")
    os.makedirs(os.path.join(ir, "bin"))
    for d in ("proc", "sys", "dev", "newroot"):
        os.makedirs(os.path.join(ir, d))
    shutil.copy("/bin/busybox", os.path.join(ir, "bin", "busybox"))
    moddir = os.path.join(kroot, "lib", "modules", kver)
    builtin = set()
    bi = os.path.join(moddir, "modules.builtin")
    if os.path.exists(bi):
        builtin = {os.path.basename(l.strip()).split(".ko")[0].replace("-", "_") for l in open(bi)}
    order = module_order(module_index(moddir), MODULES, builtin)
    names = []
    for p in order:
        name = os.path.basename(p).split(".ko")[0] + ".ko"
        with open(os.path.join(ir, name), "wb") as f:
            f.write(read_module(p))
        names.append(name)
    with open(os.path.join(ir, "modules.order"), "w") as f:
        f.write("\n".join(names) + "\n")
    with open(os.path.join(ir, "init"), "w") as f:
        f.write(INIT.replace("{project_mounts}", project_mounts()).replace("{cmd}", cmd))
    os.chmod(os.path.join(ir, "init"), 0o755)
    out = os.path.join(work, "initramfs.cpio")
    write_cpio(ir, out)
    return out


def write_cpio(src, out):
    """A newc archive of src (regular files and directories only), without needing cpio(1)."""
    ino = [0]

    def entry(f, name, mode, data):
        ino[0] += 1
        namez = name.encode() + b"\0"
        hdr = "070701" + "".join(f"{v:08x}" for v in (ino[0], mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0,
                                                        len(namez), 0))
        f.write(hdr.encode() + namez)
        f.write(b"\0" * ((4 - (110 + len(namez)) % 4) % 4))
        f.write(data)
        f.write(b"\0" * ((4 - len(data) % 4) % 4))
    with open(out, "wb") as f:
        for root, dirs, files in os.walk(src):
            rel = os.path.relpath(root, src)
            if rel != ".":
                entry(f, rel, 0o40755, b"")
            for n in sorted(files):
                path = os.path.join(root, n)
                with open(path, "rb") as g:
                    entry(f, os.path.normpath(os.path.join(rel, n)), 0o100000 | (os.stat(path).st_mode & 0o7777),
                          g.read())
        entry(f, "TRAILER!!!", 0, b"")


def run_guest(cmd, log, log_path, label, kvm):
    """Runs qemu until the guest powers off (BOOT_TIMEOUT at most). Under KVM a guest that has
    not booted within KVM_BOOT_TIMEOUT is stopped, for TCG to try: where KVM cannot run a stock
    kernel, qemu aborts at once for some (6.1) and hangs before the first line for others (5.10)."""
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    start = time.monotonic()
    try:
        while proc.poll() is None:
            elapsed = time.monotonic() - start
            if elapsed > BOOT_TIMEOUT:
                print(f"kernel {label}: no power-off within {BOOT_TIMEOUT}s")
                break
            if kvm and elapsed > KVM_BOOT_TIMEOUT and "KERNELS: booted" not in open(log_path, errors="replace").read():
                print(f"kernel {label}: kvm: not booted within {KVM_BOOT_TIMEOUT}s")
                break
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module", autouse=True)
def _tools():
    for tool in ("qemu-system-x86_64", "apt-get", "dpkg-deb"):
        if not shutil.which(tool):
            skip(f"{tool} is not installed (scripts/lib.sh installs qemu-system-x86 and busybox-static)")
    if subprocess.run(["dpkg-query", "-W", "-f=${Status}", "busybox-static"], capture_output=True,
                      text=True).stdout != "install ok installed":
        skip("busybox-static is not installed")
    if os.geteuid() != 0:
        skip("needs root (the guest runs the integration tests of this build as root)")


@pytest.fixture(scope="module")
def boots(request):
    """The selected kernels' boots, two at a time (a TCG guest is one host thread, and this suite
    runs alone): the suite takes about its slowest kernel's time, not their sum."""
    labels = {item.callspec.params["label"] for item in request.session.items
              if getattr(item, "originalname", None) == "test_kernel"}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1)))
    futures = {k[0]: pool.submit(boot_kernel, *k) for k in KERNELS if k[0] in labels}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("label", [k[0] for k in KERNELS])
def test_kernel(label, boots):
    """Boots the kernel and runs GUEST_TESTS in it: each must pass."""
    boots[label].result()


def boot_kernel(label, prefix, pattern):
    failed = []
    kroot, pkg = fetch_kernel(prefix, pattern, SUITES.get(label))
    if kroot is None:
        skip(f"kernel {label}: {pkg}")
    kver = os.listdir(os.path.join(kroot, "lib", "modules"))[0]
    work = tempfile.mkdtemp(prefix=f"perfrelay-kernel-{label}-")
    try:
        # Each test's exit status is echoed inside the pipe, so sed's status does not hide it.
        tests = " ; ".join(
            f"(PYTHONPATH={SRCDIR}/tests/lib python3 {SRCDIR}/tests/integration/{t}.py {BUILDDIR}/daemon/perfrelayd; "
            f"echo \"rc=$?\") 2>&1 | "
            f"sed \"s/^/GUEST {t}: /\""
            for t in GUEST_TESTS)
        # For debugging a kernel by hand: run this shell command in the guest instead.
        tests = os.environ.get("PERFRELAY_KERNEL_GUEST_CMD", tests)
        initrd = build_initramfs(kroot, kver, work, tests)
        log_path = os.path.join(BUILDDIR, "meson-logs", f"kernel-{label}.log")
        print(f"kernel {label}: booting {pkg}")
        # KVM when it works (it does not for stock guests on some hosts: qemu aborts at once),
        # TCG otherwise, single-threaded: with one host thread per vCPU, TCG lets a vCPU run
        # kernel text that another is patching (int3 text poking of a static key), and 6.12
        # Oopses in __schedule when a perf software event's key flips (docs/kernels.md).
        t0 = time.monotonic()
        for accel in (["-accel", "kvm", "-cpu", "host"], ["-accel", "tcg,thread=single", "-cpu", "max"]):
            # Where KVM failed one stock kernel, the kernels after it go straight to TCG.
            if accel[1] == "kvm" and (KVM_FAILED or not os.access("/dev/kvm", os.R_OK | os.W_OK)):
                continue
            t0 = time.monotonic()
            cmd = ["qemu-system-x86_64", *accel, "-m", "1536", "-smp", "2", "-nographic", "-no-reboot",
                   "-kernel", os.path.join(kroot, "boot", f"vmlinuz-{kver}"), "-initrd", initrd,
                   "-append", "console=ttyS0 panic=-1 quiet loglevel=3",
                   "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
                   *[a for tag, path in project_shares() for a in
                     ("-virtfs", f"local,path={path},mount_tag={tag},security_model=none,readonly=on,multidevs=remap")],
                   "-nic", "none"]
            with open(log_path, "w") as log:
                run_guest(cmd, log, log_path, label, accel[1] == "kvm")
            if "KERNELS: booted" in open(log_path, errors="replace").read():
                break
            print(f"kernel {label}: {accel[1].split(',')[0]} did not boot, see {log_path}")
            if accel[1] == "kvm":
                KVM_FAILED.append(label)
        print(f"kernel {label}: booted with {accel[1].split(',')[0]}")
        out = open(log_path, errors="replace").read()
        secs = time.monotonic() - t0
        results = {}
        for t in GUEST_TESTS:
            m = re.findall(rf"^GUEST {t}: rc=(\d+)", out, re.M)
            results[t] = int(m[-1]) if m else None
        for line in out.splitlines():
            if line.startswith("GUEST "):
                print(line)
        if "KERNELS: booted" not in out:
            raise Failure(f"kernel {label} ({pkg}) did not boot: see {log_path}")
        for t, rc in results.items():
            print(f"kernel {label} ({pkg}) {t}: {'PASS' if rc == 0 else 'FAIL'} (rc {rc}, {secs:.0f}s boot+tests)")
            if rc != 0:
                # pytest's summary lines name the failing tests and why: the failure quotes them
                # (the first 12), so that a CI log which keeps only its end still shows them.
                why = [l.split(": ", 1)[1] for l in out.splitlines()
                       if l.startswith(f"GUEST {t}: ") and re.match(r"(FAILED|ERROR|E  ) ", l.split(": ", 1)[1])][:12]
                failed.append(f"{t} (rc {rc}{': ' if why else ''}{'; '.join(why)})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        raise Failure(f"kernel {label} ({pkg}): {', '.join(failed)} failed in the guest, see {log_path}")
