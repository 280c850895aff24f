# SPDX-License-Identifier: LGPL-2.1-or-later
"""The steady third-party producer (steady-producer.c, steady.bpf.c) as a test fixture: one
command line in, one answer line out. It counts the records the kernel accepted on its own,
independently of perfrelay's maps."""
import json
import os
import struct
import subprocess

from prtest import Failure

PRODUCER = 310       # steady.bpf.c's producer id
STEADY_TYPE = 0x8310  # its record type
CHECK_MUL = 0x9E3779B97F4A7C15


def payload_checks_out(payload):
    """Whether a steady record's payload (after the header: call, check[4]) is whole."""
    if len(payload) != 40:
        return False
    call, *check = struct.unpack("<5Q", payload)
    return all(c == (call * CHECK_MUL + i) % (1 << 64) for i, c in enumerate(check))


class SteadyProducer:
    def __init__(self, builddir, pin_path, cpu, cgroup=None):
        """cgroup: a prtest.UnitCgroup the producer runs in (its records are emitted there)."""
        binary = os.path.join(builddir, "tests", "integration", "steady-producer")
        if not os.access(binary, os.X_OK):
            raise Failure(f"{binary} is missing (meson compile builds it)")
        self.proc = subprocess.Popen([binary, pin_path, str(cpu)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, preexec_fn=cgroup.enter if cgroup else None)

    def cmd(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer or answer.startswith("error"):
            raise Failure(f"steady producer: {line!r} -> {answer!r} (exit {self.proc.poll()})")
        return answer

    def counts(self):
        return json.loads(self.cmd("counts"))

    def close(self):
        """Detaches the program: its counts are final."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)
