#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Third-party producers decoded from their own BTF (issue 12, docs/producers.md): the example
producer, loaded after the daemon started, is listed by ListProducers() (perfrelayctl producers)
with its declared producer id and name, its program and its record type's fields; its records
then reach subscribers with named fields of every kind and the right values, "types" selects it
by name and "where" selects exactly the matching records; the counters say so exactly."""
import json
import re
import os
import socket
import subprocess

import pytest

from prtest import check, check_eq, daemon_binary, main, read_line, wait_for

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
EXAMPLE = os.path.join(BUILDDIR, "examples", "example-producer")
HOSTILE = os.path.join(BUILDDIR, "tests", "integration", "hostile-producer")
FIELD_CLIENT = os.path.join(BUILDDIR, "tests", "integration", "field-client")
STEADY = os.path.join(BUILDDIR, "tests", "integration", "steady-producer")
STEADY_TYPE = 0x8310  # steady.bpf.c: a record type its BTF does not declare
PRODUCER, TYPE = 300, 0x8001
N = 20
LATE_N = 200



@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon, stats_bus):
    global bus
    bus = stats_bus
    d = make_daemon("btfprod", stdout=False, start=False)
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup



def producers():
    r = subprocess.run([bus.ctl, "producers", "--json"], capture_output=True, text=True, timeout=30)
    check_eq(r.returncode, 0, f"perfrelayctl producers --json exit status (stderr: {r.stderr.strip()})")
    return json.loads(r.stdout)


def example_entry():
    for p in producers():
        if p["id"] == PRODUCER and any(t["type"] == TYPE for t in p["types"]):
            return p
    return None



def expected(n):
    """The example producer's record number n (examples/producer/example.bpf.c)."""
    def s8(v):
        return v - 256 if v >= 128 else v

    def s16(v):
        return v - 65536 if v >= 32768 else v
    return {
        "u8v": 200 + (n & 15), "s8v": s8((-100 - (n & 15)) & 0xff),
        "u16v": 60000 + n, "s16v": s16((-30000 + n) & 0xffff), "_pad": 0,
        "u32v": 4000000000 + n, "s32v": -2000000000 + n,
        "u64v": 18000000000000000000 + n, "s64v": -9000000000000000000 + n,
        "color": "EXAMPLE_BLUE" if n & 1 else "EXAMPLE_GREEN",
        "name": "example",
        "point": {"x": n * 2, "y": s16((-n) & 0xffff), "_pad": 0},
        "values": [n, n + 1, n + 2],
        "_pad2": 0,
    }


