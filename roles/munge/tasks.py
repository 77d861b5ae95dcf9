"""munged with the estate's key: same key on every Slurm node, 0400 munge:munge."""
from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import systemd

from estate.model.services import MUNGE_KEY
from roles._lib import install_packages, install_secret, secret_digest, service_current

KEY = "/etc/munge/munge.key"


@deploy("munge")
def munge() -> None:
    install_packages("munge")
    install_secret(MUNGE_KEY.file, KEY, owner="munge:munge", mode="0400")
    service_current(name="munged on the current key", service="munge",
                    digest=secret_digest(MUNGE_KEY.file))
    systemd.service(name="Enable munge", service="munge", running=True, enabled=True)
