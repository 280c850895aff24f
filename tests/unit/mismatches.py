# SPDX-License-Identifier: LGPL-2.1-or-later
"""What a test of the unit suite found wrong so far (tests/unit/conftest.py reports it)."""
failures = []


def fail(msg):
    failures.append(msg)


def expect_eq(got, want, what):
    if got != want:
        fail(f"{what}: got {got!r}, want {want!r}")
