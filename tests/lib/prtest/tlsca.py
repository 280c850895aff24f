# SPDX-License-Identifier: LGPL-2.1-or-later
"""A throwaway certificate authority made with the openssl command, for the TLS tests: a CA,
server certificates for the names asked for (or the wrong ones) and a client certificate."""
import os
import shutil
import subprocess
import tempfile

from prtest import Failure, skip

OPENSSL = shutil.which("openssl")


def require_openssl():
    if not OPENSSL:
        skip("openssl is not installed (apt-get install openssl)")


class TestCA:
    def __init__(self):
        require_openssl()
        self.dir = tempfile.mkdtemp(prefix="perfrelay-ca-")
        self.ca = self.path("ca.pem")
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", self.path("ca.key"), "-out", self.ca, "-days", "2", "-subj", "/CN=perfrelay test CA")

    def path(self, name):
        return os.path.join(self.dir, name)

    def _run(self, *args):
        r = subprocess.run([OPENSSL] + list(args), capture_output=True, text=True)
        if r.returncode != 0:
            raise Failure(f"openssl {args[0]} failed: {r.stderr.strip()}")

    def issue(self, name, alt_names=(), usage="serverAuth"):
        """A certificate and key signed by this CA: (certificate, key). alt_names: "IP:127.0.0.1",
        "DNS:localhost", ..."""
        key, csr, cert, ext = (self.path(f"{name}.{x}") for x in ("key", "csr", "pem", "ext"))
        with open(ext, "w") as f:
            if alt_names:
                f.write(f"subjectAltName={','.join(alt_names)}\n")
            f.write(f"extendedKeyUsage={usage}\n")
        self._run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
        self._run("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.path("ca.key"), "-CAcreateserial",
                  "-out", cert, "-days", "2", "-extfile", ext)
        os.chmod(key, 0o600)
        return cert, key

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)
