#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelay-export over TLS, against a CA this test makes with openssl: a nats-server -js and the
OpenTelemetry receiver that require a client certificate get every event; a server whose
certificate names another host is refused (nothing exported, every event counted dropped); the
key, CA and the OTLP API key come from $CREDENTIALS_DIRECTORY as LoadCredential= makes it; a
server off loopback without TLS is refused at start."""
import contextlib
import os
import shutil
import struct
import tempfile

from prtest import check, check_eq, daemon_binary, main, skip, wait_for
from prtest.natstest import NatsServer, require_nats_server
from prtest.exporttest import Exporter, write_frames
from prtest.otlpreceiver import Receiver, ensure_node_modules
from prtest.tlsca import TestCA

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
EXPORT = os.path.join(BUILDDIR, "client", "export", "perfrelay-export")

require_nats_server()
if not os.access(EXPORT, os.X_OK):
    skip("perfrelay-export was not built (libnats-dev missing)")

N = 2000
GOOD = ("IP:127.0.0.1", "DNS:localhost")
WRONG = ("DNS:wrong.example",)


class Setup:
    """A CA, a client certificate in a credentials directory (as LoadCredential= makes it), and a
    file of N frames for --input."""

    def __init__(self):
        self.ca = TestCA()
        self.creds = tempfile.mkdtemp(prefix="perfrelay-creds-")
        cert, key = self.ca.issue("exporter", usage="clientAuth")
        shutil.copy(cert, os.path.join(self.creds, "client.pem"))
        shutil.copy(key, os.path.join(self.creds, "client.key"))
        shutil.copy(self.ca.ca, os.path.join(self.creds, "ca.pem"))
        self.frames = os.path.join(self.creds, "frames")
        write_frames(self.frames, [(0x8001, 7, i % 2, i // 2, struct.pack("<Q", i)) for i in range(N)])
        self.env = {"CREDENTIALS_DIRECTORY": self.creds}

    def cleanup(self):
        self.ca.cleanup()
        shutil.rmtree(self.creds, ignore_errors=True)


@contextlib.contextmanager
def nats_tls(alt_names):
    """A Setup and a nats-server whose certificate names alt_names, removed afterwards."""
    s = Setup()
    srv = None
    try:
        cert, key = s.ca.issue("nats-" + alt_names[0].split(":")[1], alt_names)
        srv = NatsServer(tls=(s.ca.ca, cert, key)).start()
        yield s, srv
    finally:
        if srv:
            srv.cleanup()
        s.cleanup()


# Relative names: looked up in $CREDENTIALS_DIRECTORY.
NATS_TLS = "TLSCA=ca.pem\nTLSCert=client.pem\nTLSKey=client.key\n"


def test_nats_tls_verified():
    with nats_tls(GOOD) as (s, srv):
        e = Exporter(EXPORT, "tls", [f"tls://127.0.0.1:{srv.port}"], extra=f"[NATS]\n{NATS_TLS}")
        try:
            check_eq(e.start("--input", s.frames, env=s.env).wait(120), 0, f"export exit status: {e.stderr()}")
            st = e.stats()
            check_eq((st["offered"], st["exported"], st["export_dropped"], st["duplicates"]), (N, N, 0, 0),
                     "offered, exported, dropped, duplicates over TLS")
            check_eq(srv.jsz()["messages"], st["messages"], "the server stored every message published")
        finally:
            e.cleanup()


def test_nats_wrong_name_refused():
    """The CA is the right one; only the name is wrong: the exporter must not talk to it."""
    with nats_tls(WRONG) as (s, srv):
        e = Exporter(EXPORT, "tlswrong", [f"tls://127.0.0.1:{srv.port}"], extra=f"[NATS]\n{NATS_TLS}")
        try:
            e.start("--input", s.frames, env=s.env)
            # Three refused handshakes (each counted) are as many chances to talk to it: the
            # same CA and client certificate export everything in test_nats_tls_verified.
            st = wait_for(lambda: (lambda x: x if x and x["connect_failures"] >= 3 else None)(e.stats()),
                          "the exporter counts its refused connections")
            check(not st["connected"], f"not connected to a server with the wrong name: {st}")
            check(st["last_error"].startswith("connect: "), f"the stats say why: {st['last_error']!r}")
            check_eq(srv.jsz()["messages"], 0, "the server got no message")
            check_eq(e.stop(), 0, "exporter exit status after SIGTERM")
            st = e.stats()
            check_eq((st["offered"], st["exported"], st["export_dropped"]), (N, 0, N),
                     "every event is counted dropped, none exported")
        finally:
            e.cleanup()


def test_nats_down_at_start():
    """No server at start: the exporter reads its input, counts its failed rounds, stops at
    SIGTERM and counts every event dropped (nats.c used to retry inside connect, deaf to signals,
    and crashed at exit when nothing had been published)."""
    s = Setup()
    e = None
    try:
        e = Exporter(EXPORT, "down", ["nats://127.0.0.1:1"])
        e.start("--input", s.frames)
        st = wait_for(lambda: (lambda x: x if x and x["offered"] == N and x["connect_failures"] >= 2 else None)(e.stats()),
                      "the exporter read its input while no server answers")
        check_eq(st["last_error"], "connect: no server answered", "the reason")
        check_eq(e.stop(), 0, "exporter exit status after SIGTERM")
        st = e.stats()
        check_eq((st["offered"], st["exported"], st["export_dropped"], st["dropped_shutdown"]), (N, 0, N, N),
                 "every event is counted dropped at shutdown")
    finally:
        if e:
            e.cleanup()
        s.cleanup()


def test_nats_off_loopback_needs_tls():
    """A server off loopback with no TLS asked for: refused at start, naming the key."""
    e = Exporter(EXPORT, "plain", ["nats://u:secret@192.0.2.1:4222"])
    try:
        rc = e.start("--input", "/dev/null").wait(30)
        check_eq(rc, 1, "exit status")
        err = e.stderr()
        check("Servers=nats://192.0.2.1:4222 is not on loopback" in err and "RequireTLS=no" in err,
              f"the error names the server and the way out: {err!r}")
        check("secret" not in err, "the URL's password is not printed")
    finally:
        e.cleanup()


def otlp_conf(endpoint, extra=""):
    return (f"[Export]\nTargets=otlp\nMaxRetries=0\n[OTLP]\nEndpoint={endpoint}\nBatchEvents=500\n"
            "TLSCA=ca.pem\nTLSCert=client.pem\nTLSKey=client.key\nHeadersFile=otlp-headers\n" + extra)


def otlp_tls(alt_names):
    ensure_node_modules()
    s = Setup()
    with open(os.path.join(s.creds, "otlp-headers"), "w") as f:
        f.write("Authorization: Bearer perfrelay-test-key\n")
    cert, key = s.ca.issue("otlp", alt_names)
    return s, Receiver(tls=(s.ca.ca, cert, key), require_header="Authorization: Bearer perfrelay-test-key")


def test_otlp_tls_verified():
    s, rcv = otlp_tls(GOOD)
    e = None
    try:
        e = Exporter(EXPORT, "otlptls", ["nats://127.0.0.1:1"], extra=otlp_conf(rcv.endpoint))
        check_eq(e.start("--input", s.frames, env=s.env).wait(120), 0, f"export exit status: {e.stderr()}")
        o = e.stats()["otlp"]
        check_eq((o["offered"], o["exported"], o["export_dropped"]), (N, N, 0), "offered, exported, dropped")
        check_eq(len(rcv.records()), N, "the receiver decoded every event")
        counts = rcv.stop()
        check_eq(counts["unauthorized"], 0, "every request carried the header of HeadersFile=")
    finally:
        if e:
            e.cleanup()
        rcv.cleanup()
        s.cleanup()


def test_otlp_wrong_name_refused():
    s, rcv = otlp_tls(WRONG)
    e = None
    try:
        e = Exporter(EXPORT, "otlpwrong", ["nats://127.0.0.1:1"], extra=otlp_conf(rcv.endpoint))
        check_eq(e.start("--input", s.frames, env=s.env).wait(120), 0, f"export exit status: {e.stderr()}")
        o = e.stats()["otlp"]
        check_eq((o["offered"], o["exported"], o["export_dropped"]), (N, 0, N),
                 "every event is counted dropped, none exported")
        check("certificate" in o["last_error"].lower() or "ssl" in o["last_error"].lower(),
              f"the refusal is the certificate's: {o['last_error']!r}")
        counts = rcv.stop()
        check_eq(counts["requests"], 0, "no request reached the receiver")
    finally:
        if e:
            e.cleanup()
        rcv.cleanup()
        s.cleanup()


if __name__ == "__main__":
    main(__file__)
