#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The Debian packages as a Debian user gets them, on Debian 12 and on Debian 13, each release's
packages built on that release. Builds them from a clean copy of the tree (scripts/build-debs;
for the release this machine does not run, in that release's build root, nspawn.BuildRoot)
twice, the second time as a newer version; lintian (this machine's, so for its own release's
packages) finds no error and no warning in the first. Then, in a container of the release under
a real systemd (nspawn.py): `apt
install ./...` of the first build enables nothing; `systemctl enable --now perfrelay.socket`;
a member of group perfrelay runs `perfrelayctl monitor` and sees their own exec, and
`perfrelayctl status`; bash completes `perfrelayctl probe enable <Tab>` through the installed
script and `man perfrelayctl` renders; the newer build is installed while a third-party (SDK)
producer emits, and the restarted daemon accounts for every record: attempts = received +
failures + crash_lost with crash_lost = 0, and every record the kernel accepted received; `apt
purge` stops the daemon and leaves no pin."""
import glob
import json
import os
import select
import shutil
import subprocess
import time

import pytest

import nspawn
import prtest
from prtest import Failure, build_root, check, source_root, step, wait_for

SOURCE, BUILD = source_root(), build_root()
PIN = f"/sys/fs/bpf/perfrelay-package-{os.getpid()}"
STEADY = os.path.join(BUILD, "tests", "integration", "steady-producer")
STEADY_PRODUCER = 310  # tests/integration/steady.bpf.c's producer id
# The tree's version, then a newer one (scripts/build-debs adds a changelog entry in its copy).
FIRST = subprocess.run(["dpkg-parsechangelog", "-l", os.path.join(SOURCE, "debian", "changelog"), "-S", "Version"],
                       capture_output=True, text=True, check=True).stdout.strip()
NEWER = FIRST + "+rebuild1"
PACKAGES = ["perfrelay", "libperfrelay0", "libperfrelay-dev", "perfrelay-producer-dev", "perfrelay-export",
            "perfrelay-metrics"]

if not os.access(STEADY, os.X_OK):
    raise Failure(f"{STEADY} is missing (meson compile builds it)")


def build(version, release):
    out = os.path.join(BUILD, "debs", release, version)
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, DEB_BUILD_OPTIONS="nocheck")
    if version != FIRST:
        env["PERFRELAY_DEB_VERSION"] = version
    if release != nspawn.HOST_RELEASE:
        env["PERFRELAY_DEB_BUILDROOT"] = nspawn.BuildRoot(release, SOURCE).root
    r = subprocess.run([os.path.join(SOURCE, "scripts", "build-debs"), out], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise Failure(f"scripts/build-debs {version}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    debs = sorted(d for d in glob.glob(os.path.join(out, "*.deb")) if "-dbgsym_" not in d)
    names = sorted(os.path.basename(d).split("_")[0] for d in debs)
    if names != sorted(PACKAGES):
        raise Failure(f"scripts/build-debs {version} made {names}, want {sorted(PACKAGES)}")
    return out, debs


def inside_ok(c, *args, **kw):
    r = c.run(*args, **kw)
    if r.returncode != 0:
        raise Failure(f"{' '.join(args)}: exit {r.returncode}: {r.stdout[-2000:]} {r.stderr[-2000:]}")
    return r.stdout


def stats(c):
    return json.loads(inside_ok(c, "perfrelayctl", "stats", "--json"))


def producer(c):
    return next((p for p in stats(c)["producers"] if p["id"] == STEADY_PRODUCER), None)




def apt_install(c, debs):
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    return inside_ok(c, *env, "apt-get", "install", "-y", "-q", "--no-install-recommends",
                     *[f"/root/{os.path.basename(os.path.dirname(d))}/{os.path.basename(d)}" for d in debs],
                     timeout=600)


def lintian(out):
    @step("lintian: no error, no warning")
    def _():
        changes = glob.glob(os.path.join(out, "*.changes"))[0]
        r = subprocess.run(["lintian", "--tag-display-limit", "0", changes], capture_output=True, text=True)
        bad = [l for l in r.stdout.splitlines() if l.startswith(("E:", "W:"))]
        check(r.returncode == 0 and not bad, f"lintian (exit {r.returncode}): {bad or r.stderr.strip()}")


@pytest.mark.parametrize("release", list(nspawn.RELEASES))
def test_package_lifecycle(container, release):
    first_dir, first = build(FIRST, release)
    newer_dir, newer = build(NEWER, release)
    c = None
    try:
        if release != nspawn.HOST_RELEASE:
            print(f"lintian: not run on {release}'s packages (this machine's lintian is {nspawn.HOST_RELEASE}'s)")
        else:
            lintian(first_dir)

        c = container(f"package-{release}", release)
        # The test's own pin root, set before the first start (the prerm's --cleanup reads it too).
        c.write("etc/perfrelay/perfrelay.conf.d/50-test.conf",
                f"# The package test's own pin root, beside any live daemon's\n[Daemon]\nPinPath={PIN}\n")
        c.write("etc/systemd/system/perfrelay.service.d/50-test.conf",
                f"[Service]\nExecStartPre=-+/bin/mkdir -p {PIN}\nReadWritePaths=-{PIN}\n")
        for d in (first_dir, newer_dir):
            shutil.copytree(d, c.path(f"root/{os.path.basename(d)}"))
        shutil.copy("/bin/true", c.path("usr/local/bin/prsys-marker"))
        c.boot()
        state = {}

        @step("apt install ./perfrelay_*.deb ...: installed, nothing enabled")
        def _():
            apt_install(c, first)
            for p in PACKAGES:
                v = inside_ok(c, "dpkg-query", "-W", "-f", "${Status} ${Version}", p)
                check(v == f"install ok installed {FIRST}", f"{p}: {v}")
            for unit in ("perfrelay.socket", "perfrelay.service", "perfrelay-export.service",
                         "perfrelay-metrics.socket"):
                st = c.run("systemctl", "is-enabled", unit).stdout.strip()
                check(st == "disabled", f"{unit} is {st!r} after installation")
            check(c.run("systemctl", "is-active", "perfrelay.service").stdout.strip() == "inactive",
                  "perfrelayd runs before anyone enabled it")
            # The units' Documentation= links lead somewhere (man pages, uncompressed docs).
            for unit in ("perfrelay.service", "perfrelay.socket", "perfrelay-export.service",
                         "perfrelay-metrics.socket", "perfrelay-metrics@x.service", "perfrelay-snapshot@x.service"):
                for link in inside_ok(c, "systemctl", "show", "-p", "Documentation", "--value", unit).split():
                    if link.startswith("file:"):
                        check(os.path.exists(c.path(link[5:])), f"{unit}: Documentation={link} is missing")
                    elif link.startswith("man:"):
                        r = c.run("man", "-w", link[4:].replace("(", ".").rstrip(")").rsplit(".", 1)[1],
                                  link[4:].split("(")[0])
                        check(r.returncode == 0, f"{unit}: Documentation={link}: {r.stderr.strip()}")

        @step("systemctl enable --now perfrelay.socket")
        def _():
            inside_ok(c, "systemctl", "enable", "--now", "perfrelay.socket")
            inside_ok(c, "useradd", "--create-home", "--groups", "perfrelay", "prtest")

        @step("a member of group perfrelay: perfrelayctl monitor sees their exec")
        def _():
            mon = c.popen("runuser", "-u", "prtest", "--", "perfrelayctl", "monitor", "--json",
                          "--type", "exec", "--comm", "prsys-marker",
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                deadline = time.monotonic() + 60
                line = ""
                while not line and time.monotonic() < deadline and mon.poll() is None:
                    c.run("runuser", "-u", "prtest", "--", "/usr/local/bin/prsys-marker", "package-test")
                    if select.select([mon.stdout], [], [], 0.5)[0]:
                        line = mon.stdout.readline()
                check(line, f"no exec event within 60 s (monitor exit {mon.poll()}: "
                            f"{mon.stderr.read() if mon.poll() is not None else ''})")
                e = json.loads(line)
                uid = int(inside_ok(c, "id", "-u", "prtest"))
                check(e["type"] == "exec" and e["comm"] == "prsys-marker" and e["uid"] == uid, f"event {e}")
            finally:
                mon.kill()
                mon.wait()

        @step("a member of group perfrelay: perfrelayctl status")
        def _():
            out = inside_ok(c, "runuser", "-u", "prtest", "--", "perfrelayctl", "status", "--json")
            check(json.loads(out), f"status: {out!r}")

        @step("bash completes 'perfrelayctl probe enable <Tab>' through the installed script")
        def _():
            script = ("source /usr/share/bash-completion/bash_completion; _completion_loader perfrelayctl; "
                      "complete -p perfrelayctl; COMP_LINE='perfrelayctl probe enable '; "
                      "COMP_POINT=${#COMP_LINE}; COMP_WORDS=(perfrelayctl probe enable ''); COMP_CWORD=3; "
                      "_perfrelayctl perfrelayctl '' enable; printf '%s\\n' \"${COMPREPLY[@]}\"")
            lines = inside_ok(c, "bash", "-c", script).splitlines()
            check(lines and "-F _perfrelayctl perfrelayctl" in lines[0], f"complete -p: {lines[:1]}")
            check(sorted(lines[1:]) == ["connect", "exec", "exit", "fork", "open"], f"COMPREPLY {lines[1:]}")

        @step("man perfrelayctl, perfrelayd, perfrelay.conf render")
        def _():
            for page in ("perfrelayctl", "perfrelayd", "perfrelay.conf", "perfrelay-export", "perfrelay-metrics",
                         "perfrelay-producer"):
                out = inside_ok(c, "env", "MANWIDTH=80", "man", page)
                name = out.split("NAME", 1)[-1].strip().splitlines()[0] if "NAME" in out else ""
                check(name.startswith(page) and " - " in name and len(out.splitlines()) > 20,
                      f"man {page}: {out[:300]!r}")

        @step("the newer build installed while an SDK producer emits: exact, crash_lost 0")
        def _():
            # Run from the host, on the same kernel and pins: the producer filters on its own
            # tgid as BPF sees it, which a process in the container's PID namespace does not know.
            prod = subprocess.Popen([STEADY, PIN, "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

            def cmd(line):
                prod.stdin.write(line + "\n")
                prod.stdin.flush()
                answer = prod.stdout.readline().strip()
                check(answer and not answer.startswith("error"), f"steady producer: {line!r} -> {answer!r}")
                return answer

            try:
                cmd("rate 2000")
                wait_for(lambda: (producer(c) or {}).get("received", 0) > 1000, "the first daemon receives", timeout=60, interval=0.2)
                def main_pid():
                    return inside_ok(c, "systemctl", "show", "-p", "MainPID", "--value",
                                     "perfrelay.service").strip()

                before = main_pid()
                apt_install(c, newer)
                v = inside_ok(c, "dpkg-query", "-W", "-f", "${Version}", "perfrelay")
                check(v == NEWER, f"perfrelay {v} after the upgrade")
                after = wait_for(lambda: (lambda pid: pid if pid not in ("", "0", before) else None)(main_pid()),
                                 "a restarted daemon", timeout=60, interval=0.2)
                state["pids"] = (before, after)
                received = producer(c)["received"]
                wait_for(lambda: producer(c)["received"] > received + 1000, "the new daemon receives", timeout=60, interval=0.2)
                cmd("rate 0")
                counts = json.loads(cmd("counts"))
            finally:
                prod.stdin.close()
                prod.wait(30)
            p = wait_for(lambda: (lambda q: q if q["received"] + q["crash_lost"] >= counts["accepted"] else None)(
                producer(c)), f"every accepted record ({counts['accepted']}) received", timeout=60, interval=0.2)
            check(p["crash_lost"] == 0, f"crash_lost {p['crash_lost']} after an upgrade")
            check(p["attempts"] == counts["calls"], f"attempts {p['attempts']} != the producer's calls {counts}")
            check(p["attempts"] == p["received"] + p["failures"] + p["crash_lost"],
                  f"attempts != received + failures + crash_lost: {p}")
            check(p["received"] == counts["accepted"], f"received {p['received']} != accepted {counts}")
            print(f"  daemon {state['pids'][0]} -> {state['pids'][1]}: attempts {p['attempts']} = received "
                  f"{p['received']} + failures {p['failures']} + crash_lost {p['crash_lost']}")

        @step("apt purge: the daemon stopped, no pin left")
        def _():
            inside_ok(c, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y", "-q", *PACKAGES,
                      timeout=600)
            check(c.run("systemctl", "is-active", "perfrelay.service").stdout.strip() in ("inactive", "unknown"),
                  "perfrelay.service still runs")
            left = [os.path.join(d, f) for d, _, files in os.walk(PIN) for f in files]
            check(not left, f"pins left after purge: {left}")
            check(not os.path.exists(c.path("var/lib/perfrelay")), "/var/lib/perfrelay left after purge")
    except Failure:
        if c is not None and c.init is not None and c.nspawn.poll() is None:
            print(c.run("journalctl", "-u", "perfrelay.service", "--no-pager", "-n", "40").stdout)
        print(f"{prtest.steps_passed} steps passed before the failure")
        raise
    finally:
        subprocess.run([os.path.join(BUILD, "daemon", "perfrelayd"), "--pin-path", PIN, "--config",
                        "/nonexistent/perfrelay.conf", "--cleanup"], capture_output=True)
        if os.path.isdir(PIN):
            shutil.rmtree(PIN, ignore_errors=True)
    print(f"{prtest.steps_passed} steps passed")
