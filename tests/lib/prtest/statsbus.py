# SPDX-License-Identifier: LGPL-2.1-or-later
"""The daemon's statistics for tests, read the way a user reads them: `perfrelayctl stats --json`
(D-Bus GetStats()) on a private dbus-daemon configured like the system bus with the project's
policy. Importing this module starts nothing; StatsBus() does, and exports its address to the
daemons started afterwards ($DBUS_SYSTEM_BUS_ADDRESS)."""
import json
import os
import shutil
import subprocess
import tempfile

from prtest import Failure, skip, source_root

SRCDIR = source_root()
POLICY = os.path.join(SRCDIR, "config", "org.perfrelay1.conf")

CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={dir}/system_bus_socket</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"
          send_member="UpdateActivationEnvironment"/>
  </policy>
  <includedir>{dir}/system.d</includedir>
</busconfig>
"""


class PrivateBus:
    """A dbus-daemon configured like the system bus: deny by default, policies from a system.d
    directory that holds a copy of the project's policy file (policy_dir: a test may add its
    own and reload()). In `directory`, or a temporary one that close() removes."""

    def __init__(self, directory=None):
        if not shutil.which("dbus-daemon"):
            skip("dbus-daemon is not installed")
        self.own_dir = directory is None
        self.dir = directory or tempfile.mkdtemp(prefix="perfrelay-bus-")
        self.policy_dir = os.path.join(self.dir, "system.d")
        os.makedirs(self.policy_dir)
        os.chmod(self.dir, 0o755)  # users of other roles connect too
        shutil.copy(POLICY, self.policy_dir)
        conf = os.path.join(self.dir, "system.conf")
        with open(conf, "w") as f:
            f.write(CONFIG.format(dir=self.dir))
        self.proc = subprocess.Popen(["dbus-daemon", f"--config-file={conf}", "--nofork", "--print-address=1"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # The address is printed once the bus listens.
        line = self.proc.stdout.readline().strip()
        if not line:
            raise Failure(f"dbus-daemon did not start: {self.proc.stderr.read()}")
        self.address = line.split(",")[0]

    def reload(self):
        """Makes the bus read its policy files again (after a test changed policy_dir)."""
        r = subprocess.run(["busctl", f"--address={self.address}", "call", "org.freedesktop.DBus",
                            "/org/freedesktop/DBus", "org.freedesktop.DBus", "ReloadConfig"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise Failure(f"ReloadConfig: {r.stderr.strip()}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    stop = close


class StatsBus(PrivateBus):
    """A private bus whose address is exported to what the test starts afterwards, with the
    daemon's statistics read through perfrelayctl."""

    def __init__(self, binary):
        builddir = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
        self.ctl = os.path.join(builddir, "client", "perfrelayctl")
        if not os.access(self.ctl, os.X_OK):
            raise Failure(f"{self.ctl} was not built")
        super().__init__()
        os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = self.address

    def stats(self):
        """GetStats() through perfrelayctl stats --json."""
        r = subprocess.run([self.ctl, "stats", "--json"], capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=self.address))
        if r.returncode != 0:
            raise Failure(f"perfrelayctl stats --json failed ({r.returncode}): {r.stderr.strip()}")
        return json.loads(r.stdout)

    def producer(self, producer_id, listed=False):
        """One producer's entry of GetStats(): all zeros if the daemon lists no such producer, or
        None then if `listed`."""
        st = self.stats()
        for p in st["producers"]:
            if p["id"] == producer_id:
                return p
        if listed:
            return None
        return {k: (0 if isinstance(v, int) else v) for k, v in st["total"].items()} | {"id": producer_id}
