# SPDX-License-Identifier: LGPL-2.1-or-later
"""The fixture of the system suite: Debian 12 and 13 containers under a real systemd (nspawn.py)."""
import os

import pytest

import nspawn

# The unit's ExecStartPre makes the default pin root on the bpffs the containers share with the
# host, whatever PinPath= a test gives its daemon.
DEFAULT_PIN = "/sys/fs/bpf/perfrelay"


@pytest.fixture
def container():
    """container(name, release="bookworm"): a copy of the release's cached rootfs (debootstrapped
    once), not booted yet, so that the test can install into it first; powered off and removed
    after the test. Skips where systemd-nspawn cannot run at all."""
    nspawn.require()
    made = []
    had_default_pin = os.path.exists(DEFAULT_PIN)

    def make(name, release="bookworm"):
        made.append(nspawn.Container(name, release))
        return made[-1]

    yield make
    for c in reversed(made):
        c.__exit__(None, None, None)
    if not had_default_pin:
        try:
            os.rmdir(DEFAULT_PIN)  # empty, or not ours to remove
        except OSError:
            pass
