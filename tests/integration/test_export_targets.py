#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelay-export's host-native targets (docs/export.md, "File" and "Journal"). The file
target under a steady producer's bursts: rotated many times by MaxBytes=, moved away as
logrotate does and reopened on SIGHUP, every line a JSON event, and exactly what it counts:
lines in all the files = written, offered = written + dropped. The journal target against a
journald the test starts in a mount namespace of its own: a marker command's exec is an entry
with its fields (PERFRELAY_FILENAME=, the arguments, OBJECT_PID=, UNIT=), and under a small
RateLimitPerSec= the entries in the journal are exactly those counted as sent, the rest
counted as dropped_rate."""
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from prtest import Daemon, UnitCgroup, check, check_eq, daemon_binary, main, skip, wait_for
from prtest.exporttest import Exporter
from prtest.steady import SteadyProducer

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
EXPORT = os.path.join(BUILDDIR, "client", "export", "perfrelay-export")
JOURNALD = "/lib/systemd/systemd-journald"
if not os.access(EXPORT, os.X_OK):
    skip("perfrelay-export was not built (libnats-dev, libcurl4-openssl-dev or libprotobuf-c-dev missing)")


@pytest.fixture(scope="module", autouse=True)
def _setup(root_and_bpf):
    pass


def settled(e):
    """The exporter's figures once everything it was offered is written or dropped."""
    st = e.stats()
    return st if st and st["queued"] == 0 and st["exported"] + st["export_dropped"] == st["offered"] else None


def test_file_rotates_and_reopens_exactly():
    work = tempfile.mkdtemp(prefix="perfrelay-export-file-")
    path = os.path.join(work, "events.json")
    d = Daemon(BINARY, "expfile", stdout=False, config="[Probes]\nProbes=exec\n")
    e = p = None
    try:
        d.start()
        e = Exporter(EXPORT, "file", ["nats://127.0.0.1:1"], socket_path=d.socket_path,
                     extra=f"Targets=file\n[File]\nPath={path}\nMaxBytes=262144\nMaxFiles=1000\n").start()
        wait_for(lambda: e.stats() is not None, "the exporter's first stats")
        p = SteadyProducer(BUILDDIR, d.pin_path, 0)
        for i in range(6):
            p.cmd("burst 4000")
            if i == 2:
                # logrotate's way: the file moves, the writer is told to open its path again.
                wait_for(lambda: settled(e) and settled(e)["offered"] >= 12000, "the first bursts written")
                os.rename(path, path + ".moved")
                e.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: e.stats()["file"]["reconnects"] == 1, "the file reopened after SIGHUP")
        accepted = p.counts()
        wait_for(lambda: (lambda s: s and s["offered"] + s["daemon_lost"] >= 24000 and s)(settled(e)),
                 "the bursts written")
        check_eq(e.stop(), 0, "exporter exit status")
        f = e.stats()["file"]
        lines = steady = 0
        for name in glob.glob(path + "*"):
            check(os.path.getsize(name) <= 262144, f"{name} is at most MaxBytes=")
            with open(name) as fh:
                for line in fh:
                    ev = json.loads(line)
                    lines += 1
                    steady += ev.get("type_id") == 0x8310
        check_eq(f["exported"], lines, "written = the lines in all the files")
        check_eq(f["exported"] + f["export_dropped"], f["offered"], "offered = written + dropped")
        check_eq(f["export_dropped"], 0, "nothing dropped")
        check(f["rotations"] >= 10, f"rotated many times: {f['rotations']}")
        check_eq(f["reconnects"], 1, "reopened once, on SIGHUP")
        check(os.path.getsize(path + ".moved") > 0, "the moved file kept what was written before SIGHUP")
        check(steady > 0, f"the producer's records are in the files: {steady} ({accepted})")
    finally:
        if p:
            p.close()
        if e:
            e.cleanup()
        d.cleanup()
        shutil.rmtree(work, ignore_errors=True)


