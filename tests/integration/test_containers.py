#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Containers by name (docs/containers.md): an event whose cgroup is a container's carries
{"container": {id, runtime, name, image}}, the name read from the runtime's own state on the
main thread; a subscription's "container" filter selects by name, image or id and excludes the
others; a runtime state that cannot be read (a FIFO in its place) never holds an event back and is
counted in GetStats()' containers.lookup_failures. The runtimes' state is the test's own (its
PodmanRoot= and DockerRoot=) for the cgroup shapes of both; then real containers: Podman's
(named, filtered, through perfrelayctl monitor --container, and captured by name) and a Docker
Engine's (the test's own dockerd)."""
import json
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import uuid

import pytest

import prtest
from prtest import check, check_eq
from prtest.exporttest import Exporter

EXPORT = os.path.join(prtest.build_root(), "client", "export", "perfrelay-export")

TRIES = 5  # LOOKUP_TRIES of containers-feature.c


@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf, stats_bus):
    if prtest.cgroup2_mount() is None:
        prtest.skip("no cgroup2 hierarchy: containers are recognised by their cgroup")


@pytest.fixture
def cgroups():
    made = []

    def make(tag, name, parent=""):
        made.append(prtest.UnitCgroup(tag, parent=parent, name=name))
        return made[-1]

    yield make
    for cg in reversed(made):
        cg.remove()


def podman_state(root, containers):
    """A containers/storage containers.json listing (id, name, image) as Podman writes it."""
    os.makedirs(os.path.join(root, "overlay-containers"))
    entries = [{"id": cid, "names": [name], "image": "ab" * 32, "layer": "cd" * 32,
                "metadata": json.dumps({"image-name": image, "image-id": "ab" * 32, "name": name,
                                        "created-at": 1795959551})}
               for cid, name, image in containers]
    with open(os.path.join(root, "overlay-containers", "containers.json"), "w") as f:
        json.dump(entries, f)


def docker_state(root, cid, name=None, image=None):
    """The Engine's config.v2.json of a container, or a FIFO in its place (name None)."""
    path = os.path.join(root, "containers", cid)
    os.makedirs(path)
    config = os.path.join(path, "config.v2.json")
    if name is None:
        os.mkfifo(config)
        return
    with open(config, "w") as f:
        json.dump({"ID": cid, "Name": "/" + name, "Image": "sha256:" + "ef" * 32,
                   "Config": {"Image": image, "Hostname": cid[:12]}}, f)


def run_marker(cg, workdir):
    """Runs cat of a new marker file in cgroup cg: an exec whose argv names the file, and an open
    of it, that the test knows."""
    mark = os.path.join(workdir, f"marker-{uuid.uuid4().hex}")
    with open(mark, "w"):
        pass
    check_eq(cg.popen(["/bin/cat", mark]).wait(timeout=60), 0, "cat of the marker")
    return mark


def execed(client, mark, what):
    return client.wait(lambda m: m.get("type") == "exec" and mark in m.get("argv", []), what, timeout=30)


def opened(client, mark, what):
    """cat's open of the marker (the test's own open, which made it, is in no container)."""
    return client.wait(lambda m: m.get("type") == "open" and m.get("path") == mark and m.get("comm") == "cat",
                       what, timeout=30)


def containers(bus):
    return bus.stats()["containers"]


