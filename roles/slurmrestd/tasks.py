"""slurmrestd with JWT authentication, listening only where the rendered env says.

The rendered slurm/slurmrestd/<node>.env holds SLURMRESTD_LISTEN (the node's
address on the spec's slurmrestd segment and port): binding that one address is
what keeps the API off the other segments.
"""
from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.operations import systemd

from roles._lib import consumed, digest_of, digest_text, install, install_packages, put_text, \
    service_current

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


@deploy("slurmrestd")
def slurmrestd() -> None:
    env = consumed("slurm/slurmrestd/*.env")
    if len(env) != 1:
        raise OperationError(f"{host.name}: has the slurmrestd role but consumes "
                             f"{len(env)} slurmrestd env files; re-render the spec")
    if not consumed("slurm/slurm.conf"):
        raise OperationError(f"{host.name}: slurmrestd needs slurm.conf on its node, and "
                             "the rendered tree gives this node none")
    install_packages("slurmrestd")
    install(env[0])
    put_text(UNIT, DROPIN, name="slurmrestd unit: JWT, unprivileged")
    service_current(name="slurmrestd on the current settings", service="slurmrestd",
                    digest=digest_text(digest_of(env), UNIT))
    systemd.service(name="Enable slurmrestd", service="slurmrestd", running=True,
                    enabled=True)
