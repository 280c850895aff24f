# SPDX-License-Identifier: LGPL-2.1-or-later
"""The python tests of the unit suite (the manual pages, the completions) check documents
against the tree: each test reports every mismatch it finds (mismatches.fail()), not only the
first, and fails at its end if there was one."""
import pytest

import mismatches


@pytest.fixture(autouse=True)
def _report_mismatches():
    mismatches.failures.clear()
    yield
    assert not mismatches.failures, "\n".join(mismatches.failures)