def test_events_carry_their_container_by_name(make_daemon, stats_bus, socket_client, cgroups, workdir):
    """Two Podman containers (the cgroupfs shape this machine's podman makes) and two Docker ones
    (systemd's shape), one of them with a FIFO for its state: each exec made in their cgroups
    arrives with its container; names and images come from the state files; a "container" filter
    by name, by image and by id prefix takes exactly its container's events; the FIFO is counted
    as a failed lookup of each try, and never stalls the stream."""
    podman_root = os.path.join(workdir, "podman")
    docker_root = os.path.join(workdir, "docker")
    web, db, dweb, stuck = (secrets.token_hex(32) for _ in range(4))
    podman_state(podman_root, [(web, "prweb", "localhost/prtest-web:1"), (db, "prdb", "localhost/prtest-db:2")])
    docker_state(docker_root, dweb, "prdweb", "nginx:1.27")
    docker_state(docker_root, stuck)
    pid = os.getpid()
    where = {
        web: cgroups("containers", f"libpod-{web}", parent=f"prtest-{pid}/libpod_parent"),
        db: cgroups("containers", f"libpod-{db}", parent=f"prtest-{pid}/libpod_parent"),
        dweb: cgroups("containers", f"docker-{dweb}.scope", parent=f"prtest-{pid}/system.slice"),
        stuck: cgroups("containers", f"docker-{stuck}.scope", parent=f"prtest-{pid}/system.slice"),
    }
    d = make_daemon("containers", config=f"[Containers]\nPodmanRoot={podman_root}\nDockerRoot={docker_root}\n",
                    stdout=False)
    exporter = None
    try:
        every = socket_client(d.socket_path, {"subscribe": {"types": ["exec", "open"]}})
        every.wait_subscribed()
        by_name = socket_client(d.socket_path, {"subscribe": {"types": ["exec", "open"], "container": ["prweb"]}})
        by_image = socket_client(d.socket_path,
                                 {"subscribe": {"types": ["exec", "open"], "container": ["nginx:1.27"]}})
        by_id = socket_client(d.socket_path, {"subscribe": {"types": ["exec", "open"], "container": [db[:12]]}})
        for c in (by_name, by_image, by_id):
            c.wait_subscribed()
        # perfrelay-export's Containers=: its file target gets prweb's events only.
        exported = os.path.join(workdir, f"exported-{uuid.uuid4().hex[:8]}.json")
        if os.access(EXPORT, os.X_OK):
            exporter = Exporter(EXPORT, "containers", ["nats://127.0.0.1:1"], socket_path=d.socket_path,
                                extra=f"Types=exec open\nContainers=prweb\nTargets=file\n[File]\nPath={exported}\n")
            exporter.start()
            prtest.wait_for(lambda: exporter.stats() is not None, "the exporter's first stats")

        # The first exec in each: its container's id at once, whatever the lookup is doing.
        for cid, cg in where.items():
            ev = execed(every, run_marker(cg, workdir), f"the first exec in container {cid[:12]}")
            check_eq(ev.get("container", {}).get("id"), cid, "the event's container id")
            check_eq(ev["container"]["runtime"], "podman" if cid in (web, db) else "docker", "its runtime")
        prtest.wait_for(lambda: containers(stats_bus)["known"] == 3, "three containers named", timeout=30, interval=0.2)
        prtest.wait_for(lambda: containers(stats_bus)["failed"] == 1,
                        "the FIFO's container given up after its tries", timeout=60, interval=0.2)
        st = containers(stats_bus)
        check_eq(st["seen"], 4, "containers seen")
        check_eq(st["pending"], 0, "containers pending")
        check_eq(st["lookup_failures"]["docker"], TRIES, "failed lookups: every try of the FIFO's")
        check_eq(st["lookup_failures"]["podman"], 0, "failed Podman lookups")

        # Named now: every event of theirs says so, and the filters take only theirs.
        marks = {cid: run_marker(cg, workdir) for cid, cg in where.items()}
        want = {web: ("prweb", "localhost/prtest-web:1"), db: ("prdb", "localhost/prtest-db:2"),
                dweb: ("prdweb", "nginx:1.27"), stuck: (None, None)}
        for cid, (name, image) in want.items():
            # The exec (its own cgroup) and the open (its process's, from the process table).
            for ev in (execed(every, marks[cid], f"the named exec in {cid[:12]}"),
                       opened(every, marks[cid], f"the named open in {cid[:12]}")):
                check_eq(ev.get("container", {}).get("id"), cid, f"the {ev['type']}'s container")
                check_eq(ev["container"].get("name"), name, f"the name of {cid[:12]}")
                check_eq(ev["container"].get("image"), image, f"the image of {cid[:12]}")
        check_eq(execed(by_name, marks[web], "prweb's exec by name")["container"]["id"], web, "by name")
        check_eq(opened(by_name, marks[web], "prweb's open by name")["container"]["id"], web, "by name")
        check_eq(execed(by_image, marks[dweb], "prdweb's exec by image")["container"]["id"], dweb, "by image")
        check_eq(execed(by_id, marks[db], "prdb's exec by id")["container"]["id"], db, "by id")
        if exporter:
            check_eq(exporter.stop(), 0, "perfrelay-export exits 0")
            with open(exported) as f:
                lines = [json.loads(line) for line in f]
            found = {cid for cid, mark in marks.items()
                     for m in lines if mark in m.get("argv", []) or m.get("path") == mark}
            check_eq(found, {web}, "the containers whose markers perfrelay-export wrote (Containers=prweb)")
        # Each filter's stream: execs of its own container, nothing else (the last marker of
        # every container was delivered to `every` before these are counted).
        for c, cid in ((by_name, web), (by_image, dweb), (by_id, db)):
            ids = {m["container"]["id"] for m in c.messages() if m.get("type") in ("exec", "open")}
            check_eq(ids, {cid}, "the containers a filter's stream holds")
    finally:
        if exporter:
            exporter.cleanup()
        d.stop()


