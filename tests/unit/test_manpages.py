#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The manual pages against what they describe, so that they cannot drift: every page renders
with man(1) without a warning; the options of perfrelayd, perfrelay-export, perfrelay-metrics
and of every perfrelayctl command are those their --help lists, both ways; perfrelay.conf(5)
(made from docs/config.md) names every key of the daemon's schema (daemon/config/config.c) and no
other, and so does the shipped perfrelay.conf; perfrelay-export(8) every key of export.conf."""
import glob
import os
import re
import subprocess

import pytest

from mismatches import fail
from prtest import build_root, source_root

SOURCE, BUILD = source_root(), build_root()
MAN = os.path.join(BUILD, "man")
PAGES = ["perfrelayd.8", "perfrelayctl.1", "perfrelay.conf.5", "perfrelay-export.8", "perfrelay-metrics.8",
         "perfrelay-producer.7"]
BINARIES = {"perfrelayd.8": "daemon/perfrelayd", "perfrelay-export.8": "client/export/perfrelay-export",
            "perfrelay-metrics.8": "client/metrics/perfrelay-metrics"}


def render(page):
    # Wide enough that no table cell is hyphenated or overfull (a warning): the check reads
    # option and key names out of the rendered text. At 80 columns it renders too (below).
    env = dict(os.environ, MANWIDTH="200", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    narrow = subprocess.run(["man", "-l", os.path.join(MAN, page)], capture_output=True, text=True,
                            env=dict(env, MANWIDTH="80"))
    if narrow.returncode != 0 or len(narrow.stdout.splitlines()) < 20:
        fail(f"man -l {page} at 80 columns: exit {narrow.returncode}, {narrow.stderr.strip()!r}")
    r = subprocess.run(["man", "--warnings", "-l", os.path.join(MAN, page)], capture_output=True, text=True,
                       env=env)
    # groff 1.23 (Debian 13) also says when a line of a wide table cell cannot be justified:
    # the text is whole, only its spacing is left ragged. Every other warning fails.
    warnings = [w for w in r.stderr.strip().splitlines() if not w.endswith(": cannot adjust line")]
    if r.returncode != 0 or warnings:
        fail(f"man -l {page}: exit {r.returncode}, stderr {r.stderr.strip()!r}")
    if len(r.stdout.splitlines()) < 20:
        fail(f"man -l {page}: only {len(r.stdout.splitlines())} lines")
    # Hyphenation at the line end would split option names: join "-\n   word" back.
    return re.sub(r"\u2010\n\s*", "", r.stdout)


def section(text, title):
    """The lines of a top-level section of a rendered page (headings start at column 0)."""
    m = re.search(rf"^{re.escape(title)}\n(.*?)(?=^\S|\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def long_options(text):
    return set(re.findall(r"(?<![\w-])--([a-z][a-z-]*[a-z])", text))


def help_text(*argv):
    r = subprocess.run(list(argv) + ["--help"], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(argv)} --help: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def check_options(page, text):
    binary = os.path.join(BUILD, BINARIES[page])
    if not os.access(binary, os.X_OK):
        if page == "perfrelay-export.8":  # built only with nats.c (-Dexport=auto)
            print(f"note: {binary} is not built; its options are not compared")
            return
        fail(f"{binary} is not built")
        return
    want = long_options(help_text(binary))
    have = long_options(section(text, "OPTIONS"))
    if want - have:
        fail(f"{page}: OPTIONS lacks {sorted(want - have)} of {BINARIES[page]} --help")
    if have - want:
        fail(f"{page}: OPTIONS has {sorted(have - want)}, which {BINARIES[page]} --help does not")


def check_perfrelayctl(text):
    ctl = os.path.join(BUILD, "client", "perfrelayctl")
    verbs = re.findall(r"^  (\w+) ", section(help_text(ctl), "Commands:") or help_text(ctl), re.M)
    commands = section(text, "COMMANDS")
    subsections = dict(re.findall(r"^   (\w+)[^\n]*\n(.*?)(?=^   \w|\Z)", commands, re.M | re.S))
    if not verbs:
        fail("perfrelayctl --help lists no commands")
    for verb in verbs:
        if verb not in subsections:
            fail(f"perfrelayctl.1: no subsection for the command {verb}")
            continue
        if verb == "help":
            continue
        want = long_options(help_text(ctl, verb)) - {"help"}
        have = long_options(subsections[verb])
        if want != have:
            fail(f"perfrelayctl.1 {verb}: options {sorted(have)}, perfrelayctl {verb} --help {sorted(want)}")
    for extra in set(subsections) - set(verbs):
        fail(f"perfrelayctl.1: subsection {extra} is not a command of perfrelayctl --help")


def daemon_keys():
    """The schema: the core's keys (config.c) and the features' sections (*-config.c)."""
    with open(os.path.join(SOURCE, "daemon", "config", "config.c")) as f:
        tables = [f.read().split("config_keys[] = {", 1)[1].split("};", 1)[0]]
    for path in sorted(glob.glob(os.path.join(SOURCE, "daemon", "features", "*", "*-config.c"))):
        with open(path) as f:
            tables.append(f.read().split("ConfigKey keys[] = {", 1)[1].split("};", 1)[0])
    return {k for table in tables for k in re.findall(r"\{\s*\"(\w+)\",\s*\"(\w+)\"", table)}


def export_keys():
    with open(os.path.join(SOURCE, "client", "export", "export-config.c")) as f:
        return set(re.findall(r"streq\(k, \"(\w+)\"\)", f.read()))


def check_config(text):
    keys = daemon_keys()
    if len(keys) < 30:
        fail(f"daemon/config/config.c and the features' *-config.c: only {len(keys)} keys found")
    named = set()
    for sec, key in keys:
        # Each section's table in docs/config.md: the key's row under its section heading.
        part = re.search(rf"^   \[{sec}\]\n(.*?)(?=^   \[|^\S|\Z)", text, re.M | re.S)
        if not part:
            fail(f"perfrelay.conf.5: no subsection [{sec}]")
            continue
        # groff 1.23 (Debian 13) pads a cell with a space after its rule, 1.22 does not.
        if not re.search(rf"│ ?{key}=", part.group(1)):
            fail(f"perfrelay.conf.5: [{sec}] has no table row for {key}=")
        named.add(key)
    rows = set(re.findall(r"^\s*│ ?(\w+)=", text, re.M))
    if rows - named:
        fail(f"perfrelay.conf.5: table rows for keys the daemon does not have: {sorted(rows - named)}")
    with open(os.path.join(SOURCE, "config", "perfrelay.conf")) as f:
        shipped = f.read()
    for sec, key in sorted(keys):
        if not re.search(rf"^\[{sec}\]\n(?:(?!^\[).*\n)*?#{key}=", shipped, re.M):
            fail(f"config/perfrelay.conf: [{sec}] does not show #{key}= at its default")


def check_export(text):
    keys = export_keys()
    if len(keys) < 20:
        fail(f"client/export/export-config.c: only {len(keys)} keys found")
    for key in sorted(keys):
        if f"{key}=" not in text:
            fail(f"perfrelay-export.8 does not name {key}=")


@pytest.fixture(autouse=True)
def _pages_built():
    if not os.path.isdir(MAN) or not all(os.path.exists(os.path.join(MAN, p)) for p in PAGES):
        pytest.skip(f"the manual pages are not built in {MAN} (scdoc missing: apt-get install scdoc)")


@pytest.mark.parametrize("page", PAGES)
def test_page(page):
    text = render(page)
    if page in BINARIES:
        check_options(page, text)
    if page == "perfrelayctl.1":
        check_perfrelayctl(text)
    if page == "perfrelay.conf.5":
        check_config(text)
    if page == "perfrelay-export.8":
        check_export(text)