def test_example_decoded(d):
    d.start()
    p = subprocess.Popen([EXAMPLE, d.pin_path, "0", "0", "--stdin"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        check_eq(json.loads(line) if line else None, {"emitted": 0},
                 f"example producer loaded (stderr: {p.stderr.read() if not line else ''})")

        # Found without a restart: ListProducers() scans again.
        entry = wait_for(example_entry, "ListProducers() lists the example producer")
        check_eq(entry["name"], "example_producer", "the producer's name from PERFRELAY_PRODUCER")
        check("example_emit" in [prog[1] for prog in entry["programs"]], f"its program: {entry['programs']}")
        t = [t for t in entry["types"] if t["type"] == TYPE][0]
        check_eq((t["name"], t["decoder"]), ("example", "ok"), "its record type and decoder")
        check_eq([f[0] for f in t["fields"] if f[2] == 0],
                 ["u8v", "s8v", "u16v", "s16v", "_pad", "u32v", "s32v", "u64v", "s64v", "color", "name",
                  "point", "values", "_pad2"], "the type's top-level fields")

        everything = d.client({"subscribe": {"types": ["example"]}}, hello=True)
        blue = d.client({"subscribe": {"types": ["example"], "where": {"color": "EXAMPLE_BLUE", "name": "example"}}}, hello=True)
        one = d.client({"subscribe": {"where": {"s8v": -101, "u64v": 18000000000000000001}}}, hello=True)
        builtin = d.client({"subscribe": {"types": ["exec"], "where": {"u8v": 200}}}, hello=True)
        # A binary client: the raw records, and their fields through libperfrelay's iterator
        # from the schema frame the daemon sends before the first one.
        binary = subprocess.Popen([FIELD_CLIENT, d.socket_path, "example", str(N)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        check_eq(binary.stdout.readline().strip(), "READY", "the binary client subscribed")

        p.stdin.write(f"{N}\n")
        p.stdin.flush()
        check_eq(json.loads(p.stdout.readline()), {"emitted": N}, "the example producer emitted")

        got = everything.events(N)
        for n, ev in enumerate(got):
            want = {"type": "example", "producer": PRODUCER, "producer_name": "example_producer"} | expected(n)
            check_eq({k: ev.get(k) for k in want}, want, f"record {n}'s fields")
        check_eq([ev["seq"] for ev in got], sorted(ev["seq"] for ev in got), "in emit order (one CPU)")
        check_eq([e["u16v"] for e in blue.events(N // 2)], [60000 + n for n in range(1, N, 2)],
                 "where color and name: exactly the odd records")
        check_eq([e["u16v"] for e in one.events(1)], [60001], "where s8v and u64v: exactly record 1")
        out, err = binary.communicate(timeout=60)
        check_eq(binary.returncode, 0, f"the binary client's exit status (stderr: {err.strip()})")
        fields = [json.loads(line) for line in out.splitlines()]
        check_eq(len(fields), N, "the binary client's records")
        for n, (b, j) in enumerate(zip(fields, got)):
            want = {k: v for k, v in j.items() if k not in ("ts", "cpu", "producer", "unit")}
            check_eq(b, want, f"record {n}: the binary client's fields are the JSON client's")

        # Exact counts: the readers published N records with named fields; every client was
        # offered exactly what its filter selects, the built-in one with a where nothing.
        def settled():
            st = bus.stats()
            clients = sorted(st["client_list"], key=lambda c: c["id"])
            offered = [c["offered"] for c in clients]
            return st if offered == [N, N // 2, 1, 0] and all(c["sent"] == c["offered"] for c in clients) else None
        st = wait_for(settled, "the clients' counters")
        entry = example_entry()
        check_eq({k: entry[k] for k in ("attempts", "received", "failures", "malformed", "seq_gaps")},
                 {"attempts": N, "received": N, "failures": 0, "malformed": 0, "seq_gaps": 0},
                 "ListProducers() counts the example producer's records")
        table = subprocess.run([bus.ctl, "producers"], capture_output=True, text=True, timeout=30)
        check_eq(table.returncode, 0, f"perfrelayctl producers (stderr: {table.stderr.strip()})")
        check("example_producer" in table.stdout and "type 0x8001 example: decoder ok" in table.stdout,
              f"the table lists the producer and its type: {table.stdout}")
        # perfrelay's own producers are named too (they were bare ids with name "-").
        names = {p["id"]: p["name"] for p in producers()}
        check_eq(names.get(1), "exec", "ListProducers() names producer 1")
        check(re.search(r"^1 +exec ", table.stdout, re.M), f"the table names producer 1 exec: {table.stdout}")
        # What completions offer for monitor --type: every declared type's name, one per line.
        types = subprocess.run([bus.ctl, "producers", "--types"], capture_output=True, text=True, timeout=30)
        check_eq((types.returncode, "example" in types.stdout.split("\n")), (0, True),
                 f"perfrelayctl producers --types: {types.stdout!r} {types.stderr.strip()}")
        check_eq(sum(r["btf_decoded"] for r in st["readers"]), N, "btf_decoded over the readers")
        check_eq(sum(r["btf_short"] for r in st["readers"]), 0, "btf_short")
        for c in (everything, blue, one, builtin):
            c.close()
    finally:
        p.stdin.close()
        p.wait(30)
    check_eq(p.returncode, 0, "example producer exit status")
    d.stop()


def test_late_producer(d):
    """A producer loaded after the daemon started is decoded from its first record: the daemon
    learns of the program when it loads (the load watch) and holds records of a type it has no
    decoder for until a scan made after they were emitted is done. Each run of the example
    loader loads, emits LATE_N records at once and unloads within a few milliseconds, so the
    program is gone before its records are read: its BTF was taken when it loaded."""
    d.start()
    c = d.client({"subscribe": {"types": [TYPE]}}, hello=True)
    fast = 0
    try:
        for run, cpu in enumerate([0, 1 % os.cpu_count(), 0]):
            r = subprocess.run([EXAMPLE, d.pin_path, str(LATE_N), str(cpu), "--timed"], capture_output=True,
                               text=True, timeout=60)
            check_eq((r.returncode, r.stdout.strip()), (0, json.dumps({"emitted": LATE_N}, separators=(",", ":"))),
                     f"run {run}: the example producer emitted and exited (stderr: {r.stderr.strip()})")
            lived = json.loads(r.stderr.strip().splitlines()[-1])["loaded_ns"]
            print(f"run {run}: the program lived {lived / 1e6:.1f} ms from its load to its unload call")
            fast += lived < 50_000_000
            got = c.events(LATE_N)
            check_eq([ev["type"] for ev in got].count("unknown"), 0,
                     f"run {run} (CPU {cpu}): no record of the late producer published as unknown")
            for n, ev in enumerate(got):
                want = {"type": "example", "producer": PRODUCER, "producer_name": "example_producer"} | expected(n)
                check_eq({k: ev.get(k) for k in want}, want, f"run {run}: record {n}'s fields")
        # The loader is quick: at least one run's program lived less than 50 ms (all, unloaded).
        check(fast > 0, "a program that loaded, emitted and unloaded within 50 ms was among them")
        st = bus.stats()
        check_eq(sum(r["btf_decoded"] for r in st["readers"]), 3 * LATE_N, "btf_decoded over the readers")
        check_eq(sum(r["decoder_hold_expired"] for r in st["readers"]), 0, "no hold ran out of time")
        check_eq(st["producer_scan"]["watching"], True, "program loads are watched")
        check(st["producer_scan"]["loads"] >= 3, f"the three loads were seen: {st['producer_scan']}")
    finally:
        c.close()
    d.stop()


def test_hostile_btf_refused(d):
    """Declarations no decoder may be built for are refused with their reason, counted, and the
    records of such a type still arrive as "unknown" with their payload."""
    d.start()
    unknown = d.client({"subscribe": {"types": [0x8123]}}, hello=True)
    p = subprocess.Popen([HOSTILE, d.pin_path, "1", "0", "--hold"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        check(line, f"hostile producer ran (stderr: {p.stderr.read() if not line else ''})")
        sent = json.loads(line)["sent"]
        check_eq(sent[8], 1, "the hostile producer's valid record of type 0x8123 was taken by the kernel")
        ev = unknown.events(1)[0]
        check_eq((ev["type"], ev["type_id"], ev["producer"]), ("unknown", 0x8123, 300),
                 "a record whose type was refused a decoder is published as unknown")
        check("payload" in ev, "with its payload")

        def refused():
            for entry in producers():
                types = {t["type"]: t for t in entry["types"]}
                if 0x8123 in types:
                    return entry, types
            return None
        entry, types = wait_for(refused, "ListProducers() lists the hostile program's declarations")
        check_eq(entry["id"], 0, "a program without PERFRELAY_PRODUCER is listed under id 0")
        check_eq({t: types[t]["decoder"] for t in (0x8123, 0x8124, 0x8125, 0x8126, 0x8127)},
                 {0x8123: "too-deep", 0x8124: "array-too-large", 0x8125: "out-of-bounds",
                  0x8126: "reserved-name", 0x8127: "reserved-name"},
                 "each refusal names its reason (a type may not be named like the daemon's lines or a built-in type)")
        check(all(not types[t]["fields"] for t in types), "no fields without a decoder")
        st = bus.stats()["producer_scan"]
        check_eq(st["refused"], 5, "the current scan's refused declarations")
        check(st["scans"] >= 2, f"scans counted: {st}")
        check(st["programs"] >= 1, f"programs counted: {st}")
    finally:
        p.stdin.close()
        p.wait(30)
        unknown.close()
    check_eq(p.returncode, 0, "hostile producer exit status")
    d.stop()


def test_undeclared_type_unknown(d):
    """No regression: a record type nobody declared is published as before, "unknown" with its
    payload in base64, and asks for no decoder that could not be built."""
    d.start()
    c = d.client({"subscribe": {"types": [STEADY_TYPE]}}, hello=True)
    p = subprocess.Popen([STEADY, d.pin_path, "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        p.stdin.write("burst 3\n")
        p.stdin.flush()
        check(p.stdout.readline().strip(), "the steady producer answered")
        evs = c.events(3)
        check_eq([(e["type"], e["type_id"]) for e in evs], [("unknown", STEADY_TYPE)] * 3,
                 "records of an undeclared type are unknown")
        check(all(e["payload"] for e in evs), "with their payload")
        check_eq(bus.stats()["producer_scan"]["refused"], 0, "nothing refused")
    finally:
        p.stdin.close()
        p.wait(30)
        c.close()
    d.stop()


def test_request_errors(d):
    d.start()
    for request, want in [
        ({"subscribe": {"where": {"x": 1.5}}}, "expected an integer or a string"),
        ({"subscribe": {"where": {"no-ident": 1}}}, "is not a field name"),
        ({"subscribe": {"where": {f"f{i}": i for i in range(9)}}}, "more than 8 conditions"),
        ({"subscribe": {"types": ["not a name"]}}, "neither a built-in type"),
    ]:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(d.socket_path)
        s.sendall((json.dumps(request) + "\n").encode())
        reply = json.loads(read_line(s, 10))
        s.close()
        check_eq(reply["type"], "error", f"{request} refused")
        check(want in reply["message"], f"{request}: message names the fault: {reply['message']}")
    d.stop()


if __name__ == "__main__":
    main(__file__)
