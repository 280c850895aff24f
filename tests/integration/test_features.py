#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Kernel feature probing (docs/kernels.md): on this kernel every feature is on and reported so on
D-Bus and by perfrelayctl status; a required feature forced off ($PERFRELAY_TEST_DISABLE_FEATURES,
test-only) makes the daemon refuse to start with exit status 3 and the documented message, before
it pins anything; an optional one forced off leaves it running, reporting the feature off, and
doing what docs/kernels.md says it does without it (link_pin: probes attached, links unpinned)."""
import json
import os
import shutil
import subprocess

import pytest

from prtest import Failure, bpftool_json, check, check_eq, daemon_binary, kernel_version, main, skip, wait_for

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
SRCDIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CTL = os.path.join(BUILDDIR, "client", "perfrelayctl")
DOC = os.path.join(SRCDIR, "docs", "kernels.md")

for tool in ("dbus-daemon", "busctl"):
    if not shutil.which(tool):
        skip(f"{tool} is not installed")

REQUIRED = ["perf_event_array", "preserve_elems", "btf", "tracepoint", "perf_event_output",
            "ktime_get_boot_ns", "tp_btf"]
OPTIONAL = ["link_pin", "mmapable", "task_storage", "membarrier", "bpf_event", "fetch_atomics", "ancestor_cgroup"]
# The minimum versions docs/kernels.md documents (and the daemon's messages name).
SINCE = {"perf_event_array": "4.3", "preserve_elems": "5.10", "btf": "5.4", "tracepoint": "4.7",
         "perf_event_output": "4.7", "ktime_get_boot_ns": "5.8", "tp_btf": "5.5", "link_pin": "5.15",
         "mmapable": "5.5", "task_storage": "5.11", "membarrier": "4.14",
         "bpf_event": "5.1", "fetch_atomics": "5.12", "ancestor_cgroup": "5.12"}

# What this kernel has: every feature docs/kernels.md dates at or before its version (the
# kernels suite runs this file on Debian's 5.10, 6.1 and 6.12 too).
HERE = {name: kernel_version(since) <= kernel_version() for name, since in SINCE.items()}
PRODUCER_EXEC = 1  # PERFRELAY_PRODUCER_EXEC (bpf/event.h)
LINKS = ("handle_exec", "handle_exit", "handle_fork", "handle_open_enter", "handle_open_exit",
         "handle_connect_enter", "handle_connect_exit")



@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, stats_bus):
    global BUS, ADDRESS
    BUS = stats_bus  # a private system bus; its address is exported to the daemons
    ADDRESS = BUS.address
    d = make_daemon("features", start=False)
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup



def start_with(d, disabled):
    # From a clean pin root: links pinned by an earlier step would otherwise be reused.
    subprocess.run([BINARY, "--config", d.config_path, "--cleanup"], capture_output=True, check=True)
    if disabled:
        os.environ["PERFRELAY_TEST_DISABLE_FEATURES"] = ",".join(disabled)
    try:
        d.start()
    finally:
        os.environ.pop("PERFRELAY_TEST_DISABLE_FEATURES", None)


def bus_features():
    r = subprocess.run(["busctl", f"--address={ADDRESS}", "--json=short", "get-property", "org.perfrelay1", "/org/perfrelay1",
                        "org.perfrelay1.Manager", "KernelFeatures"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise Failure(f"busctl get-property KernelFeatures failed: {r.stderr.strip()}")
    got = json.loads(r.stdout)
    check_eq(got["type"], "a(sbbss)", "KernelFeatures signature")
    return {name: {"available": a, "required": req, "since": since, "without": without}
            for name, a, req, since, without in got["data"]}


def ctl_status():
    r = subprocess.run([CTL, "status", "--json"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise Failure(f"perfrelayctl status --json failed: {r.stderr.strip()}")
    text = subprocess.run([CTL, "status"], capture_output=True, text=True, timeout=30)
    if text.returncode != 0:
        raise Failure(f"perfrelayctl status failed: {text.stderr.strip()}")
    return {f["name"]: f for f in json.loads(r.stdout)["kernel_features"]}, text.stdout


def check_table(bus):
    check_eq(sorted(bus), sorted(REQUIRED + OPTIONAL), "KernelFeatures names")
    for name, f in bus.items():
        check_eq(f["required"], name in REQUIRED, f"{name}: required")
        check_eq(f["since"], SINCE[name], f"{name}: since")
        check(f["without"], f"{name}: says what is off without it")


def test_all_on_here(d):
    """This kernel has every feature docs/kernels.md dates at or before its version, and no
    other; the links are pinned where the kernel can pin them, and the objects' compat build is
    loaded only where the kernel needs it."""
    start_with(d, [])
    try:
        bus = bus_features()
        check_table(bus)
        for name, f in bus.items():
            check_eq(f["available"], HERE[name], f"{name} available on this kernel ({os.uname().release})")
        ctl, text = ctl_status()
        check_eq({n: f["available"] for n, f in ctl.items()}, {n: HERE[n] for n in bus}, "perfrelayctl status --json")
        for name in bus:
            check(f" {name}={'on' if HERE[name] else 'off'}" in text, f"perfrelayctl status shows {name}:\n{text}")
        for link in LINKS:
            check_eq(os.path.exists(f"{d.pin_path}/links/{link}"), HERE["link_pin"], f"link {link} pinned")
        compat = not (HERE["fetch_atomics"] and HERE["ancestor_cgroup"])
        check_eq(fetch_atomics(d, "handle_exec"), not compat,
                 "the exec probe takes its seq with a fetching atomic, unless the compat build is loaded")
    finally:
        d.stop()


def fetch_atomics(d, name):
    """Whether the daemon's loaded program `name` has a fetching atomic (BPF_FETCH, Linux 5.12)."""
    # Every emitter counts its attempts in the pinned "counters".
    counters = bpftool_json("map", "show", "pinned", f"{d.pin_path}/counters")["id"]
    progs = [p["id"] for p in bpftool_json("prog", "show") if p.get("name") == name and counters in p.get("map_ids", [])]
    check_eq(len(progs), 1, f"one program {name} of this daemon")
    r = subprocess.run(["bpftool", "prog", "dump", "xlated", "id", str(progs[0])], capture_output=True, text=True,
                       timeout=30)
    check_eq(r.returncode, 0, f"bpftool prog dump xlated id {progs[0]}: {r.stderr.strip()}")
    return "fetch_add(" in r.stdout