def test_request_refuses_bad_container_names(make_daemon, socket_client):
    d = make_daemon("containers-bad", stdout=False)
    try:
        for bad in ("", "a b", "x\"y", "z" * 512):
            c = socket_client(d.socket_path, {"subscribe": {"container": [bad]}})
            reply = c.wait(lambda m: m.get("type") == "error", f"the error for {bad[:16]!r}")
            check_eq(reply.get("error"), "bad-request", "the error")
            check("subscribe.container[0]" in reply.get("message", ""), "the error names the entry")
    finally:
        d.stop()


def podman_tree(root):
    """A busybox root file system at root, and its tarball at root.tar."""
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
    for applet in ("sh", "cat", "true"):
        os.symlink("busybox", os.path.join(root, "bin", applet))
    with tarfile.open(root + ".tar", "w") as t:
        t.add(root, arcname=".")


def podman_image(workdir):
    """A busybox image made locally with podman import (no registry)."""
    root = os.path.join(workdir, f"bbroot-{uuid.uuid4().hex}")
    podman_tree(root)
    tar = root + ".tar"
    image = f"localhost/prtest-bb:{os.getpid()}"
    subprocess.run(["podman", "import", "-q", tar, image], check=True, capture_output=True, timeout=120)
    return image


def wait_named(stats_bus, proc, runtime):
    """Until the daemon has named a container (proc, the runtime's run, waits on /sync/go);
    skipped, with the runtime's words, if the runtime cannot run one here."""
    prtest.wait_for(lambda: containers(stats_bus)["known"] >= 1 or proc.poll() is not None,
                    "the container named", timeout=120, interval=0.2)
    if proc.poll() is not None:
        prtest.skip(f"{runtime} cannot run a container here ({proc.returncode}): {proc.stderr.read()[-300:]}")


def release(sync, proc, runtime):
    """Lets the container's script go on past /sync/go, and waits for it to end well."""
    with open(os.path.join(sync, "go"), "w") as f:
        f.write("go\n")
    _, err = proc.communicate(timeout=120)
    check_eq(proc.returncode, 0, f"{runtime} run ({err.strip()[-300:]})")


