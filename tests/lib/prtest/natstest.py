# SPDX-License-Identifier: LGPL-2.1-or-later
"""Real nats-server processes for the export tests (single server or a three-node JetStream
cluster on loopback ports picked here), and a minimal NATS protocol client that reads a stream
back through the JetStream API (Debian ships no Python NATS client)."""
import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

from prtest import Failure, free_port, skip

NATS_SERVER = shutil.which("nats-server") or "/usr/bin/nats-server"


def require_nats_server():
    if not os.access(NATS_SERVER, os.X_OK):
        skip("nats-server is not installed (apt-get install nats-server)")


class NatsServer:
    """One nats-server -js with its own store directory; cluster peers share a routes list."""

    def __init__(self, name="n1", cluster_port=None, routes=(), tls=None):
        """tls: (CA, certificate, key) files: clients must speak TLS and show a certificate the CA
        signed; the monitoring port (jsz()) is opened too."""
        self.name = name
        self.port = free_port()
        self.monitor_port = free_port() if tls else None
        self.cluster_port = cluster_port
        self.routes = list(routes)
        self.dir = tempfile.mkdtemp(prefix=f"perfrelay-nats-{name}-")
        self.proc = None
        conf = [f'server_name: "{name}"', "listen: 127.0.0.1:%d" % self.port,
                'jetstream { store_dir: "%s" }' % self.dir]
        if cluster_port:
            conf.append('cluster { name: "perfrelay-test", listen: 127.0.0.1:%d, routes: [%s] }' %
                        (cluster_port, ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in self.routes)))
        if tls:
            conf.append('tls { ca_file: "%s", cert_file: "%s", key_file: "%s", verify: true, timeout: 2 }' % tls)
            conf.append("http: 127.0.0.1:%d" % self.monitor_port)
        self.conf = os.path.join(self.dir, "server.conf")
        with open(self.conf, "w") as f:
            f.write("\n".join(conf) + "\n")

    @property
    def url(self):
        return f"nats://127.0.0.1:{self.port}"

    def start(self):
        self.proc = subprocess.Popen([NATS_SERVER, "-c", self.conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise Failure(f"nats-server {self.name} exited with {self.proc.returncode}")
                time.sleep(0.05)
        raise Failure(f"nats-server {self.name} did not listen on {self.port}")

    def jsz(self):
        """The monitoring endpoint's JetStream figures (messages stored, streams)."""
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor_port}/jsz", timeout=10) as r:
            return json.loads(r.read())

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def cleanup(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def cluster(n=3):
    cports = [free_port() for _ in range(n)]
    return [NatsServer(f"n{i + 1}", cports[i], [p for j, p in enumerate(cports) if j != i]) for i in range(n)]


class NatsClient:
    """Just enough of the NATS protocol for JetStream API requests: CONNECT, SUB, PUB, MSG/HMSG."""

    def __init__(self, url, timeout=10):
        host, port = url.rsplit("/", 1)[-1].split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.buf = b""
        self.sid = 0
        self._line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\nPING\r\n')
        while self._line() != b"PONG":
            pass
        self.inbox = "_INBOX.perfrelaytest%d" % os.getpid()
        self.sock.sendall(f"SUB {self.inbox} 1\r\n".encode())

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise Failure("nats-server closed the connection")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def request(self, subject, payload):
        data = json.dumps(payload).encode() if payload is not None else b""
        self.sock.sendall(f"PUB {subject} {self.inbox} {len(data)}\r\n".encode() + data + b"\r\n")
        while True:
            line = self._line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"MSG "):
                n = int(line.split()[-1])
                return json.loads(self._take(n))
            elif line.startswith(b"HMSG "):
                parts = line.split()
                hlen, total = int(parts[-2]), int(parts[-1])
                body = self._take(total)
                status = body[:hlen].split(b"\r\n")[0]
                raise Failure(f"JetStream API {subject}: {status.decode(errors='replace')}")
            elif line.startswith(b"-ERR"):
                raise Failure(f"nats-server: {line.decode(errors='replace')}")

    def stream_info(self, stream):
        return self.request(f"$JS.API.STREAM.INFO.{stream}", None)

    def stream_messages(self, stream):
        return self.stream_info(stream)["state"]["messages"]

    def get(self, stream, seq):
        """(subject, headers dict, data bytes) of the message with stream sequence seq."""
        r = self.request(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
        if "error" in r:
            raise Failure(f"message {seq} of {stream}: {r['error']}")
        m = r["message"]
        headers = {}
        if m.get("hdrs"):
            for line in base64.b64decode(m["hdrs"]).decode().split("\r\n")[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip()] = v.strip()
        return m["subject"], headers, base64.b64decode(m.get("data", ""))

    def close(self):
        self.sock.close()

