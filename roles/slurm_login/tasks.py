"""Login node: Slurm clients and the rendered slurm.conf/gres.conf (no daemon); ReFrame with
Estate's site configuration and checks, the acceptance suite users run from here."""
from __future__ import annotations

from shlex import quote

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.operations import files, server

from estate.model import reframe
from estate.model.services import OPENMPI, SEFF
from roles._lib import consumed, install, install_packages, runtime, slurm_configs
from roles._lib.facts import Probe


@deploy("slurm_login")
def slurm_login() -> None:
    # the workers' extras (Open MPI): salloc, then mpirun here, launches on the workers;
    # reframe: python3-venv, for ReFrame's own venv
    install_packages("slurm_login",
                     extras=(*runtime("slurm_worker_extras", ()), "reframe"))
    slurm_configs()
    for path in consumed(f"{OPENMPI}*"):
        install(path)   # mpirun under salloc runs here (docs/jobs.md, "Login nodes")
    for path in consumed("reframe/*") + consumed(SEFF):
        install(path)
    install_reframe()


def install_reframe() -> None:
    """reframe-hpc, pinned, into its venv (Debian has no ReFrame), from wheels this machine
    fetched: the login node installs them with no index, so it reaches no outside host
    (nor needs to trust what intercepts its TLS). Nothing when the venv runs that version."""
    have = host.get_fact(Probe, f"{quote(reframe.REFRAME)} --version 2>/dev/null")
    if have == reframe.VERSION:
        host.noop(f"ReFrame {reframe.VERSION} in {reframe.HOME}")
        return
    wheels = f"{reframe.HOME}-wheels"
    try:
        local = reframe.wheels()
    except RuntimeError as exc:
        raise OperationError(f"{host.name}: {exc}")
    files.sync(name=f"ReFrame {reframe.VERSION}'s wheels", src=str(local), dest=wheels,
               delete=True)
    server.shell(name=f"Install ReFrame {reframe.VERSION} into {reframe.HOME}", commands=[
        f"python3 -m venv --clear {quote(reframe.HOME)}",
        f"{quote(reframe.HOME)}/bin/pip install -q --no-index --disable-pip-version-check "
        f"--find-links {quote(wheels)} {quote('reframe-hpc==' + reframe.VERSION)}"])
