# SPDX-License-Identifier: LGPL-2.1-or-later
"""What every python suite of perfrelay shares under pytest (tests/pytest.ini): the trees under
test, and meson's exit status 77 for a run in which nothing ran but skips."""
import os

import pytest

import prtest  # tests/lib/prtest, on the path by pytest.ini's pythonpath

HERE = os.path.dirname(os.path.abspath(__file__))

SKIP = 77


def pytest_addoption(parser):
    parser.addoption("--build-root", default=None, help="the meson build directory under test (default: build/)")
    parser.addoption("--perfrelayd", default=None,
                     help="the perfrelayd binary under test (default: BUILD_ROOT/daemon/perfrelayd)")


def pytest_configure(config):
    build = config.getoption("--build-root") or os.path.join(os.path.dirname(HERE), "build")
    binary = config.getoption("--perfrelayd") or os.path.join(build, "daemon", "perfrelayd")
    prtest.use_pytest(os.path.abspath(binary))


@pytest.fixture(scope="session")
def source_root():
    """The source tree (the parent of tests/)."""
    return prtest.source_root()


@pytest.fixture(scope="session")
def perfrelayd():
    """The daemon binary under test."""
    return prtest.daemon_binary()


@pytest.fixture(scope="session")
def build_root(perfrelayd):
    """The build tree of the daemon under test."""
    return prtest.build_root()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when == "call":
        # The next test starts from no running daemon, as it would after a pass.
        prtest.stop_daemons()


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    # 5 is pytest's "no tests collected": a module that skips as a whole when imported.
    if reporter is None or exitstatus not in (0, 5):
        return
    passed = len(reporter.stats.get("passed", []))
    skipped = len(reporter.stats.get("skipped", []))
    if passed == 0 and skipped > 0:
        session.exitstatus = SKIP