def test_no_fetch_atomics_loads_the_older_build(d):
    """fetch_atomics off (a kernel before 5.12): the daemon runs, says so, loads the objects'
    build without fetching atomics, and its probes deliver with the ledger exact."""
    start_with(d, ["fetch_atomics"])
    try:
        bus = bus_features()
        check_eq(bus["fetch_atomics"]["available"], False, "fetch_atomics reported off on D-Bus")
        ctl, text = ctl_status()
        check(" fetch_atomics=off" in text, f"perfrelayctl status shows fetch_atomics=off:\n{text}")
        for name in ("handle_exec", "handle_fork", "handle_exit"):
            check(not fetch_atomics(d, name), f"{name}: no fetching atomic in the compat build")
        procs = []
        for i in range(20):
            p = subprocess.Popen(["/bin/true", f"perfrelay-nofetch-{i}"])
            p.wait()
            procs.append(p.pid)
        for pid in procs:
            d.wait_event(lambda e, pid=pid: e.get("type") == "exec" and e.get("pid") == pid, f"exec of {pid}")
        # The seq is read back after the add there: the counts must stay exact all the same.
        p = wait_for(lambda: (lambda q: q if q["attempts"] == q["received"] + q["malformed"] + q["failures"]
                              + q["crash_lost"] else None)(BUS.producer(PRODUCER_EXEC)),
                     "exec: attempts = received + malformed + failures + crash_lost")
        check_eq(p["hits"], p["filtered"] + p["attempts"], "exec: hits = filtered + attempts")
        check(p["received"] >= len(procs), f"exec: received {p['received']} >= the {len(procs)} marked execs")
        check_eq(p["seq_gaps"], 0, "exec: no seq gap")
    finally:
        d.stop()


def test_optional_missing_keeps_running(d):
    """link_pin off: the daemon runs, reports it off, attaches the probes without pinning them,
    and still delivers events."""
    start_with(d, ["link_pin"])
    try:
        bus = bus_features()
        check_table(bus)
        check_eq(bus["link_pin"]["available"], False, "link_pin reported off on D-Bus")
        for name in REQUIRED + OPTIONAL:
            if name != "link_pin":
                check_eq(bus[name]["available"], HERE[name], f"{name} as this kernel has it")
        ctl, text = ctl_status()
        check_eq(ctl["link_pin"]["available"], False, "link_pin off in perfrelayctl status --json")
        check(" link_pin=off" in text, f"perfrelayctl status shows link_pin=off:\n{text}")
        check(f"off: link_pin (Linux 5.15): {bus['link_pin']['without']}" in text,
              f"perfrelayctl status says what is off without link_pin:\n{text}")
        check_eq(sorted(os.listdir(f"{d.pin_path}/links")), [], "no link pinned without link_pin")
        p = subprocess.Popen(["/bin/true", "perfrelay-features-marker"])
        p.wait()
        d.wait_event(lambda e: e.get("type") == "exec" and e.get("pid") == p.pid, "exec of the marker")
    finally:
        d.stop()


def test_required_missing_refuses(d):
    """Each required feature forced off: exit status 3, the documented message, nothing pinned."""
    with open(DOC) as f:
        doc = f.read()
    for name in ("preserve_elems", "btf", "perf_event_array"):
        subprocess.run([BINARY, "--config", d.config_path, "--cleanup"], capture_output=True, check=True)
        os.environ["PERFRELAY_TEST_DISABLE_FEATURES"] = name
        try:
            r = subprocess.run([BINARY, "--config", d.config_path], capture_output=True, text=True, timeout=60)
        finally:
            os.environ.pop("PERFRELAY_TEST_DISABLE_FEATURES", None)
        check_eq(r.returncode, 3, f"exit status without {name}")
        msg = f"The running kernel lacks the required feature {name} (Linux {SINCE[name]} or newer has it)"
        check(msg in r.stderr, f"message without {name}: {r.stderr!r}")
        check("exit status 3" in doc and "The running kernel lacks the required feature" in doc,
              "docs/kernels.md documents the message and the exit status")
        check(not os.path.exists(f"{d.pin_path}/events"), f"nothing pinned without {name}")


if __name__ == "__main__":
    main(__file__)
