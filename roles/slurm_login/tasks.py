"""Login node: Slurm clients and the rendered slurm.conf/gres.conf (no daemon)."""
from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt

from estate.catalogue import packages
from roles.slurm_controller.tasks import slurm_configs


@deploy("slurm_login")
def slurm_login() -> None:
    apt.packages(name="Install Slurm clients", packages=packages("slurm_login"), update=True,
                 cache_time=3600)
    slurm_configs()
