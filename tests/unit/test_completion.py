#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""perfrelayctl's shell completions (shell-completion/): each script offers every command of
`perfrelayctl --help` and, for each command, every option of `perfrelayctl COMMAND --help`; bash's
script, loaded through bash-completion as the installed one is, and fish's complete commands,
options and probe names (`perfrelayctl probe enable <Tab>`; with no daemon to ask, the built-in
probes of daemon/kernel/probes-names.c); zsh's parses."""
import os
import re
import shutil
import subprocess

import pytest

from mismatches import expect_eq, fail
from prtest import build_root, source_root

SOURCE, BUILD = source_root(), build_root()
SCRIPTS = os.path.join(SOURCE, "shell-completion")
CTL = os.path.join(BUILD, "client", "perfrelayctl")
BASH_COMPLETION = "/usr/share/bash-completion/bash_completion"
# perfrelayctl must not reach a daemon here: the completions fall back to the built-in lists.
ENV = dict(os.environ, PATH=os.path.dirname(CTL) + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
           DBUS_SYSTEM_BUS_ADDRESS="unix:path=/nonexistent/perfrelay-test-bus", LC_ALL="C.UTF-8")


def help_options(*verb):
    out = subprocess.run([CTL, *verb, "--help"], capture_output=True, text=True).stdout
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*[a-z]|-[a-zA-Z])(?=[\s=,])", out))


def verbs():
    out = subprocess.run([CTL, "--help"], capture_output=True, text=True).stdout
    return re.findall(r"^  (\w+) ", out.split("Commands:", 1)[1].split("Options:", 1)[0], re.M)


def builtin_probes():
    with open(os.path.join(SOURCE, "daemon", "kernel", "probes-names.c")) as f:
        return re.findall(r"\[PROBE_\w+\] = \"(\w+)\"", f.read())


def read(name):
    with open(os.path.join(SCRIPTS, name)) as f:
        return f.read()


def check_tables():
    bash, zsh, fish = read("perfrelayctl.bash"), read("_perfrelayctl"), read("perfrelayctl.fish")
    bash_opts = dict(re.findall(r"^\t\t\[(\w+)\]='([^']*)'", bash, re.M))
    zsh_arms = {}
    for labels, body in re.findall(r"^\t([\w |]+)\)\n(.*?);;", zsh, re.M | re.S):
        for label in labels.split("|"):
            zsh_arms[label.strip()] = body
    for verb in verbs():
        if verb not in bash.split("local verbs='", 1)[1].split("'", 1)[0].split():
            fail(f"bash: command {verb} is not offered")
        if f"'{verb}:" not in zsh and f'"{verb}:' not in zsh:
            fail(f"zsh: command {verb} is not offered")
        if f"-a {verb} " not in fish:
            fail(f"fish: command {verb} is not offered")
        if verb == "help":
            continue
        want = help_options(verb)
        longs = {o for o in want if o.startswith("--")} - {"--help"}
        expect_eq(set(bash_opts.get(verb, "").split()), want, f"bash: options of {verb}")
        if verb != "probe":
            have = set(re.findall(r"--[a-z][a-z-]*[a-z]", zsh_arms.get(verb, "")))
            expect_eq(have, longs, f"zsh: options of {verb}")
        fish_lines = [l for l in fish.splitlines()
                      if re.search(rf"__fish_seen_subcommand_from [\w ]*\b{verb}\b", l) and "for verb" not in l]
        have = {"--" + o for l in fish_lines for o in re.findall(r"-l ([\w-]+)", l)}
        expect_eq(have, longs, f"fish: options of {verb}")


def bash_complete(line):
    """COMPREPLY for the command line `line` (completing its last word) through bash-completion."""
    words = line.split(" ")
    script = (f"source {BASH_COMPLETION}; source {SCRIPTS}/perfrelayctl.bash; complete -p perfrelayctl; "
              f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
              f"COMP_CWORD={len(words) - 1}; _perfrelayctl perfrelayctl {words[-1]!r} {words[-2]!r}; "
              "printf '%s\\n' \"${COMPREPLY[@]}\"")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=ENV)
    if r.returncode != 0:
        fail(f"bash completion of {line!r}: exit {r.returncode}: {r.stderr.strip()}")
    lines = r.stdout.splitlines()
    if not lines or "-F _perfrelayctl" not in lines[0]:
        fail(f"complete -p perfrelayctl: {lines[:1]}")
    return sorted(l for l in lines[1:] if l)


def check_bash():
    if not os.path.exists(BASH_COMPLETION):
        fail(f"{BASH_COMPLETION} is missing (apt-get install bash-completion)")
        return
    expect_eq(bash_complete("perfrelayctl probe enable "), sorted(builtin_probes()), "bash: probe enable <Tab>")
    expect_eq(bash_complete("perfrelayctl probe disable o"), ["open"], "bash: probe disable o<Tab>")
    expect_eq(bash_complete("perfrelayctl cap"), ["capture"], "bash: cap<Tab>")
    expect_eq(bash_complete("perfrelayctl probe "), ["--help", "-h", "disable", "enable"], "bash: probe <Tab>")
    expect_eq(bash_complete("perfrelayctl monitor --ty"), ["--type"], "bash: monitor --ty<Tab>")
    types = bash_complete("perfrelayctl monitor --type ")
    if not {"exec", "open", "packet"} <= set(types):
        fail(f"bash: monitor --type <Tab>: {types}")
    expect_eq(bash_complete("perfrelayctl top --order task"), ["task-clock"], "bash: top --order task<Tab>")


def check_fish():
    if not shutil.which("fish"):
        fail("fish is not installed (apt-get install fish)")
        return
    def complete(line):
        r = subprocess.run(["fish", "--no-config", "-c", f"source {SCRIPTS}/perfrelayctl.fish; complete -C {line!r}"],
                           capture_output=True, text=True, env=ENV)
        if r.returncode != 0 or r.stderr.strip():
            fail(f"fish complete -C {line!r}: exit {r.returncode}: {r.stderr.strip()}")
        return sorted(l.split("\t")[0] for l in r.stdout.splitlines())
    expect_eq(complete("perfrelayctl probe enable "), sorted(builtin_probes()), "fish: probe enable <Tab>")
    expect_eq(complete("perfrelayctl cap"), ["capture"], "fish: cap<Tab>")
    expect_eq(complete("perfrelayctl producers --t"), ["--types"], "fish: producers --t<Tab>")


def check_zsh():
    if not shutil.which("zsh"):
        fail("zsh is not installed (apt-get install zsh)")
        return
    r = subprocess.run(["zsh", "-n", os.path.join(SCRIPTS, "_perfrelayctl")], capture_output=True, text=True)
    expect_eq((r.returncode, r.stderr.strip()), (0, ""), "zsh -n _perfrelayctl")


@pytest.fixture(autouse=True)
def _ctl_built():
    if not os.access(CTL, os.X_OK):
        pytest.fail(f"{CTL} is not built")


def test_tables():
    check_tables()


def test_bash():
    check_bash()


def test_fish():
    check_fish()


def test_zsh():
    check_zsh()
