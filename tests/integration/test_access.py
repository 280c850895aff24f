#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Who may see and who may act (docs/security.md, the table "Who can see and do what"): each role
tries each method on a private bus. Roles: nobody, a member of a group the config does not name
(as a member of group perfrelay is), an AllowGroups= member, two ControlGroups= members, root.
Seeing is not acting: only root and ControlGroups= members take snapshots and start captures;
capturing the whole host (the root cgroup) needs root unless AllowHostCaptures=yes; only the
requester or root stops a capture."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time

from prtest.busclient import BusPeer, as_user, busctl
import pytest

from prtest import (cgroup2_mount, check, check_eq, Daemon, daemon_binary, hold_connections, main, read_line,
                    skip, UnitCgroup, wait_for)

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
HELPER_BUILT = os.path.join(BUILDDIR, "tests", "integration", "bus-subscriber")

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
QUEUE_UID_BOUND, QUEUE_BOUND = 4 << 20, 24 << 20


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, stats_bus, workdir):
    global bus, WORK, HELPER
    bus = stats_bus
    os.chmod(bus.dir, 0o755)  # the private bus's socket, reachable for every role
    d = make_daemon("access", stdout=False, start=False,
                    config=f"[Probes]\nProbes=none\n[Socket]\nAllowGroups={ALLOWED_GID}\nControlGroups={CONTROL_GID}\n"
                           "[Counters]\nCounters=task-clock context-switches\nCountersIntervalMs=1000\n")
    d_probes = make_daemon("access-probes", stdout=False, config="[Probes]\nProbes=exec open\n", start=False)
    d_users = make_daemon("access-users", stdout=False, start=False,
                          config=f"[Probes]\nProbes=open\n[Socket]\nClientQueueBytes=1M\nMaxClients=1024\n"
                                 f"MaxClientsPerUid=64\nMaxQueueBytesPerUid={QUEUE_UID_BOUND}\n"
                                 f"MaxQueueBytes={QUEUE_BOUND}\nAllowGroups={ALLOWED_GID}\n")
    WORK = workdir
    HELPER = os.path.join(WORK, "bus-subscriber")
    shutil.copy(HELPER_BUILT, HELPER)
    return {"d": d, "d_probes": d_probes, "d_users": d_users}


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup["d"]


@pytest.fixture(scope="module", name="d_probes")
def _fixture_d_probes(_setup):
    return _setup["d_probes"]


@pytest.fixture(scope="module", name="d_users")
def _fixture_d_users(_setup):
    return _setup["d_users"]


MANAGER = ("org.perfrelay1", "/org/perfrelay1", "org.perfrelay1.Manager")


def as_role(role, *args):
    """busctl on this test's bus as `role`; its result, whatever it is."""
    return busctl(bus.address, *args, user=ROLES[role], check_rc=False)


def peer(role):
    """A connection of that role that stays on the bus (a capture lives as long as its requester)."""
    return BusPeer(HELPER, bus.address, user=ROLES[role], subscribe=False)


def start_capture(p, options):
    return p.command(f"call StartCapture A {options}", "StartCapture")


def active():
    return {c["id"] for c in bus.stats()["capture"]["captures"] if c["active"]}


def test_reads_limited_per_user(d):
    """GetStats() and the other reading methods cost the main loop a snapshot of the pinned maps
    each: a user's loop gets at most 100 a second (LimitsExceeded beyond, each refusal counted
    exactly), root none fewer."""
    d.start()
    p = peer("nobody")
    r = peer("root")
    try:
        before = bus.stats()["bus"]["reads_limited"]
        t0 = time.monotonic()
        replies = [p.command("call GetStats", "GetStats") for _ in range(400)]
        elapsed = time.monotonic() - t0
        ok = sum(1 for x in replies if x["error"] is None)
        refused = [x for x in replies if x["error"] is not None]
        check(all(x["error"] == "org.freedesktop.DBus.Error.LimitsExceeded" for x in refused),
              f"refusals say LimitsExceeded: {refused[:1]}")
        check(ok >= 100, f"the first 100 calls of a second are served: {ok}")
        # 100 per window of a second, a window starting at the first call after the last ended.
        check(ok <= 100 * (int(elapsed) + 1), f"at most 100 a second: {ok} in {elapsed:.2f} s")
        check_eq(bus.stats()["bus"]["reads_limited"] - before, len(refused), "each refusal counted")
        check(all(r.command("call GetStats", "GetStats")["error"] is None for _ in range(200)),
              "root is not limited")
        check_eq(bus.stats()["bus"]["reads_limited"] - before, len(refused), "root's calls were not refused")
    finally:
        p.close()
        r.close()
        d.stop()


