"""`estate rotate SPEC SECRET`: a new munge key, JWT key or TLS seed, taken to exactly the
nodes that hold it, in an order that loses no running job.

The holders are the Pulumi program's (estate.pulumi.plan.secret_hosts: the same data, so a
changed key in a stack's state re-runs those nodes' steps and no other). The order:

- munge: every holder gets the new key first, then munged restarts everywhere (a node whose
  munged still had the old key would refuse the others' credentials: the window is the
  restarts, seconds, and Slurm's RPCs retry through it), then slurmctld (it recovers its
  jobs from StateSaveLocation), slurmdbd, slurmrestd, and last the slurmd's (their jobs'
  slurmstepd keep running through a slurmd restart);
- jwt: the controllers get the new key, slurmctld restarts (tokens signed with the old key
  are refused from then on), slurmrestd restarts, and the minter mints every bridged
  tenant's token again at once, so a tenant's next call carries a token of the new key;
- tls-seed: the new seed issues a new CA and fronts (estate.provision.tls); the minters
  first hand the tenants both CAs (the old one and the new), the fronts then change
  certificate, and only then do the tenants' Secrets hold the new CA alone: no moment in
  which a tenant's client trusts neither;
- cluster-ca: refused, with what the operator must do (REFUSE_CLUSTER_CA).

A runner carries out the steps (SshRunner on real nodes; the namespace lab's in
estate.lab.netns_rotate). Keys travel on stdin or as files, never as arguments, and nothing
here prints one.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from estate.model import bridge
from estate.model.services import (JWT_KEY, KEYS, MUNGE_KEY, MUNGE_USER, SLURM_USER,
                                   jwt_key_path)
from estate.spec.resolved import Estate

# The secret names the command takes -> services.KEYS
SECRETS = {"munge-key": "munge", "jwt-key": "jwt", "tls-seed": "tls", "cluster-ca": "cluster-ca"}
MUNGE_PATH = "/etc/munge/munge.key"
REFUSE_CLUSTER_CA = (
    "estate rotate will not replace the Kubernetes cluster CA under a running cluster: follow "
    "Kubernetes' manual CA rotation (kubernetes.io/docs/tasks/tls/manual-rotation-of-ca-"
    "certificates: trust the old and new CA together, re-issue every certificate, then drop "
    "the old), then put the new CA as k8s-ca.key and k8s-ca.crt in the secrets directory "
    "and run estate apply.")
PREVIOUS = ".previous"   # the replaced secret, kept beside the new one (0600) for a rollback


class Refused(RuntimeError):
    """What cannot be rotated by a command, and what the operator must do instead."""


@dataclass(frozen=True)
class Step:
    """One action on some nodes, all done before the next step starts."""
    action: str             # put | restart | mint | tls-bundle | tls-front | tls-ca
    nodes: tuple[str, ...]
    what: str = ""          # put: the key; restart: the daemon

    def line(self) -> str:
        return f"{self.action:<10} {self.what:<12} {','.join(self.nodes)}"


def holders(estate: Estate, artifacts, key: str) -> list[str]:
    """The nodes whose runs get the key: the Pulumi program's table."""
    from estate.pulumi.plan import secret_hosts
    hosts = secret_hosts(estate, artifacts).get(key)
    found = set(hosts) if hosts is not None else set()
    return [n for n in estate.nodes if n in found]     # once each, in the spec's order


def _daemons(estate: Estate, artifacts) -> dict[str, list[str]]:
    """daemon -> the nodes that run it, from what the nodes consume."""
    slurm = estate.spec.slurm
    workers = sorted({n for p in artifacts if p == "slurm/slurmd.env"
                      for n in artifacts[p].consumers})
    return {"slurmctld": list(slurm.controllers),
            "slurmdbd": [slurm.accounting.host] if slurm.accounting else [],
            "slurmrestd": list(estate.role_hosts("slurmrestd")) if slurm.slurmrestd else [],
            "slurmd": workers}


def plan(estate: Estate, artifacts, secret: str) -> list[Step]:
    """The steps that rotate `secret` (a key of SECRETS), in order."""
    if secret not in SECRETS:
        raise Refused(f"no secret {secret!r}: one of {', '.join(SECRETS)}")
    key = SECRETS[secret]
    if key == "cluster-ca":
        raise Refused(REFUSE_CLUSTER_CA)
    have = holders(estate, artifacts, key)
    if not have:
        raise Refused(f"no node of {estate.spec.name} holds the {secret} (nothing to rotate)")
    d = _daemons(estate, artifacts)
    minters = tuple(bridge.minter_hosts(estate))
    if key == "munge":
        steps = [Step("put", tuple(have), "munge"), Step("restart", tuple(have), "munge")]
        steps += [Step("restart", tuple(n for n in d[x] if n in have), x)
                  for x in ("slurmctld", "slurmdbd", "slurmrestd", "slurmd")
                  if any(n in have for n in d[x])]
        return steps
    if key == "jwt":
        steps = [Step("put", tuple(have), "jwt"), Step("restart", tuple(have), "slurmctld")]
        if d["slurmrestd"]:
            steps.append(Step("restart", tuple(d["slurmrestd"]), "slurmrestd"))
        return steps + ([Step("mint", minters)] if minters else [])
    fronts = tuple(d["slurmrestd"])
    steps = [Step("tls-bundle", minters), Step("mint", minters)] if minters else []
    steps.append(Step("tls-front", fronts, "stunnel"))
    return steps + ([Step("tls-ca", minters), Step("mint", minters)] if minters else [])


