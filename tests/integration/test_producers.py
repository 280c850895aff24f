#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Discovery of third-party producers (daemon/decode/producer-scan.c, through the producer-scan tool): the
example producer, loaded after the daemon started, is found as a program using the daemon's
pinned events map, with a decoder for its declared record type and every field kind; once it is
unloaded, a new scan soon no longer lists it."""
import json
import os
import subprocess

import pytest

from prtest import check, check_eq, daemon_binary, main, wait_for

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
EXAMPLE = os.path.join(BUILDDIR, "examples", "example-producer")
SCAN = os.path.join(BUILDDIR, "tests", "integration", "producer-scan")



@pytest.fixture(scope="module", autouse=True)
def _setup(make_daemon):
    d = make_daemon("producers", stdout=False)
    return d


@pytest.fixture(scope="module", name="d")
def _fixture_d(_setup):
    return _setup



def scan(d):
    r = subprocess.run([SCAN, f"{d.pin_path}/events"], capture_output=True, text=True, timeout=30)
    check_eq(r.returncode, 0, f"producer-scan exit status (stderr: {r.stderr.strip()})")
    return json.loads(r.stdout)


def test_example_producer_is_found(d):
    before = scan(d)
    check(not any(t["name"] == "example" for t in before["types"]), f"no example type before loading: {before}")
    p = subprocess.Popen([EXAMPLE, d.pin_path, "3", "0", "--hold"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        check_eq(json.loads(line) if line else None, {"emitted": 3}, f"example producer output (stderr: {p.stderr.read() if not line else ''})")
        found = scan(d)
    finally:
        p.stdin.close()
        p.wait(30)
    check_eq(p.returncode, 0, "example producer exit status")

    names = [prog["name"] for prog in found["progs"]]
    check("example_emit" in names, f"the example program uses the daemon's events map: {names}")
    types = [t for t in found["types"] if t["type"] == 0x8001]
    check_eq(len(types), 1, f"one decoder for type 0x8001: {found['types']}")
    t = types[0]
    check_eq(t["name"], "example", "the type's name from PERFRELAY_RECORD")
    check_eq(t["refused"], "ok", "the type got a decoder")
    example_prog = [prog["id"] for prog in found["progs"] if prog["name"] == "example_emit"]
    check_eq(t["prog_id"], example_prog[0], "the type belongs to the example program")
    check_eq(t["fields"], [
        ["u8v", "uint", 0], ["s8v", "int", 0], ["u16v", "uint", 0], ["s16v", "int", 0], ["_pad", "uint", 0],
        ["u32v", "uint", 0], ["s32v", "int", 0], ["u64v", "uint", 0], ["s64v", "int", 0],
        ["color", "enum", 0], ["name", "string", 0],
        ["point", "struct", 0], ["x", "uint", 1], ["y", "int", 1], ["_pad", "uint", 1], ["", "struct_end", 0],
        ["values", "array", 0], ["", "uint", 1], ["", "uint", 1], ["", "uint", 1], ["", "array_end", 0],
        ["_pad2", "uint", 0],
    ], "the decoder's fields")

    # The daemon holds a producer's program open from its load until a scan described it (at
    # most the scan interval later, docs/producers.md): the kernel frees it then.
    after = wait_for(lambda: (lambda s: s if not any(prog["id"] == t["prog_id"] for prog in s["progs"]) else None)(scan(d)),
                     "the unloaded program is no longer listed", timeout=10)
    check(after is not None, "unloaded program no longer listed")


if __name__ == "__main__":
    main(__file__)