def test_snapshot_and_capture_by_role(d):
    d.start()
    cg = os.path.join(cgroup2_mount(), f"perfrelay-access-{os.getpid()}.service")
    os.mkdir(cg)
    # A slice holds many units or sessions (/user.slice, /system.slice: the whole host in two).
    slice_cg = os.path.join(cgroup2_mount(), f"perfrelay-access-{os.getpid()}.slice")
    os.mkdir(slice_cg)
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

        # A capture's packet counters are a live rate of a unit's traffic: for those who see its
        # packets (root, AllowGroups=, ControlGroups=); GetStats' list of captures likewise.
        for role in peers:
            sees = role in ("allowed", "control", "control2", "root")
            r = as_role(role, "get-property", "org.perfrelay1", paths["root"], "org.perfrelay1.Capture", "Seen")
            check_eq(r.returncode == 0, sees, f"Seen of root's capture readable by {role}: {r.stderr.strip()}")
            r = as_role(role, "get-property", "org.perfrelay1", paths["root"], "org.perfrelay1.Capture", "Unit")
            check_eq(r.returncode, 0, f"what a capture watches is readable by {role}")
            rc, data = busctl_json(role, "call", *MANAGER, "GetStats")
            check_eq(len(data[0]["capture"]["data"]["captures"]["data"]) >= 3, sees,
                     f"GetStats' captures listed to {role}")

        # The whole host: root only, unless AllowHostCaptures=yes.
        rep = start_capture(peers["control"], "cgroup=/")
        check(rep["error"] == "org.freedesktop.DBus.Error.AccessDenied" and "AllowHostCaptures" in rep["message"],
              f"a ControlGroups= member may not capture the root cgroup: {rep}")
        rep = start_capture(peers["root"], "cgroup=/")
        check(rep["error"] is None, f"root captures the root cgroup: {rep}")
        check_eq(peers["root"].command(f"call StopCapture o {rep['path']}", "StopCapture")["error"], None,
                 "root stops it")
        rep = start_capture(peers["control"], f"cgroup=/{os.path.basename(slice_cg)}")
        check(rep["error"] == "org.freedesktop.DBus.Error.AccessDenied" and "AllowHostCaptures" in rep["message"],
              f"a ControlGroups= member may not capture a slice either: {rep}")
        rep = start_capture(peers["root"], f"cgroup=/{os.path.basename(slice_cg)}")
        check(rep["error"] is None, f"root captures a slice: {rep}")
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

        # Changing the daemon is root's alone, whatever group a caller is in.
        for role, p in peers.items():
            for line, method in (("call SetProbeEnabled sb exec false", "SetProbeEnabled"),
                                 ("call DisconnectClient t 999999", "DisconnectClient"), ("call Reload", "Reload")):
                rep = p.command(line, method)
                denied = rep["error"] == "org.freedesktop.DBus.Error.AccessDenied"
                check_eq(denied, role != "root", f"{method} by {role}: {rep}")

        with open(d.config_path, "a") as f:
            f.write("[Capture]\nAllowHostCaptures=yes\n")
        check_eq(as_role("root", "call", *MANAGER, "Reload").returncode, 0, "Reload")
        rep = start_capture(peers["control"], "cgroup=/")
        check(rep["error"] is None, f"with AllowHostCaptures=yes a ControlGroups= member captures the host: {rep}")
    finally:
        for p in peers.values():
            p.close()
        wait_for(lambda: not active(), "every capture ends with its requester", timeout=20)
        os.rmdir(cg)
        os.rmdir(slice_cg)
    d.stop()


def busctl_json(role, *args):
    r = as_role(role, "--json=short", *args)
    return r.returncode, (json.loads(r.stdout)["data"] if r.returncode == 0 and r.stdout.strip() else None)


