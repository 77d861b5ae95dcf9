"""slurmctld on the rendered configs; restart on any change, then push to configless slurmds.

Slurm 22.05 needs a slurmctld restart (not only `scontrol reconfigure`) for some
slurm.conf changes, e.g. adding or removing nodes; which ones is Slurm's
business, so any config change restarts slurmctld, and `scontrol reconfigure`
then hands the new files to the slurmds that fetched theirs from it.
"""
from __future__ import annotations

import posixpath
import shlex

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.facts.server import Mounts
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from estate.model.services import CTLD_HOOKS, JWT_KEY
from estate.model.destinations import destination
from estate.spec.types import system_directory_problem
from roles._lib import consumed, digest_of, digest_text, install, install_packages, install_secret, \
    run_when_changed, runtime, secret_digest, service_current, slurm_configs, wait_until


def qos_names() -> None:
    """The QOS names into slurmdbd before slurmctld starts: it refuses to start with a
    partition QOS that slurmdbd lacks (24.11.5: fatal, measured in tests/live_slurm/
    test_example_prod.py), while the QOS limits wait for slurmctld's TRES (accounting())."""
    script = consumed("slurm/accounting.sh")
    if not script:
        return
    install(script[0])
    wait_until(name="Wait for slurmdbd", check="sacctmgr -n list cluster",
               what="slurmdbd (sacctmgr list cluster)", timeout=90)
    run_when_changed(name="QOS names for the partitions",
                     command=shlex.quote(destination(script[0])) + " qos-names",
                     stamp="/var/lib/estate/applied/qos-names", digest=digest_of(script))


def accounting() -> None:
    """QOS, accounts and users into slurmdbd: once per version of the rendered files."""
    script = consumed("slurm/accounting.sh")
    if not script:
        return
    inputs = script + consumed("slurm/accounts.cfg")
    for p in inputs:
        install(p)
    wait_until(name="Wait for slurmdbd", check="sacctmgr -n list cluster",
               what="slurmdbd (sacctmgr list cluster)", timeout=90)
    run_when_changed(name="Apply accounts, QOS and fair share",
                     command=shlex.quote(destination(script[0])),
                     stamp="/var/lib/estate/applied/accounting", digest=digest_of(inputs))


@deploy("slurm_controller")
def slurm_controller() -> None:
    state_dir, user = runtime("slurm_state_dir"), runtime("slurm_user", "slurm")
    if not state_dir:
        raise OperationError(f"{host.name}: the rendered slurm.conf has no StateSaveLocation; "
                             "re-render the spec")
    problem = system_directory_problem(state_dir) or (
        None if state_dir.startswith("/") and "/../" not in state_dir + "/" else
        f"{state_dir!r} is not an absolute path")
    if problem:
        # the spec type refuses these; a hand-edited rendered tree must not get this far
        raise OperationError(f"{host.name}: StateSaveLocation {problem}; the role would "
                             "chown it to the Slurm user with mode 0700. Use a dedicated "
                             "subdirectory such as /var/spool/slurmctld and re-render")
    install_packages("slurm_controller",
                     extras=("minter",) if consumed("slurm/bridge/*") else ())
    shared = runtime("slurm_state_mount")
    if shared and shared not in host.get_fact(Mounts):
        raise OperationError(f"{host.name}: slurmctld's state lies on the export mounted at "
                             f"{shared}, which is not mounted; the storage deploy mounts it "
                             "(estate apply runs it first here): check the NFS server and "
                             f"`systemctl status {shared.strip('/').replace('/', '-')}.mount`")
    files.directory(name="State directory", path=state_dir, user=user, group=user, mode="0700")
    put_back: list = []
    configs = slurm_configs(put_back)
    inputs = [digest_of(configs)]
    for path in consumed(f"{CTLD_HOOKS}*"):
        install(path)   # the power programs: slurmctld runs them afresh each time
    dropins = consumed("slurm/systemd/*")
    if dropins:
        inputs.append(digest_of(dropins))
        installed = [install(path) for path in dropins]
        systemd.daemon_reload(name="systemd: slurmctld's unit drop-ins",
                              _if=any_changed(*installed))
    if runtime("jwt_key"):
        install_secret(JWT_KEY.file, runtime("jwt_key"), owner=f"{user}:{user}", mode="0600")
        inputs.append(secret_digest(JWT_KEY.file))
    qos_names()
    service_current(name="slurmctld on the current configs", service="slurmctld",
                    digest=digest_text(*inputs))
    systemd.service(name="Enable slurmctld", service="slurmctld", running=True, enabled=True)
    wait_until(name="Wait for slurmctld", check="scontrol ping | grep -q UP",
               what="slurmctld (scontrol ping)")
    # After slurmctld: it registers the cluster's TRES (gres/gpu) with slurmdbd, and
    # QOS limits on gres/gpu are refused until then.
    accounting()
    run_when_changed(name="Hand the new configs to configless slurmds",
                     command="scontrol reconfigure", stamp="/var/lib/estate/applied/reconfigure",
                     digest=digest_of(configs))
    # A config put back over a hand edit has the digest already stamped, so neither step
    # above runs, while slurmctld may run on the edit (estate drift finds that): reconfigure
    server.shell(name="Reconfigure on the configs put back", commands=["scontrol reconfigure"],
                 _if=any_changed(*put_back))
    bridge_minter()


def bridge_minter() -> None:
    """The rendered token minter and its timer, where the tree has them; after slurmctld,
    which signs the tokens (the timer's first run is at its start). Before them, each
    tenant's kubeconfig (its client certificate for the API server, issued from the cluster
    CA: estate.provision.kube_pki), root only: it holds the key. The minter reads it on
    every run, so a renewed certificate needs no restart."""
    paths = consumed("slurm/bridge/*")
    if not paths:
        return
    kubeconfigs = sorted((runtime("bridge_kubeconfigs") or {}).items())
    for folder in sorted({posixpath.dirname(dest) for _, dest in kubeconfigs}):
        files.directory(name=f"{folder}: the minter's credentials, root only", path=folder,
                        user="root", group="root", mode="0700")
    for secret, dest in kubeconfigs:
        install_secret(secret, dest, owner="root:root", mode="0600")
    installed = [install(path) for path in paths]
    systemd.daemon_reload(name="systemd: the token minter's units",
                          _if=any_changed(*installed))
    for timer in (p for p in paths if p.endswith(".timer")):
        unit = destination(timer).rsplit("/", 1)[-1]
        systemd.service(name=f"Enable {unit}", service=unit, running=True, enabled=True)
