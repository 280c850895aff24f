# SPDX-License-Identifier: LGPL-2.1-or-later
"""The OTLP/HTTP logs receiver of test_otlp.py and the benchmark's row (o): otlp-receiver.js
under Debian's nodejs, decoding with the OpenTelemetry project's own code (npm's
@opentelemetry/otlp-transformer), installed once per machine."""
import json
import os
import shutil
import subprocess
import tempfile

from prtest import Failure

HERE = os.path.dirname(os.path.abspath(__file__))
# The receiver's npm packages, installed once per machine (not in the build tree: a fresh
# build directory should not mean a fresh download).
NODE_DIR = "/var/cache/perfrelay-tests/otlp-node"
NODE_PACKAGES = ["@opentelemetry/otlp-transformer@0.52.1", "protobufjs@7"]


def ensure_node_modules():
    marker = os.path.join(NODE_DIR, "node_modules", "@opentelemetry", "otlp-transformer", "package.json")
    if os.path.exists(marker):
        return
    os.makedirs(NODE_DIR, exist_ok=True)
    r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", NODE_DIR] + NODE_PACKAGES,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise Failure(f"npm install of the receiver's packages failed: {r.stderr[-2000:]}")


class Receiver:
    """count_only: decode every request but write no record, only the counts at the end
    (for the benchmark: the receiver should cost as little as a collector's front end)."""

    def __init__(self, fail_first=0, count_only=False, tls=None, require_header=""):
        """tls: (CA, certificate, key) files: serve HTTPS and require a client certificate."""
        self.dir = tempfile.mkdtemp(prefix="perfrelay-otlp-")
        self.out = os.path.join(self.dir, "records.jsonl")
        env = dict(os.environ, OUT=self.out, FAIL_FIRST=str(fail_first), COUNT_ONLY="1" if count_only else "",
                   NODE_PATH=os.path.join(NODE_DIR, "node_modules"), REQUIRE_HEADER=require_header)
        if tls:
            env.update(TLS_CA=tls[0], TLS_CERT=tls[1], TLS_KEY=tls[2])
        self.proc = subprocess.Popen(["node", os.path.join(HERE, "otlp-receiver.js")], env=env,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            raise Failure(f"the OTLP receiver did not start (said {line!r})")
        self.endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{int(line)}"

    def records(self):
        if not os.path.exists(self.out):
            return []
        with open(self.out) as f:
            rows = [json.loads(l) for l in f if l.strip()]
        errors = [r for r in rows if "error" in r]
        if errors:
            raise Failure(f"the receiver could not decode a request: {errors[0]}")
        return [r for r in rows if "body" in r]

    def stop(self):
        """Stops the receiver; returns its request counts."""
        self.proc.terminate()
        self.proc.wait(30)
        with open(self.out) as f:
            rows = [json.loads(l) for l in f if l.strip()]
        return [r for r in rows if "requests" in r][-1]

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