def test_metadata_by_role(d):
    """Other users' uids, pids and filters (ListClients, GetStats' client_list, a monitor's
    Filter and its counters, which give the rate of its events) are for root and their owner; the
    totals are for everyone; a denial names no uid."""
    d.start()
    client = socket.socket(socket.AF_UNIX)
    client.connect(d.socket_path)
    client.sendall(b'{"subscribe":{"comm":["root-secret"]}}\n')
    check_eq(json.loads(read_line(client, 10))["type"], "hello", "root's socket client is subscribed")
    root_mon = BusPeer(HELPER, bus.address, "comm=root-secret")
    own = {role: BusPeer(HELPER, bus.address, f"comm={role}-own", user=ROLES[role]) for role in ("nobody", "allowed", "control")}
    try:
        for role in ROLES:
            rc, data = busctl_json(role, "call", *MANAGER, "ListClients")
            check_eq(rc, 0, f"{role} calls ListClients")
            uids = {c[1] for c in data[0]}
            if role == "root":
                check(0 in uids, f"root sees root's client: {data}")
            else:
                check(0 not in uids, f"{role} does not see root's client: {data}")
            rc, data = busctl_json(role, "call", *MANAGER, "GetStats")
            check_eq(rc, 0, f"{role} calls GetStats")
            stats = data[0]
            listed = {c["uid"]["data"] for c in stats["client_list"]["data"]}
            check_eq(0 in listed, role == "root", f"GetStats' client_list shows root's client to {role} only if root")
            check(stats["clients"]["data"]["connected"]["data"] >= 1, "the totals are for everyone")

            for prop in ("Filter", "EventsDelivered", "EventsDropped"):
                r = as_role(role, "get-property", "org.perfrelay1", root_mon.path, "org.perfrelay1.Monitor", prop)
                check_eq(r.returncode == 0, role == "root", f"root's monitor's {prop} readable by {role}: {r.stderr.strip()}")
                if role in own:
                    r = as_role(role, "get-property", "org.perfrelay1", own[role].path, "org.perfrelay1.Monitor", prop)
                    check(r.returncode == 0, f"{role} reads its own monitor's {prop}: {r}")
                    other = own["control" if role != "control" else "nobody"]
                    r = as_role(role, "get-property", "org.perfrelay1", other.path, "org.perfrelay1.Monitor", prop)
                    check(r.returncode != 0 and "uid" not in r.stderr, f"{role} does not read another user's {prop}: {r.stderr}")
            if role in own:
                r = as_role(role, "get-property", "org.perfrelay1", own[role].path, "org.perfrelay1.Monitor", "Filter")
                check(f"{role}-own" in r.stdout, f"{role}'s own Filter is its filter: {r}")
    finally:
        client.close()
        root_mon.close()
        for p in own.values():
            p.close()
    d.stop()


def test_unit_counters_by_role(d):
    """GetUnitCounters(): a user's own slice (user-UID.slice) for that user, every cgroup for root,
    AllowGroups= and ControlGroups= members; the figures are the interval's view, the same for
    every call until the next interval."""
    d.start()
    uid = int(subprocess.run(["id", "-u", "lp"], capture_output=True, text=True, check=True).stdout)
    users = UnitCgroup("acc-user", parent=f"user.slice/user-{uid}.slice", name=f"perfrelay-acc-{os.getpid()}.scope")
    system = UnitCgroup("acc-sys")
    burners = [u.popen([sys.executable, "-c", "while True: pass"]) for u in (users, system)]
    try:
        def units(role):
            rc, data = busctl_json(role, "call", *MANAGER, "GetUnitCounters")
            check_eq(rc, 0, f"{role} calls GetUnitCounters")
            return {u[0]: u[2] for u in data[0]}
        wait_for(lambda: {users.name, system.name} <= set(units("root")), "both cgroups counted", timeout=20)
        for role in ROLES:
            seen = set(units(role)) & {users.name, system.name}
            want = {users.name, system.name} if role in ("root", "allowed", "control", "control2") else \
                {users.name} if role == "member" else set()
            check_eq(seen, want, f"the test's cgroups that {role} (uid {uid} owns the scope) is shown")

        def intervals():
            return bus.stats()["counters"]["intervals"]
        for _ in range(20):
            before = intervals()
            a = units("root")
            time.sleep(0.2)  # the burners run on: a fresh read of the table would differ
            b = units("root")
            if intervals() == before:
                check_eq(a[system.name], b[system.name], "two calls within one interval get the same view")
                break
        else:
            check(False, "no two calls fell within one interval")
    finally:
        for p in burners:
            p.kill()
            p.wait()
        wait_for(lambda: all(not open(os.path.join(u.path, "cgroup.procs")).read().strip() for u in (users, system)),
                 "the burners left their cgroups")
        users.remove()
        system.remove()
    d.stop()


