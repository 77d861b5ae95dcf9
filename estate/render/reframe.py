"""ReFrame's site configuration for the login nodes (ReFrame is how sites accept a cluster):
the spec's Slurm cluster as one ReFrame system, each Slurm partition as a ReFrame partition
(scheduler slurm, launcher srun, access `-p NAME`, its GPUs per node as a device, a
resource and extras), plus `login`, the login node itself with the local scheduler, and
`bridge`, an admin host that calls slurmrestd's TLS front, where a tenant has the bridge.

The configuration is built as data and printed as a Python literal (pprint: repr of each
string, so no spec value can end a string or start a statement), through
slurm_conf/reframe-settings.py.j2. ReFrame's YAML form is not used: ReFrame renders a YAML
configuration as a Jinja2 template before parsing it, so a value would be evaluated there.

Estate's checks (estate/acceptance/estate_checks.py) ship beside it, unchanged.
"""
from __future__ import annotations

import pprint
import re

from markupsafe import Markup

from estate import paths
from estate.model import bridge, model
from estate.model.reframe import CHECKS, SETTINGS
from estate.model.slurm import node_lines, partition_lines
from estate.render.artifacts import Artifact
from estate.render.templates import RenderError, line_value, render_template
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

PLANE = "slurm"
CHECKS_SOURCE = paths.ACCEPTANCE / "estate_checks.py"
LOGIN, BRIDGE = "login", "bridge"   # the ReFrame partitions that are not Slurm's
MPI_ENV = "openmpi"                 # Open MPI's wrappers, srun --mpi=pmix (MpiDefault)
# ReFrame's names (its schema's alphanum_ext_string): a Slurm name may also hold dots.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def render_reframe(estate: Estate, source: str = "") -> list[Artifact]:
    nodes = consumers(estate)
    if not nodes:
        return []
    ctx = {"source": source or "a spec", "cluster": estate.spec.slurm.cluster_name,
           "config": Markup(pprint.pformat(site_configuration(estate), width=96,
                                           sort_dicts=False))}
    return [Artifact(SETTINGS, render_template("slurm_conf/reframe-settings.py.j2", ctx),
                     nodes, PLANE),
            Artifact(CHECKS, CHECKS_SOURCE.read_bytes(), nodes, PLANE)]


def consumers(estate: Estate) -> Hostlist:
    """The login nodes, where users run ReFrame; the first controller where there are none
    (where `estate verify` submits jobs from, too)."""
    logins = estate.role_hosts("slurm_login")
    if len(logins):
        return logins
    return Hostlist.from_names(list(estate.spec.slurm.controllers[:1]))


def reframe_name(name: str, where: str) -> str:
    """A spec name as ReFrame accepts it: a dot becomes an underscore."""
    out = line_value(name, where).replace(".", "_")
    if not _NAME.fullmatch(out):
        raise RenderError(f"{where}: {name!r} is not a name ReFrame accepts")
    return out


def site_configuration(estate: Estate) -> dict:
    slurm = estate.spec.slurm
    system = reframe_name(slurm.cluster_name, "slurm.cluster_name")
    slurm_parts = slurm_partitions(estate)
    parts = [login_partition(estate, slurm_parts)] + slurm_parts
    if bridge.has_minter(estate):
        parts.append(bridge_partition(estate))
    names = [p["name"] for p in parts]
    if len(set(names)) != len(names):
        raise RenderError(f"ReFrame partitions of {system}: two share a name in {names}")
    envs: list[dict[str, object]] = [{"name": "builtin", "cc": "cc", "cxx": "c++", "ftn": "", "target_systems": [system]}]
    if mpi(estate):
        envs.append({"name": MPI_ENV, "cc": "mpicc", "cxx": "mpicxx", "ftn": "",
                     "target_systems": [system], "features": ["mpi"],
                     "extras": {"mpi": slurm.mpi_default}})
    hosts = [f"^{re.escape(line_value(n, 'a login node'))}$" for n in consumers(estate)]
    return {"systems": [{"name": system,
                         "descr": f"Estate's Slurm cluster {slurm.cluster_name}",
                         "hostnames": hosts, "modules_system": "nomod",
                         "partitions": parts}],
            "environments": envs}


def mpi(estate: Estate) -> bool:
    """Open MPI is on the nodes (the catalogue's pmix extra) where MpiDefault is PMIx."""
    return estate.spec.slurm.mpi_default.startswith("pmix")


def scheduler(estate: Estate) -> str:
    """ReFrame's slurm scheduler polls sacct; without accounting, squeue."""
    return "slurm" if estate.spec.slurm.accounting else "squeue"


def slurm_partitions(estate: Estate) -> list[dict]:
    lines = partition_lines(estate, node_lines(estate))
    members = {p.name: len(p.members) for p in model(estate).partitions}
    out = []
    for p in estate.spec.slurm.partitions:
        plines = lines.get(p.name, [])
        gpus = min((ln.gres_count for ln in plines), default=0)
        cpus = min((ln.job_cpus for ln in plines), default=0)
        part = {"name": reframe_name(p.name, f"slurm.partitions[{p.name}]"),
                "descr": f"Slurm partition {p.name}", "scheduler": scheduler(estate),
                "launcher": "srun", "access": [f"-p {p.name}"],
                "environs": ["builtin"] + ([MPI_ENV] if mpi(estate) else []),
                "max_jobs": max(1, members.get(p.name, 1)),
                "features": ["slurm"] + (["multinode"] if members.get(p.name, 0) >= 2 else [])
                + (["gpu"] if gpus else []),
                "extras": {"slurm_partition": p.name, "nodes": members.get(p.name, 0),
                           "gpus_per_node": gpus, "cpus_per_node": cpus,
                           "default": p.default, "hidden": p.hidden}}
        if gpus:
            part["devices"] = [{"type": "gpu", "num_devices": gpus}]
            part["resources"] = [{"name": "gpu", "options": ["--gres=gpu:{num_gpus_per_node}"]}]
        out.append(part)
    return out


def login_partition(estate: Estate, slurm_parts: list[dict]) -> dict:
    """The login node itself. `--system CLUSTER:login` leaves ReFrame only this partition,
    so its extras say what the checks submit to: the Slurm partitions' facts, and whether
    sacct has the jobs."""
    return {"name": LOGIN, "descr": "the login node itself: checks that run srun, salloc "
            "and sbatch as a user would (they need no shared filesystem)",
            "scheduler": "local", "launcher": "local", "environs": ["builtin"],
            "max_jobs": 1,
            "extras": {"accounting": estate.spec.slurm.accounting is not None,
                       "slurm_partitions": [p["extras"] for p in slurm_parts]}}


def bridge_partition(estate: Estate) -> dict:
    """An admin host (the flow matrix lets only the admin hosts and the tenants' nodes reach
    slurmrestd): `reframe --system CLUSTER:bridge` there, with a tenant's token."""
    rest = estate.spec.slurm.slurmrestd
    host = next(iter(estate.role_hosts("slurmrestd")))
    grants = [{"tenant": g.tenant, "user": g.user, "account": g.account,
               "partition": g.partitions[0], "qos": g.qos[0] if g.qos else None}
              for g in bridge.grants(estate)]
    return {"name": BRIDGE, "descr": "an admin host: jobs submitted over the bridge "
            "(slurmrestd's TLS front) with a tenant's token",
            "scheduler": "local", "launcher": "local", "environs": ["builtin"],
            "max_jobs": 1,
            "extras": {"url": f"https://{estate.address(host, rest.segment)}:{rest.port}",
                       "api": bridge.rest_api(estate.spec.slurm.version),
                       "grants": grants}}