def new_secret(secrets: Path, secret: str) -> Path:
    """A new random key in the secrets directory (0600, written whole), the old one kept
    as <file>.previous; for the TLS seed, the CA and fronts issued from it are removed so
    that the next issue derives them from the new seed (a site's own CA stays)."""
    key = KEYS[SECRETS[secret]]
    path = Path(secrets) / key.file
    tmp = path.with_name(f".{key.file}.new")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(key.size))
    if path.exists():
        os.replace(path, path.with_name(key.file + PREVIOUS))
    os.replace(tmp, path)
    return path


# --- carrying it out ----------------------------------------------------------------------

class Runner(Protocol):
    def put(self, node: str, path: str, data: bytes, owner: str, mode: int) -> None: ...
    def restart(self, node: str, daemon: str) -> None: ...
    def mint(self, node: str) -> None: ...
    def front(self, node: str) -> None: ...       # the TLS front's new key and certificate
    def front_ca(self, node: str, pem: bytes) -> None: ...   # the CA the tenants get


def key_file(estate: Estate, key: str) -> tuple[str, str, int]:
    """(path on a node, owner, mode) of a Slurm key."""
    if key == "munge":
        return MUNGE_PATH, MUNGE_USER, 0o400
    return jwt_key_path(estate.spec), SLURM_USER, 0o600


def carry_out(estate: Estate, steps: list[Step], secrets: Path, runner: Runner,
              log=print) -> None:
    """Each step on each of its nodes, in order; the first failure stops the rotation (the
    message names the step: the nodes before it have the new key, the rest the old)."""
    from estate.provision import tls
    for step in steps:
        log(f"rotate: {step.line()}")
        for node in step.nodes:
            if step.action == "put":
                path, owner, mode = key_file(estate, step.what)
                runner.put(node, path, (secrets / KEYS[step.what].file).read_bytes(),
                           owner, mode)
            elif step.action == "restart":
                runner.restart(node, step.what)
            elif step.action == "mint":
                runner.mint(node)
            elif step.action == "tls-bundle":
                runner.front_ca(node, _ca_bundle(secrets, estate, tls))
            elif step.action == "tls-front":
                runner.front(node)
            elif step.action == "tls-ca":
                runner.front_ca(node, (secrets / tls.CA_CERT).read_bytes())


def _ca_bundle(secrets: Path, estate: Estate, tls) -> bytes:
    """The new CA (issued from the new seed) followed by the old one, while both serve."""
    old = (secrets / tls.CA_CERT).read_bytes() if (secrets / tls.CA_CERT).exists() else b""
    if (secrets / tls.CA_CERT).exists() and not (secrets / tls.CA_KEY).exists():
        (secrets / tls.CA_CERT).unlink()     # derived, not a site's: issue it again
    for node in estate.role_hosts("slurmrestd"):
        for name in tls.server_files(node):
            (secrets / name).unlink(missing_ok=True)
    tls.ensure_tls(secrets, estate)
    return (secrets / tls.CA_CERT).read_bytes() + old


class SshRunner:
    """Real nodes over ssh (an ssh_config as doctor writes it): keys on stdin."""

    UNITS = {"munge": "munge", "slurmctld": "slurmctld", "slurmdbd": "slurmdbd",
             "slurmrestd": "slurmrestd", "slurmd": "slurmd", "stunnel": "stunnel@slurmrestd"}

    def __init__(self, config: Path, secrets: Path, estate: Estate):
        self.config, self.secrets, self.estate = config, secrets, estate

    def _ssh(self, node: str, command: list[str], data: bytes | None = None) -> None:
        proc = subprocess.run(["ssh", "-F", str(self.config), node, shlex.join(command)],
                              input=data, capture_output=True, timeout=300)
        if proc.returncode != 0:
            why = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["failed"]
            raise RuntimeError(f"{node}: {command[0]} failed: {why[0]}")

    def put(self, node, path, data, owner, mode):
        tmp = f"{path}.estate-new"
        self._ssh(node, ["sh", "-c", 'umask 077 && cat >"$1" && chown "$2:$2" "$1" && '
                         'chmod "$3" "$1" && mv "$1" "$4"', "put", tmp, owner,
                         f"{mode:o}", path], data)

    def restart(self, node, daemon):
        self._ssh(node, ["systemctl", "restart", self.UNITS[daemon]])

    def mint(self, node):
        self._ssh(node, ["systemctl", "start", "estate-bridge-mint.service"])

    def front(self, node):
        from estate.provision import tls
        key, cert = tls.server_files(node)
        self.put(node, bridge.TLS_KEY, (self.secrets / key).read_bytes(), "root", 0o600)
        self.put(node, bridge.TLS_CERT, (self.secrets / cert).read_bytes(), "root", 0o644)
        self.restart(node, "stunnel")

    def front_ca(self, node, pem):
        self.put(node, bridge.TLS_CA, pem, "root", 0o644)

