"""Service facts every stage shares: accounts, ports, paths, key files and artifact paths.

The renderers print these, the roles and labs install by them, the validators check the
spec's identity against them and the Pulumi driver sizes its secrets by them. Nothing
here depends on a spec; spec-dependent service facts are functions taking one.
"""
from __future__ import annotations

from dataclasses import dataclass

from estate.spec.model import Spec
from estate.spec.resolved import Estate

# Accounts the daemons run as; the spec's identity section must define them with fixed
# ids across nodes (estate.check.identity).
SLURM_USER = "slurm"
MUNGE_USER = "munge"

# Daemon ports: slurm.conf, the firewall rules, the endpoints and `estate doctor` read them.
PORTS = {"slurmctld": 6817, "slurmd": 6818, "kube-apiserver": 6443, "nfs": 2049}

# The slurmdbd database (MariaDB, reached over its unix socket as SLURM_USER).
SLURMDBD_DATABASE = "slurm_acct_db"


@dataclass(frozen=True)
class Key:
    """A cluster secret: its file name on nodes and in a secrets directory, its size, and
    the environment variable that hands it (base64) to `estate apply`, never argv."""
    file: str
    size: int
    env: str


MUNGE_KEY = Key("munge.key", 128, "ESTATE_MUNGE_KEY_B64")   # mungekey's default, 1024 bits
JWT_KEY = Key("jwt_hs256.key", 32, "ESTATE_JWT_KEY_B64")    # Slurm's JWT guide: 32 bytes
KEYS = {"munge": MUNGE_KEY, "jwt": JWT_KEY}

# Artifact path prefixes that several stages select by.
GPU_DEVICES = "slurm/gpu-devices/"
IDENTITY = "common/identity.json"
MANIFESTS = "kubernetes/manifests/"


def uses_jwt(spec: Spec) -> bool:
    """slurmrestd authenticates with JWT: slurm.conf then enables auth/jwt."""
    return spec.slurm.slurmrestd is not None


@dataclass(frozen=True)
class DaemonPath:
    """A path slurm.conf names (its keyword), and who owns it: for a file, its directory
    must exist and belong to `owner`, since the daemon writes it after dropping to it."""
    key: str
    path: str
    owner: str
    is_dir: bool


def slurm_daemon_paths(spec: Spec) -> tuple[DaemonPath, ...]:
    """slurm.conf's state, spool, pid and log paths, in the order slurm.conf prints them."""
    return (DaemonPath("StateSaveLocation", spec.slurm.state_dir, SLURM_USER, True),
            DaemonPath("SlurmdSpoolDir", "/var/spool/slurmd", "root", True),
            DaemonPath("SlurmctldPidFile", "/run/slurmctld.pid", "root", False),
            DaemonPath("SlurmdPidFile", "/run/slurmd.pid", "root", False),
            DaemonPath("SlurmctldLogFile", "/var/log/slurm/slurmctld.log", SLURM_USER, False),
            DaemonPath("SlurmdLogFile", "/var/log/slurm/slurmd.log", "root", False))


def jwt_key_path(spec: Spec) -> str | None:
    """Where slurmctld reads the JWT key (AuthAltParameters=jwt_key=...)."""
    return f"{spec.slurm.state_dir}/{JWT_KEY.file}" if uses_jwt(spec) else None


def flows(estate: Estate, gi: int) -> list[tuple[str, int, str]]:
    """(service, port, source CIDR) that node group gi listens for: the firewall rules
    and `estate doctor`'s port checks both read this one list."""
    spec, group, hosts = estate.spec, estate.spec.nodes[gi], estate.group_hosts[gi]
    slurm_seg, rest, acct = spec.slurm.address_segment, spec.slurm.slurmrestd, spec.slurm.accounting
    found = []
    if "slurm_controller" in group.roles:
        found.append(("slurmctld", PORTS["slurmctld"], slurm_seg))
    if "slurm_worker" in group.roles:
        found.append(("slurmd", PORTS["slurmd"], slurm_seg))
    if "slurmrestd" in group.roles and rest:
        found.append(("slurmrestd", rest.port, rest.segment))
    if acct and acct.host in hosts:
        found.append(("slurmdbd", acct.port, slurm_seg))
    if "k8s_control_plane" in group.roles and spec.kubernetes:
        found.append(("kube-apiserver", PORTS["kube-apiserver"], spec.kubernetes.api_segment))
    found += [("nfs", PORTS["nfs"], e.segment) for e in spec.storage.exports if e.server in hosts]
    cidr = {s.name: str(s.cidr) for s in spec.segments}
    return [(svc, port, cidr[seg]) for svc, port, seg in found if seg in cidr]
