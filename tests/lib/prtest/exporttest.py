# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelay-export under test: its own config, stats file and directory; counters come from
`perfrelay-export --stats-json` (the stats file), never from its log."""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

from prtest import Failure

HDR = struct.Struct("<HBBHHIIQQ")  # struct perfrelay_hdr (bpf/event.h)


def _mix64(x):
    x &= (1 << 64) - 1
    x ^= x >> 30
    x = (x * 0xbf58476d1ce4e5b9) & ((1 << 64) - 1)
    x ^= x >> 27
    x = (x * 0x94d049bb133111eb) & ((1 << 64) - 1)
    return x ^ (x >> 31)


def batch_digest(hdrs):
    """The digest in a batch's message id (docs/export.md), from its records' headers (HDR tuples)."""
    d = 0
    for h in hdrs:
        _, _, _, typ, _, producer, cpu, seq, ts = h
        r = _mix64(seq ^ _mix64(producer << 32 | cpu) ^ _mix64((ts + typ) & ((1 << 64) - 1)))
        d = (((d << 7) | (d >> 57)) & ((1 << 64) - 1)) ^ r
    return d


def boot_id():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


UNIT_TYPE = 0x7ffd  # PERFRELAY_TYPE_UNIT


def parse_batch(data):
    """A message's batch (docs/export.md, "Batches") → [(hdr tuple, record bytes, unit or None)].
    Fails on anything that is not a valid frame."""
    out, pos, unit = [], 0, None
    while pos < len(data):
        if len(data) - pos < 4:
            raise Failure(f"batch: a length cut short at {pos}")
        (n,) = struct.unpack_from("<I", data, pos)
        rec = data[pos + 4:pos + 4 + n]
        if len(rec) != n or n < HDR.size:
            raise Failure(f"batch: frame at {pos} of {n} bytes overruns the message")
        hdr = HDR.unpack_from(rec)
        pos += 4 + n
        if hdr[3] == UNIT_TYPE:
            unit = rec[HDR.size + 8:].split(b"\0", 1)[0].decode()
            continue
        out.append((hdr, rec, unit))
        unit = None
    return out


def stream_events(nc, stream):
    """Every record stored in a stream, message by message: [(headers, [(hdr, record, unit)])]."""
    n = nc.stream_info(stream)["state"]["last_seq"]
    msgs = []
    for seq in range(1, n + 1):
        _, headers, data = nc.get(stream, seq)
        recs = parse_batch(data)
        if headers.get("Perfrelay-Count") != str(len(recs)):
            raise Failure(f"message {seq}: Perfrelay-Count {headers.get('Perfrelay-Count')} but {len(recs)} records")
        msgs.append((headers, recs))
    return msgs


def write_frames(path, records):
    """records: (type, producer, cpu, seq, payload[, hdr_size]) → the socket's binary frames in
    a file. hdr_size defaults to the whole record; a packet's is its fixed part (its bytes follow)."""
    from prtest.event_abi import MAGIC, VERSION
    with open(path, "wb") as f:
        for typ, producer, cpu, seq, payload, *hsize in records:
            size = HDR.size + len(payload)
            f.write(struct.pack("<I", size)
                    + HDR.pack(MAGIC, VERSION, 0, typ, hsize[0] if hsize else size, producer, cpu, seq, seq * 1000)
                    + payload)


class Exporter:
    def __init__(self, binary, tag, servers, extra="", socket_path=None):
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix=f"perfrelay-export-{tag}-")
        self.stats_file = os.path.join(self.dir, "stats.json")
        self.config = os.path.join(self.dir, "export.conf")
        with open(self.config, "w") as f:
            f.write(f"[NATS]\nServers={' '.join(servers)}\n[Export]\nStatsFile={self.stats_file}\n"
                    + (f"Socket={socket_path}\n" if socket_path else "") + extra + "\n")
        self.proc = None
        self.err = None

    def start(self, *args, env=None):
        """env: variables added to the exporter's environment (CREDENTIALS_DIRECTORY)."""
        self.err = open(os.path.join(self.dir, "stderr"), "w+")
        self.proc = subprocess.Popen([self.binary, "--config", self.config] + list(args),
                                     stdout=subprocess.DEVNULL, stderr=self.err,
                                     env=dict(os.environ, **(env or {})))
        return self

    def stats(self):
        r = subprocess.run([self.binary, "--config", self.config, "--stats-json"], capture_output=True, text=True)
        if r.returncode != 0:
            return None
        return json.loads(r.stdout)

    def wait(self, timeout=60):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Failure(f"perfrelay-export did not exit within {timeout}s")
        self.proc = None
        return rc

    def stop(self, timeout=60):
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def cleanup(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.err:
            sys.stderr.write(self.stderr())
            self.err.close()
        shutil.rmtree(self.dir, ignore_errors=True)