def test_processes_by_role(d):
    """ListProcesses() (perfrelayctl tree): every process for root, AllowGroups= and
    ControlGroups= members; a user's own processes for that user (the member role runs as lp);
    none of them for nobody, who has none. The table is seeded at start from the kernel's task
    list, so processes that are older than the daemon are there without a probe."""
    sleepers = {"root": subprocess.Popen(["sleep", "600"]),
                "member": subprocess.Popen(as_user(ROLES["member"], ["sleep", "600"]))}
    d.start()
    try:
        def pids(role):
            rc, data = busctl_json(role, "call", *MANAGER, "ListProcesses")
            check_eq(rc, 0, f"{role} calls ListProcesses")
            return {row[2]: row for row in data[0]}
        everyone = pids("root")
        lp = int(subprocess.run(["id", "-u", "lp"], capture_output=True, text=True, check=True).stdout)
        for who, p in sleepers.items():
            check(p.pid in everyone, f"{who}'s sleep ({p.pid}) is in the seeded table")
            check_eq(everyone[p.pid][4], "sleep", f"{who}'s sleep's comm")
        check_eq(everyone[sleepers["member"].pid][3], lp, "the member's sleep has lp's uid")
        for role in ROLES:
            seen = pids(role)
            want = set(sleepers) if role in ("root", "allowed", "control", "control2") else \
                {"member"} if role == "member" else set()
            check_eq({w for w, p in sleepers.items() if p.pid in seen}, want, f"the sleeps {role} is shown")
            if role in ("member", "nobody"):
                uid = lp if role == "member" else 65534
                check_eq({row[3] for row in seen.values()} - {uid}, set(), f"{role} sees only processes of uid {uid}")
    finally:
        for p in sleepers.values():
            p.kill()
            p.wait()
        d.stop()


NOBODY_CLIENT = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"subscribe":{"types":["exec","open"]}}\\n')
buf = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    buf += chunk
    while b"\\n" in buf:
        line, buf = buf.split(b"\\n", 1)
        print(line.decode(), flush=True)
        if json.loads(line).get("path") == sys.argv[2]:
            sys.exit(0)
"""


def test_setuid_events_are_not_the_callers(d_probes):
    """A set-uid program run by nobody has nobody's real uid and root's effective uid: its
    events (exec, open) carry both (euid) and reach root, not nobody's uid-scoped client, which
    still gets nobody's own events. A set-gid program and one with file capabilities keep
    nobody's uids, but the kernel hides them from nobody (non-dumpable): so does the daemon."""
    where = next(p for p in (WORK, os.path.dirname(os.path.abspath(BINARY)))
                 if not os.statvfs(p).f_flag & os.ST_NOSUID)
    setuid_cat = os.path.join(where, "prsetuidcat")
    setgid_cat = os.path.join(where, "prsetgidcat")
    filecap_cat = os.path.join(where, "prfilecapcat")
    plain_cat = os.path.join(where, "prplaincat")
    for path, mode in ((setuid_cat, 0o4755), (setgid_cat, 0o2755), (filecap_cat, 0o755), (plain_cat, 0o755)):
        shutil.copy("/bin/cat", path)
        os.chmod(path, mode)
    subprocess.run(["setcap", "cap_net_raw+ep", filecap_cat], check=True)
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    secret, secret_g, secret_c, own, done = (os.path.join(WORK, f"{n}-{tag}")
                                             for n in ("secret", "secretg", "secretc", "own", "done"))
    for path in (secret, secret_g, secret_c, own, done):
        with open(path, "w") as f:
            f.write("x\n")
        os.chmod(path, 0o644)
    d_probes.start()
    os.chmod(d_probes.dir, 0o755)
    os.chown(d_probes.socket_path, -1, 65534)  # the socket is 0660: nobody's group may connect
    root_client = socket.socket(socket.AF_UNIX)
    root_client.connect(d_probes.socket_path)
    root_client.sendall(b'{"subscribe":{"types":["open"]}}\n')
    root_client.settimeout(30)
    root_lines = root_client.makefile("rb")
    check_eq(json.loads(root_lines.readline())["type"], "hello", "root's client")
    nobody = subprocess.Popen(as_user("nobody", [sys.executable, "-c", NOBODY_CLIENT, d_probes.socket_path, done]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        check_eq(json.loads(nobody.stdout.readline())["type"], "hello", "nobody's client")
        saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(saved)})  # one CPU: one ring, events in order
        try:
            for cat, path in ((setuid_cat, secret), (setgid_cat, secret_g), (filecap_cat, secret_c),
                              (plain_cat, own), (plain_cat, done)):
                subprocess.run(as_user("nobody", [cat, path]), check=True, capture_output=True)
        finally:
            os.sched_setaffinity(0, saved)
        out, err = nobody.communicate(timeout=30)
        got = [json.loads(l) for l in out.splitlines()]
        opens = {e["path"]: e for e in got if e["type"] == "open"}
        check(own in opens and done in opens, f"nobody sees its own opens ({err.strip()})")
        check(secret not in opens, f"and not the set-uid program's open, run by itself: {opens.get(secret)}")
        check(secret_g not in opens, f"nor the set-gid program's (non-dumpable): {opens.get(secret_g)}")
        check(secret_c not in opens, f"nor the file-capability program's: {opens.get(secret_c)}")
        check_eq((opens[own]["uid"], opens[own].get("euid")), (65534, 65534), "its own open: uid and euid nobody")
        check(not any(e["type"] == "exec" and e.get("argv", [None, None])[1:2] == [secret] for e in got),
              "nor its exec")

        def root_saw(path):
            while True:
                e = json.loads(root_lines.readline())
                if e.get("path") == path:
                    return e
        e = root_saw(secret)
        check_eq((e["uid"], e["euid"]), (65534, 0), "root sees it, with the real and the effective uid")
        for path in (secret_g, secret_c):
            e = root_saw(path)
            check_eq((e["uid"], e["euid"]), (65534, 65534), "root sees the set-gid and file-capability opens")
    finally:
        if nobody.poll() is None:
            nobody.kill()
            nobody.wait()
        root_lines.close()
        root_client.close()
        for path in (setuid_cat, setgid_cat, filecap_cat, plain_cat):
            os.unlink(path)
    d_probes.stop()




