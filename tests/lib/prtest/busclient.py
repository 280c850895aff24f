# SPDX-License-Identifier: LGPL-2.1-or-later
"""A D-Bus peer for tests: the bus-subscriber helper run as a chosen user, holding one connection
to the daemon (Subscribe() and its signals, and Manager methods called on that connection)."""
import json
import subprocess
import threading
import time

from prtest import Collected, Failure, check


def as_user(user, cmd):
    """None: root; "nobody": nobody without groups; "nobody+GID": nobody in group GID; "USER+GID,...":
    that account (its group of the same name as primary group) with those supplementary groups."""
    if user is None:
        return cmd
    who, _, groups = user.partition("+")
    uid, gid = ("nobody", "nogroup") if who == "nobody" else (who, who)
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", f"--groups={groups}" if groups else "--clear-groups"] + cmd


def busctl(address, *args, user=None, check_rc=True):
    """busctl on the bus at `address`, as `user` (as_user()); a Failure if it fails, unless
    check_rc is false."""
    cmd = as_user(user, ["busctl", f"--address={address}", *args])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check_rc and r.returncode != 0:
        raise Failure(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r


class BusPeer(Collected):
    """bus-subscriber: a D-Bus connection that (unless subscribe=False) calls Subscribe with
    the filter and prints every signal reaching it."""

    def __init__(self, helper, address, *filters, user=None, subscribe=True):
        cmd = as_user(user, [helper, f"--address={address}"] + ([] if subscribe else ["--no-subscribe"]) +
                      list(filters))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self._collect_init()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        first = self.wait(lambda m: "subscribed" in m or "error" in m, "the subscriber's first line")
        if "error" in first and "reply" not in first:
            self.close()
            raise Failure(f"Subscribe failed: {first}")
        self.path = first["subscribed"]
        self.name = first["unique_name"]

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.msgs.append(json.loads(line))
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def _detail(self):
        return f"{self.msgs[-5:]}, stderr: {self.proc.stderr.read() if self.eof else ''}"

    def messages(self):
        with self.cond:
            return list(self.msgs)

    def events(self):
        return [m for m in self.messages() if m.get("signal") == "Event"]

    def command(self, line, reply):
        """Sends a command and waits for its reply line (the n-th of that method)."""
        before = len([m for m in self.messages() if m.get("reply") == reply])
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 10
        with self.cond:
            while True:
                got = [m for m in self.msgs if m.get("reply") == reply]
                if len(got) > before:
                    return got[before]
                left = deadline - time.monotonic()
                check(left > 0 and not self.eof, f"a reply to {line!r}")
                self.cond.wait(left)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(5)
