"""Estate's Slurm exporter on the nodes the rendered tree gives it (the controllers): the
rendered program and its configuration, run by systemd as SlurmUser, which reads Slurm
over munge like any user's squeue and holds no credential. SlurmUser, because under
PrivateData (slurm.private_data) another user would count its own jobs only: slurmctld
shows every job to SlurmUser and root (validate_slurm_user), and the controllers, the
only nodes it runs on, run slurmctld as that user already."""
from __future__ import annotations

from pyinfra.api import OperationError, deploy
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from roles._lib import consumed, digest_of, digest_text, install, install_packages, \
    put_text, service_current
from estate.model.destinations import destination
from estate.model.services import SLURM_USER

SERVICE = "estate-slurm-exporter"
UNIT_PATH = f"/etc/systemd/system/{SERVICE}.service"


def unit(program: str, config: str) -> str:
    return f"""\
# Written by Estate: the Slurm exporter (its program and configuration are rendered).
[Unit]
Description=Estate's Slurm exporter
After=network-online.target munge.service

[Service]
# SlurmUser sees every job under PrivateData
User={SLURM_USER}
NoNewPrivileges=yes
ExecStart=/usr/bin/python3 {program} {config}
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
"""


@deploy("slurm_exporter")
def slurm_exporter() -> None:
    program = consumed("monitoring/slurm-exporter.py")
    config = consumed("monitoring/slurm-exporter/*.json")
    if len(program) != 1 or len(config) != 1:
        raise OperationError("the Slurm exporter needs its program and one configuration "
                             "from the rendered tree; re-render the spec")
    install_packages("slurm_exporter")
    for path in program + config:
        install(path)
    text = unit(destination(program[0]), destination(config[0]))
    written = put_text(text, UNIT_PATH, name="the Slurm exporter's unit")
    systemd.daemon_reload(name="systemd: the Slurm exporter's unit", _if=any_changed(written))
    service_current(name="the Slurm exporter on the current program", service=SERVICE,
                    digest=digest_text(digest_of(program + config), text))
    systemd.service(name="Enable the Slurm exporter", service=SERVICE, running=True,
                    enabled=True)
