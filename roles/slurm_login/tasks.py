"""Login node: Slurm clients and the rendered slurm.conf/gres.conf (no daemon)."""
from __future__ import annotations

from pyinfra.api import deploy

from roles._lib import install_packages, slurm_configs


@deploy("slurm_login")
def slurm_login() -> None:
    install_packages("slurm_login")
    slurm_configs()
