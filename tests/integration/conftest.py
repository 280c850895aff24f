# SPDX-License-Identifier: LGPL-2.1-or-later
"""The fixtures of the integration suite: daemons with their own pin root, socket and config; a
private system bus; socket subscribers; real nats-server processes; unit cgroups; a work
directory. Each is torn down after the test (or module) that asked for it, so that tests run
beside a live daemon and beside each other and leave nothing behind."""
import os
import shutil
import tempfile

import pytest

import prtest
from prtest.statsbus import PrivateBus, StatsBus


@pytest.fixture(scope="module")
def root_and_bpf():
    """Root, bpffs and tracefs (mounted if they are not), and a kernel with BTF; else a skip."""
    prtest.require_root_and_bpf()


@pytest.fixture(scope="module")
def make_daemon(perfrelayd, root_and_bpf):
    """make_daemon(tag, config="", start=True, **Daemon options): a perfrelayd with its own pin
    root, socket and configuration, started unless start=False. When the module's tests are done
    each is stopped and --cleanup'ed; pins left behind fail the module."""
    made = []

    def make(tag, config="", start=True, **kw):
        d = prtest.Daemon(perfrelayd, tag, config=config, **kw)
        made.append(d)
        return d.start() if start else d

    yield make
    errors = []
    for d in made:
        try:
            d.cleanup()
        except prtest.Failure as e:
            errors.append(str(e))
    if errors:
        pytest.fail("; ".join(errors))


@pytest.fixture(scope="module")
def stats_bus(perfrelayd):
    """A private system bus (dbus-daemon with the project's policy) whose address the daemons
    and tools the module starts afterwards use, with GetStats() read through perfrelayctl."""
    bus = StatsBus(perfrelayd)
    yield bus
    bus.close()


@pytest.fixture
def private_bus():
    """private_bus(directory=None): a bus of its own for one test (closed after it)."""
    buses = []

    def make(directory=None):
        buses.append(PrivateBus(directory))
        return buses[-1]

    yield make
    for b in buses:
        b.close()


@pytest.fixture(scope="module")
def workdir():
    """A directory for the module's files, readable by the other users the tests switch to."""
    path = tempfile.mkdtemp(prefix="perfrelay-test-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def socket_client():
    """socket_client(path, request, read=True, raw=False): a subscriber of the event socket
    whose lines a thread collects (prtest.SocketClient); closed after the test."""
    clients = []

    def make(path, request, **kw):
        clients.append(prtest.SocketClient(path, request, **kw))
        return clients[-1]

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def nats_server():
    """nats_server(...) starts one nats-server -js (natstest.NatsServer options);
    nats_server.cluster(n) makes n of them, one JetStream cluster on loopback ports, for the test
    to start (and stop and start again). Each is killed and its store removed after the test."""
    from prtest import natstest

    natstest.require_nats_server()
    servers = []

    def make(*args, **kw):
        servers.append(natstest.NatsServer(*args, **kw))
        return servers[-1].start()

    def cluster(n=3):
        nodes = natstest.cluster(n)
        servers.extend(nodes)
        return nodes

    make.cluster = cluster
    yield make
    for s in servers:
        s.cleanup()


@pytest.fixture
def unit_cgroup():
    """unit_cgroup(tag, parent="", name=None): a cgroup named like a service (prtest.UnitCgroup),
    for processes the test starts in it; removed after the test."""
    if prtest.cgroup2_mount() is None:
        prtest.skip("no cgroup2 mount")
    made = []

    def make(*args, **kw):
        made.append(prtest.UnitCgroup(*args, **kw))
        return made[-1]

    yield make
    for cg in reversed(made):
        cg.remove()
