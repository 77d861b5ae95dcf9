"""The facts the roles gather, as pyinfra FactBase classes (modelled on pyinfra.facts).

Each fact quotes its arguments with shlex: a path or a name from the spec never reaches
the node's shell as code. A fact whose command fails answers empty (a missing stamp, an
inactive unit, an absent driver are answers, not errors) - except kubeadm's token: a
failing `kubeadm token create` fails the fact with kubeadm's own message.
"""
from __future__ import annotations

import re
import shlex
from shlex import quote

from pyinfra.api import FactBase


class _Text(FactBase[str]):
    """Stripped output; empty when the command fails or prints nothing."""

    @staticmethod
    def default() -> str:   # pyinfra answers default() when there is no output
        return ""

    def process(self, output):
        return "\n".join(output).strip()


class Probe(_Text):
    """A diagnostic shell snippet written in a role (never built from a spec value), e.g.
    `lsmod | grep -w nfsd`; the role's *_problem functions read its answer."""

    def command(self, snippet: str) -> str:
        return f"{{ {snippet} ; }} 2>/dev/null || true"


class OsCodename(_Text):
    """The Debian release the node runs (VERSION_CODENAME of /etc/os-release)."""

    def command(self) -> str:
        return "sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null || true"


class FileText(_Text):
    """A small file's text (a stamp, /proc/driver/nvidia/version); empty when absent."""

    def command(self, path: str) -> str:
        return f"cat {quote(path)} 2>/dev/null || true"


class ServiceActive(FactBase[bool]):
    """Whether systemd reports the unit active."""

    @staticmethod
    def default() -> bool:
        return False

    def command(self, unit: str) -> str:
        return f"systemctl is-active {quote(unit)} 2>/dev/null || true"

    def process(self, output):
        return "\n".join(output).strip() == "active"


class Getent(FactBase[dict]):
    """A name service database (passwd, group) as name -> its colon-separated fields."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, db: str) -> str:
        return f"getent {quote(db)} || true"

    def process(self, output):
        return {f[0]: f for f in (line.split(":") for line in output) if f and f[0]}


class DeviceNode(_Text):
    """'character special file MAJOR:MINOR' (hex) for a device node; empty when absent."""

    def command(self, path: str) -> str:
        return f"stat -c '%F %t:%T' {quote(path)} 2>/dev/null || true"


class ContainerVirt(_Text):
    """The container technology this node runs in (systemd-detect-virt), or 'none'."""

    def command(self) -> str:
        return "systemd-detect-virt --container 2>/dev/null || true"


class MysqlGrants(_Text):
    """The grants of a local MariaDB account (unix socket); empty when it doesn't exist."""

    def command(self, user: str) -> str:
        query = f"SHOW GRANTS FOR '{user}'@'localhost'"
        return f"mysql -NBe {quote(query)} 2>/dev/null || true"


class JoinToken(FactBase[dict]):
    """A new bootstrap token made on an initialised control plane, with its CA hash, as
    KUBEADM_TOKEN and KUBEADM_CA_CERT_HASH; empty when kubeadm printed no join command."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, ttl: str | None = None, description: str | None = None) -> str:
        args = ["kubeadm", "token", "create", "--print-join-command"]
        if ttl:
            args += ["--ttl", ttl]
        if description:
            args += ["--description", description]
        return shlex.join(args)

    def process(self, output):
        text = " ".join(output)
        token = re.search(r"--token (\S+)", text)
        ca = re.search(r"--discovery-token-ca-cert-hash (\S+)", text)
        if not token or not ca:
            return {}
        return {"KUBEADM_TOKEN": token.group(1), "KUBEADM_CA_CERT_HASH": ca.group(1)}


class CertificateKey(_Text):
    """A new certificate key for joining control planes: `upload-certs` makes it,
    re-encrypts the uploaded certificates with it and prints it last, so the key is on no
    command line. Each call voids the previous key."""

    def command(self) -> str:
        return "kubeadm init phase upload-certs --upload-certs 2>/dev/null | tail -n 1"
