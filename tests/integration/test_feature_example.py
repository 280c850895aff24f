#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A feature is its folder and one line (docs/architecture.md, "Adding a feature"): in a copy of
the source tree, the worked example of that page is added as a person would add it (the folder
daemon/features/served/, its keys in config/perfrelay.conf, X(served) in FEATURE_LIST; nothing
else), the copy is configured and built, and then the configuration's unit test and the fuzzer
take the [Served] section without an edit of theirs, the daemon serves ServedFor and a
"served" section in GetStats(), and perfrelay-metrics exports perfrelay_served_usec."""
import json
import os
import shutil
import subprocess
import urllib.request

import pytest

from prtest import Daemon, check, check_eq, daemon_binary, free_port, main, skip, wait_for
from prtest.statsbus import StatsBus

BINARY = daemon_binary()
BUILDDIR = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(SOURCE, "tests", "style", "check-feature-example")

for tool in ("meson", "ninja", "git", "dbus-daemon", "busctl"):
    if not shutil.which(tool):
        skip(f"{tool} is not installed")

with open(os.path.join(BUILDDIR, "meson-info", "intro-buildoptions.json")) as f:
    # The copy is built as the build under test is, so that the ASan pass runs the example under ASan.
    SANITIZE = next((o["value"] for o in json.load(f) if o["name"] == "b_sanitize"), "none")

TARGETS = ["daemon/perfrelayd", "client/perfrelayctl", "client/metrics/perfrelay-metrics", "tests/unit/test-config"]


def copy_tree(dest):
    """The source tree as git knows it (tracked and new files, not ignored ones: no build
    directories), symbolic links kept."""
    r = subprocess.run(["git", "-C", SOURCE, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, check=True)
    for rel in sorted(set(r.stdout.decode().split("\0")) - {""}):
        src, dst = os.path.join(SOURCE, rel), os.path.join(dest, rel)
        if not os.path.lexists(src):
            continue  # deleted in the work tree, not yet in git
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)


@pytest.fixture(scope="module")
def tree(root_and_bpf, workdir):
    """The copy with the example added, built: (its build directory, whether fuzz-config was built)."""
    src, build = os.path.join(workdir, "src"), os.path.join(workdir, "build")
    if not os.path.isdir(os.path.join(SOURCE, ".git")):
        skip("the source tree is not a git work tree (the copy is made from git's file list)")
    copy_tree(src)
    r = subprocess.run([EXAMPLE, "--write", src], capture_output=True, text=True)
    check_eq(r.returncode, 0, f"check-feature-example --write: {r.stdout}{r.stderr}")
    r = subprocess.run(["meson", "setup", "--buildtype=debugoptimized", "-Dwerror=true", "-Dman=disabled",
                        "-Dexport=disabled", f"-Db_sanitize={SANITIZE}", build, src], capture_output=True, text=True)
    check_eq(r.returncode, 0, f"meson setup of the copy: {r.stdout[-3000:]}{r.stderr}")
    fuzz = os.path.exists(os.path.join(BUILDDIR, "tests", "fuzz", "fuzz-config")) and SANITIZE == "none"
    r = subprocess.run(["ninja", "-C", build, *TARGETS, *(["tests/fuzz/fuzz-config"] if fuzz else [])],
                       capture_output=True, text=True)
    check_eq(r.returncode, 0, f"building the copy: {r.stdout[-4000:]}{r.stderr}")
    return build, fuzz


def test_config_tests_take_the_section(tree):
    build, _ = tree
    r = subprocess.run([os.path.join(build, "tests", "unit", "test-config")], capture_output=True, text=True,
                       cwd=build)
    check_eq(r.returncode, 0, f"test-config of the copy: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    check("[Served]" in r.stdout, f"test-config tested the example's section: {r.stdout[-500:]}")


def test_fuzzer_takes_the_section(tree, workdir):
    build, fuzz = tree
    if not fuzz:
        skip("fuzz-config is built in the plain build only (libFuzzer with clang)")
    corpus = os.path.join(workdir, "corpus")
    os.makedirs(corpus, exist_ok=True)
    with open(os.path.join(corpus, "served"), "w") as f:
        f.write("[Served]\nServedGranularityUsec=5\n")
    r = subprocess.run([os.path.join(build, "tests", "fuzz", "fuzz-config"), "-runs=20000", corpus],
                       capture_output=True, text=True, timeout=300)
    check_eq(r.returncode, 0, f"fuzz-config of the copy: {r.stderr[-2000:]}")


def test_daemon_serves_the_feature(tree, workdir):
    build, _ = tree
    bus = StatsBus(os.path.join(build, "daemon", "perfrelayd"))
    d = Daemon(os.path.join(build, "daemon", "perfrelayd"), "served", stdout=False,
               config="[Probes]\nProbes=none\n[Served]\nServedGranularityUsec=1\n")
    metrics = None
    try:
        d.start()
        served = wait_for(lambda: bus.stats().get("served", {}).get("usec", 0) > 0 and bus.stats()["served"],
                          "GetStats() has the served section, above 0")
        check(set(served) == {"usec"}, f"the served section: {served}")
        r = subprocess.run(["busctl", "--system", "--json=short", "get-property", "org.perfrelay1", "/org/perfrelay1",
                            "org.perfrelay1.Manager", "ServedFor"], capture_output=True, text=True, check=True)
        check(json.loads(r.stdout)["data"] > 0, f"ServedFor: {r.stdout}")
        port = free_port()
        metrics = subprocess.Popen([os.path.join(build, "client", "metrics", "perfrelay-metrics"),
                                    f"--listen=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def scrape():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                    return resp.read().decode()
            except OSError:
                return None

        body = wait_for(scrape, "perfrelay-metrics answers")
        lines = [line.split() for line in body.splitlines() if line.startswith("perfrelay_served_usec ")]
        check_eq(len(lines), 1, "perfrelay_served_usec samples")
        check(int(lines[0][1]) > 0, f"perfrelay_served_usec: {lines[0]}")
        check("# TYPE perfrelay_served_usec gauge" in body, "perfrelay_served_usec is a gauge")
    finally:
        if metrics:
            metrics.kill()
            metrics.wait()
        d.cleanup()
        bus.close()


if __name__ == "__main__":
    main(__file__)
