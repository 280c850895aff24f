#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Restart keeps the kernel side: SIGKILL the daemon, the probes stay attached through their
pinned links, the map is reused, the producers count what was emitted with no ring mapped, and
events flow again after the restart. Also: incompatible pins and --cleanup."""
import os
import signal
import subprocess

import pytest

from prtest import LINK_PIN, bpftool_json, check, check_eq, Daemon, daemon_binary, link_ids, main, producer_counters
from prtest import run_true
from prtest import event_abi

BINARY = daemon_binary()


@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon):
    d = make_daemon("restart", start=False)
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup


LINKS = ("handle_exec", "handle_exit", "handle_fork", "handle_open_enter", "handle_open_exit",
         "handle_connect_enter", "handle_connect_exit")


def probe_links(d):
    """The built-in probes' pinned links, by name: their ids."""
    return {n: i for n, i in link_ids(d.pin_path).items() if n in LINKS}


def test_sigkill_restart(d):
    d.start()
    first = run_true("perfrelay-restart-marker")
    d.wait_event(lambda e: e["type"] == "exec" and e["pid"] == first, "exec before the kill")
    map_id = bpftool_json("map", "show", "pinned", f"{d.pin_path}/events")["id"]
    links_before = probe_links(d)

    d.stop(signal.SIGKILL)

    # Probes stay attached through their pinned links while no daemon runs.
    check_eq(probe_links(d), links_before, "pinned links survive SIGKILL")
    before = producer_counters(d.pin_path, event_abi.PRODUCER_EXEC)
    down = [run_true("perfrelay-restart-marker") for _ in range(20)]
    after = producer_counters(d.pin_path, event_abi.PRODUCER_EXEC)
    if LINK_PIN:
        check(after[0] - before[0] >= 20, f"exec attempts counted while down: {before} -> {after}")
        check(after[1] - before[1] >= 20,
              f"failures count the events emitted with no ring mapped: {before} -> {after}")
        check_eq(after[1] - before[1], after[0] - before[0], "every attempt while down failed")
    else:
        # docs/kernels.md, link_pin: the probes went with the daemon, so the gap's events are
        # neither emitted nor counted.
        check_eq(links_before, {}, "no link pinned on a kernel without link_pin")
        check_eq(after, before, "nothing emitted or counted while down without pinned links")

    d.start()
    at_ready = producer_counters(d.pin_path, event_abi.PRODUCER_EXEC)
    check_eq(bpftool_json("map", "show", "pinned", f"{d.pin_path}/events")["id"], map_id, "map reused (same id)")
    check_eq(probe_links(d), links_before, "links reused, not re-attached")
    check(not any(e["type"] == "exec" and e["pid"] in down for e in d.events),
          "no event emitted while down is delivered after the restart")
    again = run_true("perfrelay-restart-marker")
    d.wait_event(lambda e: e["type"] == "exec" and e["pid"] == again, "exec after the restart")
    final = producer_counters(d.pin_path, event_abi.PRODUCER_EXEC)
    check_eq(final[1], at_ready[1], "no new failures once the rings are mapped again")
    check_eq(d.stop(), 0, "clean exit")
    check_eq(any("pinned links reused" in l for l in d.stderr_lines), LINK_PIN, "daemon says it reused the links")


def test_probes_switched_off_in_config(d):
    d.write_config("[Probes]\nProbes=exec exit\n")
    d.start()
    check_eq(os.path.exists(f"{d.pin_path}/links/handle_exec"), LINK_PIN, "exec link pinned")
    check(not os.path.exists(f"{d.pin_path}/links/handle_open_enter"), "open link unpinned when Probes= drops it")
    path = f"/tmp/perfrelay-restart-open-{os.getpid()}"
    open(path, "w").close()
    os.unlink(path)
    pid = run_true("perfrelay-restart-marker")
    d.wait_event(lambda e: e["type"] == "exec" and e["pid"] == pid, "exec with open switched off")
    # Opens emitted before start-up detached the probe (the daemon's own) may still arrive;
    # the marker open happened after READY, with the probe gone.
    opens = [e for e in d.events if e["type"] == "open" and e.get("path") == path]
    check(not opens, f"no open event for the marker with the open probe off: {opens[:3]}")
    check(d.events, "other events still flow")
    check_eq(d.stop(), 0, "clean exit")
    d.write_config("")


def test_incompatible_pin():
    # A stray pin named like ours but of another shape: a clear error naming it, no start.
    other = Daemon(BINARY, "incompat")
    os.makedirs(other.pin_path, exist_ok=True)
    subprocess.run(["bpftool", "map", "create", f"{other.pin_path}/events", "type", "array", "key", "4",
                    "value", "8", "entries", "4", "name", "bogus"], check=True)
    try:
        r = subprocess.run([BINARY, "--config", other.config_path], capture_output=True, text=True, timeout=30)
        check(r.returncode != 0, "daemon refuses an incompatible pin")
        check(f"{other.pin_path}/events" in r.stderr, f"error names the pin: {r.stderr!r}")
        check("type is 2, expected 4" in r.stderr, f"error says what differs (type): {r.stderr!r}")
        check("value_size is 8, expected 4" in r.stderr, f"error says what differs (value size): {r.stderr!r}")
        # With ReplaceIncompatiblePins=yes it replaces the stray map and starts.
        other.write_config("ReplaceIncompatiblePins=yes\n")
        other.start()
        info = bpftool_json("map", "show", "pinned", f"{other.pin_path}/events")
        check_eq(info["type"], "perf_event_array", "replaced pin is a perf event array")
        check_eq(other.stop(), 0, "clean exit")
    finally:
        other.cleanup()


def test_cleanup_removes_every_pin(d):
    d.start()
    check_eq(d.stop(), 0, "clean exit")
    r = subprocess.run([BINARY, "--config", d.config_path, "--cleanup"], capture_output=True, text=True)
    check_eq(r.returncode, 0, f"--cleanup succeeds: {r.stderr}")
    check(not os.path.exists(d.pin_path), f"{d.pin_path} removed")
    check(not os.path.exists(f"{d.pin_path}/links"), "links directory removed")


def test_missing_bpffs_is_a_clear_error():
    t = Daemon(BINARY, "nobpffs", pin_path=f"/tmp/perfrelay-not-bpffs-{os.getpid()}/pins")
    try:
        r = subprocess.run([BINARY, "--config", t.config_path], capture_output=True, text=True, timeout=30)
        check(r.returncode != 0, "daemon refuses a pin path outside bpffs")
        check("is not a bpffs mount" in r.stderr or "is bpffs mounted" in r.stderr,
              f"error explains bpffs: {r.stderr!r}")
        check(t.pin_path in r.stderr, "error names the pin path")
    finally:
        subprocess.run(["rm", "-rf", os.path.dirname(t.pin_path), t.dir])


if __name__ == "__main__":
    main(__file__)