def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))


def test_memory_per_user(d_users):
    """What users make the daemon hold is bounded per uid and for all of them together, on the
    socket and the bus as one: 64 clients of one uid that never read, then 64 from each of 16
    more uids (as a user's subordinate uids can), under a flood of events: the queues held stay
    within MaxQueueBytesPerUid= per uid and MaxQueueBytes= for the users' pool, the daemon's RSS
    grows by no more than that, and neither a member of AllowGroups= (the exporter's case) nor
    root is crowded out: their new subscribers are served."""
    d_users.start()
    os.chmod(d_users.dir, 0o755)
    os.chmod(d_users.socket_path, 0o666)  # every test uid may connect; the daemon decides
    request = {"subscribe": {"types": ["open"]}}
    base = rss(d_users.proc.pid)
    holders = []
    monitor = None
    try:
        one = hold_connections(d_users.socket_path, 64, request, uid="lp", gid="lp", groups=[ALLOWED_GID])
        holders.append(one)
        replies = json.loads(one.stdout.readline())
        users = bus.stats()["users"]
        kept = [r["type"] for r in replies].count("hello")
        check(kept > 0 and users["clients"] == kept, f"one uid's clients are charged: {users}")
        per_client = users["queue_bytes"] // kept
        check_eq(kept, QUEUE_UID_BOUND // per_client, f"as many as MaxQueueBytesPerUid= holds ({per_client} bytes each)")
        check_eq(users["refused_queue_bytes_per_uid"], 64 - kept, "the others refused and counted")
        check(all("MaxQueueBytesPerUid=" in r["message"] for r in replies if r["type"] == "error"),
              f"refused naming the limit: {replies[-1]}")
        # The bus is the same account: the uid has nothing left for a monitor.
        try:
            monitor = BusPeer(HELPER, bus.address, "types=open", user=f"lp+{ALLOWED_GID}")
            check(False, f"a bus monitor past the uid's queue bytes was refused: {monitor.path}")
        except Exception as e:
            check("LimitsExceeded" in str(e) and "MaxQueueBytesPerUid=" in str(e), f"the bus monitor is refused: {e}")

        check_eq((users["pool_clients"], users["pool_queue_bytes"]), (0, 0),
                 "a member of AllowGroups= is outside the users' pool")
        for uid in range(5001, 5017):
            holders.append(hold_connections(d_users.socket_path, 64, request, uid=str(uid), gid=str(uid)))
            json.loads(holders[-1].stdout.readline())
        users = bus.stats()["users"]
        check(users["pool_queue_bytes"] <= QUEUE_BOUND and users["pool_queue_bytes"] + per_client > QUEUE_BOUND,
              f"the users together fill MaxQueueBytes= and no more: {users}")
        check(users["refused_queue_bytes"] > 0, f"and the rest is refused, counted: {users}")
        check_eq(users["queue_bytes"] - users["pool_queue_bytes"], kept * per_client,
                 "outside the pool: the AllowGroups= member's")
        privileged = hold_connections(d_users.socket_path, 1, request, uid="5100", gid="5100", groups=[ALLOWED_GID])
        holders.append(privileged)
        check_eq([r["type"] for r in json.loads(privileged.stdout.readline())], ["hello"],
                 "a new member of AllowGroups= is served with the users' pool full")

        # Events for everyone, never read: every queue fills (each pooled uid sees its own).
        subprocess.run([sys.executable, "-c", "for i in range(120000): open('/dev/null').close()"], check=True)
        for uid in range(5001, 5017):
            subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c",
                            "for i in range(20000): open('/dev/null').close()"], check=True)
        wait_for(lambda: all(c["queued_bytes"] * 2 > per_client for c in bus.stats()["client_list"] if c["uid"]),
                 "every held client's queue filled", timeout=60)
        grown = rss(d_users.proc.pid) - base
        with open(f"/proc/{d_users.proc.pid}/maps") as f:
            sanitized = "libasan" in f.read()
        if sanitized:
            # AddressSanitizer's shadow memory and its quarantine of freed blocks are RSS the
            # daemon does not hold; the bound is checked by the plain build's run of this test.
            print(f"the daemon's RSS grew by {grown >> 20} MiB under AddressSanitizer (not checked)")
        else:
            bound = QUEUE_BOUND + 2 * QUEUE_UID_BOUND  # the pool, and the two AllowGroups= uids
            check(grown <= bound + (16 << 20), f"the daemon's RSS grew by {grown >> 20} MiB, within "
                  f"MaxQueueBytes= and two uids' MaxQueueBytesPerUid= ({bound >> 20} MiB) and 16 MiB")

        # Root is not locked out by the others.
        c = socket.socket(socket.AF_UNIX)
        c.connect(d_users.socket_path)
        c.settimeout(30)
        lines = c.makefile("rb")
        marker = os.path.join(WORK, f"root-marker-{os.getpid()}")
        c.sendall(json.dumps({"subscribe": {"types": ["open"], "comm": ["prrootmark"]}}).encode() + b"\n")
        check_eq(json.loads(lines.readline())["type"], "hello", "root's subscriber is accepted")
        subprocess.run([sys.executable, "-c", f"import ctypes,sys; ctypes.CDLL(None).prctl(15, b'prrootmark', 0, 0, 0); "
                        f"open({marker!r}, 'w').close()"], check=True)
        check_eq(json.loads(lines.readline()).get("path"), marker, "and served")
        lines.close()
        c.close()
    finally:
        if monitor:
            monitor.close()
        for h in holders:
            try:
                h.stdin.write("done\n")
                h.stdin.close()
            except OSError:
                pass
            h.wait(30)
    d_users.stop()


