#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelay-export against a three-node JetStream cluster on loopback (R3 stream): killing one
node while 100k events are exported loses none; stopping every node makes the exporter count
retries and drops and recover when they return, with exported + export_dropped = offered."""
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time


from prtest import Daemon, Failure, check, check_eq, daemon_binary, main, skip, wait_for
from prtest.natstest import NatsClient, require_nats_server
from prtest.exporttest import Exporter, stream_events, write_frames

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
EXPORT = os.path.join(BUILDDIR, "client", "export", "perfrelay-export")
BENCH = os.path.join(BUILDDIR, "bench", "perfrelay-bench")

require_nats_server()
if not os.access(EXPORT, os.X_OK):
    skip("perfrelay-export was not built (libnats-dev missing)")

STREAM_CONF = "[Stream]\nReplicas=3\n[Export]\nAckTimeoutMSec=2000\n"


def stream_messages(nodes):
    """The records the stream holds (the sum over its batches), asked of any node that answers."""
    for n in nodes:
        if n.proc is None:
            continue
        try:
            nc = NatsClient(n.url, timeout=5)
            try:
                return sum(len(recs) for _, recs in stream_events(nc, "PERFRELAY"))
            finally:
                nc.close()
        except (Failure, OSError):
            continue
    raise Failure("no node answered a stream info request")


def test_kill_one_node_loses_nothing(root_and_bpf, nats_server):
    N = 300000
    nodes = nats_server.cluster()
    work = tempfile.mkdtemp(prefix="perfrelay-cluster-")
    e = None
    try:
        for n in nodes:
            n.start()
        frames = os.path.join(work, "frames")
        write_frames(frames, [(0x8002, 9, i % 2, i // 2, struct.pack("<Q", i)) for i in range(N)])
        # MaxRetries=20 with the back-off capped at AckTimeoutMSec bridges ~33 s of refusals:
        # far more than electing a new stream leader, which on a loaded machine took up to 6
        # rounds of retries here (the default 10 bridges ~26 s with AckTimeoutMSec=5000).
        # The end of the input is a shutdown: the default DrainTimeoutMSec (10 s) would cut
        # the election short on a loaded CI machine (it did: 45k dropped_shutdown), so the
        # drain may take as long as the test waits for the exporter.
        # Small batches, one message in flight: the export lasts long enough (thousands of
        # acknowledged round trips) for the kill to land in the middle of it.
        e = Exporter(EXPORT, "kill1", [n.url for n in nodes],
                     extra=STREAM_CONF + "MaxRetries=20\nDrainTimeoutMSec=110000\nBatchBytes=1024\nMaxInFlight=1\n"
                     ).start("--input", frames)
        # Kill the node the exporter talks to, once the export is well under way: its in-flight
        # publishes lose their acks and must be republished elsewhere, without duplicates.
        wait_for(lambda: (e.stats() or {}).get("exported", 0) >= N // 5, "a fifth of the events exported", 60)
        server = e.stats()["server"]
        victim = [n for n in nodes if n.url == server or server.endswith(f":{n.port}")]
        check_eq(len(victim), 1, f"the exporter's server {server!r} is one of the nodes")
        victim[0].kill()
        check_eq(e.wait(120), 0, "exporter exit status")
        st = e.stats()
        check_eq(st["offered"], N, "events offered")
        check_eq(st["export_dropped"], 0, f"events dropped with two of three nodes up ({st})")
        check_eq(st["exported"], N, "events acknowledged")
        check(st["reconnects"] >= 1, f"the exporter reconnected to another node: {st}")
        check_eq(stream_messages(nodes), N, "records in the R3 stream")
    finally:
        if e:
            e.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def test_all_nodes_down_counts_and_recovers(root_and_bpf, nats_server):
    nodes = nats_server.cluster()
    d = Daemon(BINARY, "cluster", stdout=False, config="[Probes]\nProbes=none\n")
    e = bench = None
    try:
        for n in nodes:
            n.start()
        d.start()
        e = Exporter(EXPORT, "outage", [n.url for n in nodes], socket_path=d.socket_path,
                     extra=STREAM_CONF + "Types=bench\nQueueEvents=2000\nMaxRetries=2\n").start()
        wait_for(lambda: (e.stats() or {}).get("stream_ready"), "the exporter created the R3 stream", 60)

        bench = subprocess.Popen([BENCH, "--mode", "daemon", "--pin-root", d.pin_path, "--clients", "0",
                                  "--duration", "9", "--rate", "4000", "--settle-ms", "0",
                                  "--producer-cpus", "0", "--consumer-cpu", "-1"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: (e.stats() or {}).get("exported", 0) >= 2000, "exports before the outage")
        for n in nodes:
            n.kill()
        # The outage itself: the exporter's queue (2000 events, half a second of load) must
        # overflow and its in-flight publishes must time out.
        time.sleep(3)
        before = e.stats()
        for n in nodes:
            n.start()
        out, err = bench.communicate(timeout=60)
        check_eq(bench.returncode, 0, f"perfrelay-bench exit status ({err.strip()})")
        load = json.loads(out)
        bench = None
        idle = lambda: (lambda s: s and s["queued"] == 0 and s["in_flight"] == 0 and s)(e.stats())
        after = wait_for(idle, "the exporter caught up after the outage", 60)

        # Recovery: once the restarted cluster has elected the stream's leader again, a new
        # burst is exported whole.
        def leader():
            try:
                nc = NatsClient(nodes[1].url, timeout=5)
                try:
                    return nc.stream_info("PERFRELAY").get("cluster", {}).get("leader")
                finally:
                    nc.close()
            except (Failure, OSError, KeyError):
                return None
        wait_for(leader, "the restarted cluster elected a stream leader", 60, interval=0.5)
        r = subprocess.run([BENCH, "--mode", "daemon", "--pin-root", d.pin_path, "--clients", "0",
                            "--duration", "1", "--rate", "2000", "--settle-ms", "0",
                            "--producer-cpus", "0", "--consumer-cpu", "-1"], capture_output=True, text=True, timeout=60)
        check_eq(r.returncode, 0, f"perfrelay-bench exit status ({r.stderr.strip()})")
        load2 = json.loads(r.stdout)
        wait_for(lambda: (lambda s: s and s["offered"] + s["daemon_lost"] == after["offered"] + after["daemon_lost"]
                          + load2["attempts"] - load2["failures"] and s["queued"] == 0 and s["in_flight"] == 0)(e.stats()),
                 "the exporter took the burst after the outage", 60)
        check_eq(e.stop(), 0, "exporter exit status")
        st = e.stats()
        check_eq(st["export_dropped"], after["export_dropped"], "no drop once the cluster is back")
        check_eq(st["exported"] - after["exported"], st["offered"] - after["offered"], "the burst after the outage was exported whole")
        for k in ("attempts", "failures"):
            load[k] += load2[k]

        check(st["export_dropped"] > 0, f"the outage made the exporter drop (counted): {st}")
        check(st["export_retried"] > 0, f"the outage made the exporter retry: {st}")
        check(st["exported"] > before["exported"], f"exports resumed after the nodes returned: {before} → {st}")
        check_eq(st["exported"] + st["export_dropped"], st["offered"], "exported + export_dropped = offered")
        check_eq(st["offered"] + st["daemon_lost"], load["attempts"] - load["failures"],
                 "offered + lost in the daemon's queue = received by the daemon")
        stored = stream_messages(nodes)
        # Acknowledged events are stored exactly once; an event given up after its retries may
        # still have reached the stream (its ack was what got lost), never more than once.
        check(st["exported"] <= stored <= st["exported"] + st["dropped_retries"] + st["dropped_shutdown"],
              f"stream holds {stored}: exported {st['exported']}, given up after retries "
              f"{st['dropped_retries']}")
    finally:
        if bench and bench.poll() is None:
            bench.kill()
            bench.wait()
        if e:
            e.cleanup()
        d.cleanup()


if __name__ == "__main__":
    main(__file__)