# Runs journald and the exporter in a mount namespace of their own: /run/systemd/journal (the
# sockets sd_journal_sendv() writes to) and the journal files are the test's, not the host's.
JOURNAL_WRAPPER = r"""
set -e
mount -t tmpfs tmpfs /run/systemd 2>/dev/null || { mkdir -p /run/systemd && mount -t tmpfs tmpfs /run/systemd; }
mkdir -p /run/systemd/journal /run/log
mount -t tmpfs tmpfs /run/log
[ -d /var/log/journal ] && mount -t tmpfs tmpfs /var/log/journal
"$JOURNALD" & j=$!
for i in $(seq 100); do [ -S /run/systemd/journal/socket ] && break; sleep 0.05; done
"$EXPORT" --config "$CONFIG" & x=$!
echo $x > "$WORK/exporter.pid"
wait $x || true
journalctl -D /run/log/journal -o json --no-pager SYSLOG_IDENTIFIER=perfrelay > "$WORK/journal.json"
kill $j
wait $j || true
"""


def test_journal_marker_and_rate_limit():
    if not os.access(JOURNALD, os.X_OK) or not shutil.which("journalctl") or not shutil.which("unshare"):
        skip("systemd-journald, journalctl or unshare is missing")
    work = tempfile.mkdtemp(prefix="perfrelay-export-journal-")
    d = Daemon(BINARY, "expjournal", stdout=False, config="[Probes]\nProbes=exec\n")
    e = unit = w = None
    try:
        d.start()
        e = Exporter(EXPORT, "journal", ["nats://127.0.0.1:1"], socket_path=d.socket_path,
                     extra="Types=exec\nTargets=journal\n[Journal]\nRateLimitPerSec=1\nRateLimitBurst=5\n")
        w = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", JOURNAL_WRAPPER],
                             env=dict(os.environ, JOURNALD=JOURNALD, EXPORT=EXPORT, CONFIG=e.config, WORK=work))
        pidfile = os.path.join(work, "exporter.pid")
        wait_for(lambda: os.path.exists(pidfile) and e.stats() is not None, "the exporter in its namespace")
        pid = int(open(pidfile).read())
        marker = os.path.join(work, f"prjmark{os.getpid()}")
        shutil.copy("/bin/true", marker)
        unit = UnitCgroup("journal")
        check_eq(unit.popen([marker, "journal-marker-arg"]).wait(), 0, "the marker's exit status")
        wait_for(lambda: e.stats()["journal"]["offered"] >= 1, "the marker's exec offered")
        # A burst of execs: more than RateLimitBurst= in well under a second.
        for _ in range(30):
            subprocess.run(["/bin/true"])
        wait_for(lambda: e.stats()["journal"]["offered"] >= 31, "the burst's execs offered")
        os.kill(pid, signal.SIGTERM)
        check_eq(w.wait(60), 0, "the namespace's script exit status")
        j = e.stats()["journal"]
        with open(os.path.join(work, "journal.json")) as f:
            entries = [json.loads(line) for line in f if line.strip()]
        check_eq(len(entries), j["exported"], "the journal's entries are exactly those counted as sent")
        check_eq(j["exported"] + j["export_dropped"], j["offered"], "offered = sent + dropped")
        check_eq(j["export_dropped"], j["dropped_rate"], "every drop is the rate limit's")
        check(j["dropped_rate"] > 0, f"the burst went past RateLimitBurst=: {j}")
        check(j["exported"] <= 5 + 60, f"at most the burst and one a second: {j}")
        m = [x for x in entries if x.get("PERFRELAY_FILENAME") == marker]
        check_eq(len(m), 1, "the marker's exec is one journal entry")
        m = m[0]
        check_eq(m["PERFRELAY_TYPE"], "exec", "PERFRELAY_TYPE=")
        check_eq(m["PERFRELAY_ARGV"], [marker, "journal-marker-arg"], "the arguments, one field each")
        check_eq(m["OBJECT_PID"], m["PERFRELAY_PID"], "OBJECT_PID= is the event's process")
        check_eq(m["UNIT"], unit.name, "UNIT= is its unit")
        check_eq(m["PERFRELAY_UNIT"], unit.name, "PERFRELAY_UNIT=")
        check(m["MESSAGE"].startswith(f"exec {m['PERFRELAY_PID']} (") and m["MESSAGE"].endswith(marker),
              f"MESSAGE: {m['MESSAGE']!r}")
    finally:
        if w and w.poll() is None:
            w.kill()
            w.wait()
        if e:
            e.cleanup()
        if unit:
            unit.remove()
        d.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(__file__)