def podman_run(name, image, sync, script):
    """podman run of `script` under /bin/sh in a container named `name`, /sync bind-mounted."""
    return subprocess.Popen(
        ["podman", "run", "--rm", "--runtime", "runc", "--network=none", "--ulimit", "nofile=1024:1024",
         "--ulimit", "nproc=4096:4096", "--name", name, "-v", f"{sync}:/sync", image, "/bin/sh", "-c", script],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def podman_cleanup(name, image, *procs):
    """Kills what still runs of procs, removes the container and the image."""
    for p in procs:
        if p and p.poll() is None:
            p.kill()
            p.wait()
    subprocess.run(["podman", "rm", "-f", name], capture_output=True)
    subprocess.run(["podman", "rmi", "-f", image], capture_output=True)


def test_real_podman_container(make_daemon, stats_bus, socket_client, workdir):
    """A container started by Podman with a name: its exec arrives with that name, its id and its
    image, on a socket subscriber and through `perfrelayctl monitor --container NAME`; a
    "container" filter of another name gets none of its events."""
    if not shutil.which("podman") or not shutil.which("runc"):
        prtest.skip("podman or runc is not installed (scripts/lib.sh installs them)")
    image = podman_image(workdir)
    name = f"prtest-web-{os.getpid()}"
    sync = os.path.join(workdir, "sync")
    os.mkdir(sync)
    os.mkfifo(os.path.join(sync, "go"))
    d = make_daemon("containers-podman", stdout=False)
    proc = monitor = None
    try:
        mine = socket_client(d.socket_path, {"subscribe": {"types": ["exec", "open"], "container": [name]}})
        other = socket_client(d.socket_path, {"subscribe": {"types": ["exec", "open"], "container": ["prtest-other"]}})
        mine.wait_subscribed()
        other.wait_subscribed()
        monitor = subprocess.Popen([stats_bus.ctl, "monitor", "--json", "--type", "exec", "--container", name,
                                    "--socket", d.socket_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        prtest.wait_for(lambda: stats_bus.stats()["clients"]["connected"] == 3 or monitor.poll() is not None,
                        "perfrelayctl monitor subscribed", timeout=30, interval=0.2)
        check(monitor.poll() is None, "perfrelayctl monitor --container runs")
        # The container's shell waits on the FIFO: its first exec makes the daemon look the
        # container up; the test lets it go on once the name is known.
        proc = podman_run(name, image, sync, "read x < /sync/go; exec /bin/cat /etc/hostname")
        wait_named(stats_bus, proc, "podman")
        release(sync, proc, "podman")
        opened_ev = mine.wait(lambda m: m.get("type") == "open" and m.get("path") == "/etc/hostname",
                              "cat's open of /etc/hostname in the container", timeout=30)
        check_eq(opened_ev.get("container", {}).get("name"), name, "the open's container")
        ev = mine.wait(lambda m: m.get("type") == "exec" and m.get("comm") == "cat", "cat's exec in the container",
                       timeout=30)
        c = ev["container"]
        check_eq(c.get("name"), name, "the container's name")
        check_eq(c.get("image"), image, "the container's image")
        check_eq(c.get("runtime"), "podman", "the runtime")
        check_eq(len(c.get("id", "")), 64, "the id's length")
        check_eq([m for m in other.messages() if m.get("type") == "exec"], [],
                 "another container's filter")
        monitor.terminate()
        out, err = monitor.communicate(timeout=30)
        seen = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        check(any(m.get("comm") == "cat" and m.get("container", {}).get("name") == name for m in seen),
              f"perfrelayctl monitor --container {name} shows cat's exec: {out[-500:]} {err[-300:]}")
        check({m.get("container", {}).get("name") for m in seen} == {name}, "and only that container's events")
    finally:
        podman_cleanup(name, image, proc, monitor)
        d.stop()


def test_capture_by_container_name(make_daemon, stats_bus, socket_client, workdir):
    """perfrelayctl capture --container NAME captures that container's cgroup: its TCP
    conversation on its own loopback is in the pcapng, and the host's datagrams sent meanwhile
    are not; the packet events carry the container's name."""
    if not shutil.which("podman") or not shutil.which("runc"):
        prtest.skip("podman or runc is not installed (scripts/lib.sh installs them)")
    if not shutil.which("tshark"):
        prtest.skip("tshark is not installed (scripts/lib.sh installs it)")
    image = podman_image(workdir)
    name = f"prtest-cap-{os.getpid()}"
    sync = os.path.join(workdir, "capsync")
    os.mkdir(sync)
    os.mkfifo(os.path.join(sync, "go"))
    pcap = os.path.join(workdir, "container.pcapng")
    d = make_daemon("containers-capture", stdout=False)
    proc = cap = None
    try:
        proc = podman_run(name, image, sync,
                          "read x < /sync/go; /bin/busybox nc -l -p 5000 > /dev/null & i=0; "
                          "until echo prtest-marker | /bin/busybox nc 127.0.0.1 5000 2>/dev/null; do "
                          "i=$((i+1)); [ $i -gt 100000 ] && exit 1; done; wait")
        wait_named(stats_bus, proc, "podman")
        cap = subprocess.Popen([stats_bus.ctl, "capture", "--container", name, "-w", pcap],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PERFRELAY_SOCKET=d.socket_path))
        cid = prtest.wait_for(
            lambda: next((c["id"] for c in stats_bus.stats()["capture"]["captures"] if c["active"]), None)
            or (cap.poll() is not None and -1), "the capture runs", timeout=30, interval=0.2)
        check(cid != -1, f"perfrelayctl capture --container runs: {cap.stderr.read() if cap.poll() is not None else ''}")
        packets = socket_client(d.socket_path, {"subscribe": {"types": ["packet"], "capture": [cid]}})
        packets.wait_subscribed()
        # The host's own traffic meanwhile: never the container's cgroup.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(20):
                s.sendto(b"host datagram", ("127.0.0.1", 9))
            with open(os.path.join(sync, "go"), "w") as f:
                f.write("go\n")
            out, err = proc.communicate(timeout=120)
            for _ in range(20):
                s.sendto(b"host datagram", ("127.0.0.1", 9))
        check_eq(proc.returncode, 0, f"the container's conversation ({err.strip()[-300:]})")
        ev = packets.wait(lambda m: m.get("type") == "packet", "a packet event of the container", timeout=30)
        check_eq(ev.get("container", {}).get("name"), name, "the packet event's container")
        cap.send_signal(2)
        cap.communicate(timeout=60)
        check_eq(cap.returncode, 0, "perfrelayctl capture exits 0")
        r = subprocess.run(["tshark", "-r", pcap, "-T", "fields", "-e", "tcp.port", "-e", "udp.port"],
                           capture_output=True, text=True, timeout=60)
        check_eq(r.returncode, 0, f"tshark reads the capture ({r.stderr.strip()})")
        lines = [line.split("\t") for line in r.stdout.splitlines()]
        check(lines, "the capture holds packets")
        check(all("5000" in fields[0].split(",") for fields in lines),
              f"only the container's conversation on port 5000: {lines[:10]}")
    finally:
        podman_cleanup(name, image, proc, cap)
        d.stop()


class Dockerd:
    """A dockerd of the test's own: its data root (what DockerRoot= names), exec root and socket in
    a directory of its own, no iptables, no bridge, vfs storage; stopped and removed after."""

    def __init__(self, workdir):
        self.dir = os.path.join(workdir, f"docker-{uuid.uuid4().hex[:8]}")
        self.root = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "docker.sock")
        os.makedirs(self.dir)
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(
            ["dockerd", "--data-root", self.root, "--exec-root", os.path.join(self.dir, "exec"),
             "-H", f"unix://{self.sock}", "--pidfile", os.path.join(self.dir, "pid"), "--iptables=false",
             "--ip-masq=false", "--bridge=none", "--storage-driver=vfs"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.env = dict(os.environ, DOCKER_HOST=f"unix://{self.sock}")

    def ready(self):
        return subprocess.run(["docker", "info"], env=self.env, capture_output=True).returncode == 0

    def run(self, *args, **kw):
        return subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True, **kw)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_real_docker_container(make_daemon, stats_bus, socket_client, workdir):
    """A container started by a real Docker Engine (the test's own dockerd, cgroupfs driver:
    /docker/<id>) with a name: its exec arrives with that name, its id and its image, read from
    the Engine's config.v2.json under DockerRoot=."""
    if not shutil.which("dockerd") or not shutil.which("docker"):
        prtest.skip("dockerd is not installed (scripts/lib.sh installs docker.io)")
    dockerd = Dockerd(workdir)
    proc = None
    name = f"prtest-dweb-{os.getpid()}"
    image = f"prtest-bb:{os.getpid()}"
    try:
        try:
            prtest.wait_for(lambda: dockerd.ready() or dockerd.proc.poll() is not None, "dockerd answers",
                            timeout=60, interval=0.2)
        except prtest.Failure:
            prtest.skip("dockerd did not start here within 60 s")
        if dockerd.proc.poll() is not None:
            prtest.skip(f"dockerd cannot run here (exit {dockerd.proc.returncode})")
        root = os.path.join(workdir, f"bbroot-{uuid.uuid4().hex}")
        podman_tree(root)
        r = dockerd.run("import", root + ".tar", image, timeout=120)
        check_eq(r.returncode, 0, f"docker import ({r.stderr.strip()})")
        sync = os.path.join(workdir, f"dsync-{uuid.uuid4().hex[:8]}")
        os.mkdir(sync)
        os.mkfifo(os.path.join(sync, "go"))
        d = make_daemon("containers-docker", stdout=False, config=f"[Containers]\nDockerRoot={dockerd.root}\n")
        try:
            mine = socket_client(d.socket_path, {"subscribe": {"types": ["exec", "open"], "container": [name]}})
            mine.wait_subscribed()
            proc = subprocess.Popen(["docker", "run", "--rm", "--network", "none", "--name", name, "-v",
                                     f"{sync}:/sync", image, "/bin/sh", "-c",
                                     "read x < /sync/go; exec /bin/cat /etc/hostname"],
                                    env=dockerd.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_named(stats_bus, proc, "docker")
            release(sync, proc, "docker")
            ev = mine.wait(lambda m: m.get("type") == "exec" and m.get("comm") == "cat",
                           "cat's exec in the Docker container", timeout=30)
            c = ev["container"]
            check_eq((c.get("runtime"), c.get("name"), c.get("image")), ("docker", name, image),
                     "the container's runtime, name and image")
            check_eq(len(c.get("id", "")), 64, "the id's length")
            check_eq(containers(stats_bus)["lookup_failures"]["docker"], 0, "failed Docker lookups")
        finally:
            d.stop()
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        dockerd.run("rm", "-f", name, timeout=60)
        dockerd.run("rmi", "-f", image, timeout=60)
        dockerd.close()


if __name__ == "__main__":
    prtest.main(__file__)
