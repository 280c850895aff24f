# SPDX-License-Identifier: LGPL-2.1-or-later
"""Constants of bpf/event.h that the tests need, read from the header so they cannot drift."""
import os
import re

from prtest import source_root

_HEADER = os.path.join(source_root(), "bpf", "event.h")
_defs = {}
with open(_HEADER) as f:
    for m in re.finditer(r"#define\s+PERFRELAY_(\w+)\s+(0x[0-9a-fA-F]+|\d+)u?\b", f.read()):
        _defs[m.group(1)] = int(m.group(2), 0)

MAGIC = _defs["MAGIC"]
VERSION = _defs["VERSION"]
MAX_PRODUCERS = _defs["MAX_PRODUCERS"]
PRODUCER_EXEC = _defs["PRODUCER_EXEC"]
PRODUCER_OPEN = _defs["PRODUCER_OPEN"]
PRODUCER_BENCH = _defs["PRODUCER_BENCH"]
TYPE_THIRD_PARTY_MIN = _defs["TYPE_THIRD_PARTY_MIN"]
