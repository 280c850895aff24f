#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Who may see and who may act (docs/security.md, the table "Who can see and do what"): each role
tries each method on a private bus. Roles: nobody, a member of a group the config does not name
(as a member of group perfrelay is), an AllowGroups= member, two ControlGroups= members, root.
Seeing is not acting: only root and ControlGroups= members take snapshots and start captures;
capturing the whole host (the root cgroup) needs root unless AllowHostCaptures=yes; only the
requester or root stops a capture."""
import os
import shutil
import subprocess
import sys
import tempfile

from busclient import BusPeer, as_user
from prtest import Daemon, check, check_eq, cgroup2_mount, require_root_and_bpf, run_tests, skip
from statsbus import StatsBus, wait_for

BINARY = sys.argv[1]
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
HELPER_BUILT = os.path.join(BUILDDIR, "tests", "integration", "bus-subscriber")

require_root_and_bpf()
for tool in ("dbus-daemon", "busctl", "setpriv"):
    if not shutil.which(tool):
        skip(f"{tool} is not installed (scripts/lib.sh installs dbus and util-linux)")
if cgroup2_mount() is None:
    skip("no cgroup2 mount (captures attach to a cgroup)")

ALLOWED_GID, CONTROL_GID, OTHER_GID = 4301, 4302, 4300
ROLES = {
    "nobody": "nobody",
    # System accounts every Debian has (dbus-daemon refuses uids without an account), each in a
    # test group that no account needs:
    "member": f"lp+{OTHER_GID}",         # in a group the config does not name (like perfrelay)
    "allowed": f"mail+{ALLOWED_GID}",    # AllowGroups=
    "control": f"daemon+{CONTROL_GID}",  # ControlGroups=
    "control2": f"bin+{CONTROL_GID}",    # another ControlGroups= member
    "root": None,
}
bus = StatsBus(BINARY)
os.chmod(bus.dir, 0o755)  # the private bus's socket, reachable for every role
d = Daemon(BINARY, "access", stdout=False,
           config=f"[Probes]\nProbes=none\n[Socket]\nAllowGroups={ALLOWED_GID}\nControlGroups={CONTROL_GID}\n")
WORK = tempfile.mkdtemp(prefix="perfrelay-access-")
os.chmod(WORK, 0o755)
HELPER = os.path.join(WORK, "bus-subscriber")
shutil.copy(HELPER_BUILT, HELPER)
MANAGER = ("org.perfrelay1", "/org/perfrelay1", "org.perfrelay1.Manager")


def busctl(role, *args):
    return subprocess.run(as_user(ROLES[role], ["busctl", f"--address={bus.address}", *args]),
                          capture_output=True, text=True, timeout=30)


def peer(role):
    """A connection of that role that stays on the bus (a capture lives as long as its requester)."""
    return BusPeer(HELPER, bus.address, user=ROLES[role], subscribe=False)


def start_capture(p, options):
    return p.command(f"call StartCapture A {options}", "StartCapture")


def active():
    return {c["id"] for c in bus.stats()["capture"]["captures"] if c["active"]}


def test_snapshot_and_capture_by_role():
    d.start()
    cg = os.path.join(cgroup2_mount(), f"perfrelay-access-{os.getpid()}.service")
    os.mkdir(cg)
    peers = {role: peer(role) for role in ROLES}
    try:
        for role, p in peers.items():
            rep = p.command("call Snapshot A -", "Snapshot")
            if role in ("control", "control2", "root"):
                check_eq(rep["error"], None, f"{role} takes a snapshot ({rep})")
            else:
                check(rep["error"] == "org.freedesktop.DBus.Error.AccessDenied" and
                      "needs root or a group of ControlGroups=" in rep["message"], f"{role} may not take a snapshot: {rep}")

        paths = {}
        for role, p in peers.items():
            rep = start_capture(p, f"cgroup=/{os.path.basename(cg)}")
            if role in ("control", "root"):
                check(rep["error"] is None and rep.get("path"), f"{role} starts a capture: {rep}")
                paths[role] = rep["path"]
            elif role == "control2":
                check(rep["error"] is None, f"control2 starts a capture: {rep}")
                paths[role] = rep["path"]
            else:
                check_eq(rep["error"], "org.freedesktop.DBus.Error.AccessDenied", f"{role} may not capture ({rep})")
        check_eq(len(active()), 3, "three captures run (control, control2, root)")

        # The whole host: root only, unless AllowHostCaptures=yes.
        rep = start_capture(peers["control"], "cgroup=/")
        check(rep["error"] == "org.freedesktop.DBus.Error.AccessDenied" and "AllowHostCaptures" in rep["message"],
              f"a ControlGroups= member may not capture the root cgroup: {rep}")
        rep = start_capture(peers["root"], "cgroup=/")
        check(rep["error"] is None, f"root captures the root cgroup: {rep}")
        check_eq(peers["root"].command(f"call StopCapture o {rep['path']}", "StopCapture")["error"], None,
                 "root stops it")

        # Only the requester or root stops a capture.
        for role in ("nobody", "member", "allowed", "control2"):
            rep = peers[role].command(f"call StopCapture o {paths['control']}", "StopCapture")
            check_eq(rep["error"], "org.freedesktop.DBus.Error.AccessDenied",
                     f"{role} may not stop control's capture ({rep})")
        check_eq(len(active()), 3, "the three captures still run")
        check_eq(peers["control"].command(f"call StopCapture o {paths['control']}", "StopCapture")["error"], None,
                 "the requester stops its capture")
        check_eq(peers["root"].command(f"call StopCapture o {paths['control2']}", "StopCapture")["error"], None,
                 "root stops another's capture")
        check_eq(len(active()), 1, "root's own capture is left")

        with open(d.config_path, "a") as f:
            f.write("[Capture]\nAllowHostCaptures=yes\n")
        check_eq(busctl("root", "call", *MANAGER, "Reload").returncode, 0, "Reload")
        rep = start_capture(peers["control"], "cgroup=/")
        check(rep["error"] is None, f"with AllowHostCaptures=yes a ControlGroups= member captures the host: {rep}")
    finally:
        for p in peers.values():
            p.close()
        wait_for(lambda: not active(), "every capture ends with its requester", timeout=20)
        os.rmdir(cg)
    d.stop()


try:
    run_tests([test_snapshot_and_capture_by_role])
finally:
    d.cleanup()
    bus.close()
    shutil.rmtree(WORK, ignore_errors=True)
