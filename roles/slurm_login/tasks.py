"""Login node: Slurm clients and the rendered slurm.conf/gres.conf (no daemon)."""
from __future__ import annotations

from pyinfra.api import deploy

from estate.model.services import OPENMPI
from roles._lib import consumed, install, install_packages, runtime, slurm_configs


@deploy("slurm_login")
def slurm_login() -> None:
    # the workers' extras (Open MPI): salloc, then mpirun here, launches on the workers
    install_packages("slurm_login", extras=tuple(runtime("slurm_worker_extras", ())))
    slurm_configs()
    for path in consumed(f"{OPENMPI}*"):
        install(path)   # mpirun under salloc runs here (docs/jobs.md, "Login nodes")