def test_units_without_file_handles():
    """The daemon names an event's unit without CAP_DAC_READ_SEARCH (the shipped unit does not
    grant it: open_by_handle_at() could open any inode of a mounted filesystem): from its own
    index of the cgroup tree, for a cgroup made before it started and one made after."""
    wrapper = os.path.join(WORK, "perfrelayd-no-dac")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nexec setpriv --bounding-set=-dac_read_search --inh-caps=-dac_read_search {BINARY} \"$@\"\n")
    os.chmod(wrapper, 0o755)
    before = UnitCgroup("acc-before")
    dm = Daemon(wrapper, "access-nodac", stdout=True, config="[Probes]\nProbes=exec\n")
    try:
        dm.start()
        after = UnitCgroup("acc-after")
        try:
            for cg in (before, after):
                marker = f"prnodac-{cg.name}"
                check_eq(subprocess.run(["/bin/sh", "-c", "exit 0", marker], preexec_fn=cg.enter).returncode, 0,
                         "the marker ran")
                ev = dm.wait_event(lambda e: e.get("type") == "exec" and marker in e.get("argv", []),
                                   f"the exec in {cg.name}")
                check_eq(ev.get("unit"), cg.name, "its unit, named without a file handle")
        finally:
            after.remove()
        dm.stop()
    finally:
        before.remove()
        dm.cleanup()


if __name__ == "__main__":
    main(__file__)
