"""slurmrestd with JWT authentication on loopback, behind a TLS front on its segment.

The rendered slurm/slurmrestd/<node>.env holds SLURMRESTD_LISTEN (loopback and the
spec's port): nothing but the front on the same node reaches the API in clear. The
rendered slurm/slurmrestd-tls/<node>.conf is stunnel's (Debian's stunnel@.service runs
/etc/stunnel/<instance>.conf); its key and certificate come from the secrets directory,
issued from the estate's CA for this node's address (estate.provision.tls).
"""
from __future__ import annotations

from pathlib import PurePosixPath

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.operations import systemd

from estate.model.bridge import CA_CERT, TLS_CA, TLS_CERT, TLS_KEY, server_files
from estate.model.destinations import destination
from roles._lib import consumed, digest_of, digest_text, install, install_packages, \
    install_secret, put_text, secret_digest, service_current

DROPIN = "/etc/systemd/system/slurmrestd.service.d/estate.conf"
UNIT = """\
# Written by Estate. slurmrestd refuses to run as root or SlurmUser; with JWT it
# needs no identity of its own, so a dynamic user. SLURM_JWT=daemon makes it pass
# each client's token through instead of authenticating itself with munge. It reads
# SLURMRESTD_LISTEN from /etc/default/slurmrestd itself: no address on the command
# line (the packaged unit's unix socket would also need root).
[Service]
DynamicUser=yes
Environment=SLURM_JWT=daemon
ExecStart=
ExecStart=/usr/sbin/slurmrestd -a rest_auth/jwt
"""


def _one(pattern: str, what: str) -> str:
    found = consumed(pattern)
    if len(found) != 1:
        raise OperationError(f"{host.name}: has the slurmrestd role but consumes "
                             f"{len(found)} {what}; re-render the spec")
    return found[0]


@deploy("slurmrestd")
def slurmrestd() -> None:
    env = _one("slurm/slurmrestd/*.env", "slurmrestd env files")
    front = _one("slurm/slurmrestd-tls/*.conf", "TLS front configurations")
    if not consumed("slurm/slurm.conf"):
        raise OperationError(f"{host.name}: slurmrestd needs slurm.conf on its node, and "
                             "the rendered tree gives this node none")
    install_packages("slurmrestd")
    install(env)
    put_text(UNIT, DROPIN, name="slurmrestd unit: JWT, unprivileged")
    service_current(name="slurmrestd on the current settings", service="slurmrestd",
                    digest=digest_text(digest_of([env]), UNIT))
    systemd.service(name="Enable slurmrestd", service="slurmrestd", running=True,
                    enabled=True)
    tls_front(front)


def tls_front(conf: str) -> None:
    """stunnel on the rendered configuration, with the node's key (root only: stunnel
    reads it before it drops to its own user) and certificate."""
    key, cert = server_files(PurePosixPath(conf).stem)
    secrets = [(key, TLS_KEY, "0600"), (cert, TLS_CERT, "0644"), (CA_CERT, TLS_CA, "0644")]
    for name, dest, mode in secrets:
        install_secret(name, dest, owner="root:root", mode=mode)
    install(conf)
    unit = f"stunnel@{PurePosixPath(destination(conf)).stem}"
    service_current(name="TLS front on the current certificate", service=unit,
                    digest=digest_text(digest_of([conf]), *(secret_digest(s[0])
                                                             for s in secrets)))
    systemd.service(name="Enable the TLS front", service=unit, running=True, enabled=True)
