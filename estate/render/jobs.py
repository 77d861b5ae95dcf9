"""The jobs' network environment (docs/jobs.md): per node class of the Slurm workers, a
TaskProlog that prints the interface variables NCCL, UCX and Open MPI read, only where the
task has not set them; and Open MPI's system-wide MCA parameters on the workers and login
nodes (its out-of-band channel, and the narrowed ports where firewall.jobs.ports is set).
The facts come from estate.model.jobs, which the flow matrix reads too."""
from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup

from estate.model import jobs, model
from estate.model.services import HOOK_DIR, HOOKS, OPENMPI
from estate.render.artifacts import Artifact
from estate.render.templates import render_template
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

PLANE = "slurm"
TASK_PROLOG = "estate-task-prolog"
# one artifact per node class, each installed at the same path (HOOK_DIR/<file name>)
TASK_PROLOGS = f"{HOOKS}task-prologs/"
MCA_PARAMS = f"{OPENMPI}openmpi-mca-params.conf"   # Debian's /etc/openmpi/ file


@dataclass(frozen=True)
class Variable:
    name: str
    value: str
    unless: str = ""     # another variable whose presence also means "the user chose"
    why: str = ""

    @property
    def test(self) -> Markup:
        # names and text are Estate's own constants (no spec value): printed as they are
        return Markup(" && ".join(f'[ -z "${{{n}+x}}" ]' for n in (self.name, self.unless)
                                  if n))

    @property
    def comment(self) -> Markup:
        return Markup(self.why)


def task_prolog_path() -> str:
    return f"{HOOK_DIR}/{TASK_PROLOG}"


def variables(estate: Estate, class_name: str) -> list[Variable]:
    """The variables a task on this class's workers gets, in the order printed."""
    net = jobs.class_network(estate, class_name)
    out = []
    if net.socket_if:
        out.append(Variable("NCCL_SOCKET_IFNAME", f"={net.socket_if}", why="NCCL's bootstrap "
                            "and socket transport: this NIC exactly (= : no prefix match)"))
    if net.hcas:
        out += [Variable("NCCL_IB_HCA", "=" + ",".join(net.hcas),
                         why="NCCL's InfiniBand transport: these HCAs exactly"),
                Variable("UCX_NET_DEVICES", ",".join(f"{h}:1" for h in net.hcas),
                         why="UCX (Open MPI's pml ucx): these HCAs, port 1")]
    if net.btl_cidrs:
        out.append(Variable("OMPI_MCA_btl_tcp_if_include", ",".join(net.btl_cidrs),
                            "OMPI_MCA_btl_tcp_if_exclude", "Open MPI's TCP transport "
                            "(include and exclude are exclusive: a user's exclude wins)"))
    if net.oob_cidrs:
        out.append(Variable("OMPI_MCA_oob_tcp_if_include", ",".join(net.oob_cidrs),
                            "OMPI_MCA_oob_tcp_if_exclude", "Open MPI's out-of-band "
                            "channel: the segment every Slurm node has, login nodes too"))
    cut = jobs.split(estate)
    if cut:
        lo, hi = jobs.ports(estate)
        out += [Variable("MASTER_PORT", str(cut.master_port), why=f"firewall.jobs.ports "
                         f"narrows job traffic to {lo}-{hi}: torchrun's port inside it"),
                Variable("OMPI_MCA_oob_tcp_dynamic_ipv4_ports", f"{cut.oob[0]}-{cut.oob[1]}"),
                Variable("OMPI_MCA_btl_tcp_port_min_v4", str(cut.btl_min)),
                Variable("OMPI_MCA_btl_tcp_port_range_v4", str(cut.btl_range))]
    return out


def class_workers(estate: Estate, class_name: str) -> Hostlist:
    return Hostlist([r for g in model(estate).groups
                     if g.spec.node_class == class_name and g.slurm_compute
                     for r in g.hosts.ranges])


def task_prologs_wanted(estate: Estate) -> bool:
    """Whether the workers run Estate's TaskProlog: wherever there are workers."""
    return any(class_workers(estate, name) for name in jobs.worker_classes(estate))


def task_prologs(estate: Estate, site: str | None) -> list[Artifact]:
    """One TaskProlog per worker node class, all installed at task_prolog_path(); each
    ends by running the site's own TaskProlog (site: its installed path), if any."""
    out = []
    for name in jobs.worker_classes(estate):
        hosts = class_workers(estate, name)
        if not hosts:
            continue
        text = render_template("slurm_conf/task-prolog.sh.j2", {
            "node_class": name, "variables": variables(estate, name), "site": site})
        out.append(Artifact(f"{TASK_PROLOGS}{name}/{TASK_PROLOG}", text, hosts, PLANE,
                            mode=0o755))
    return out


def mca_params(estate: Estate, source: str = "") -> list[Artifact]:
    """Open MPI's system-wide parameters where its launcher runs: workers and login nodes."""
    workers, logins = estate.role_hosts("slurm_worker"), estate.role_hosts("slurm_login")
    hosts = Hostlist(workers.ranges + logins.ranges)
    seg = next((s for s in estate.spec.segments
                if s.name == estate.spec.slurm.address_segment), None)
    if not hosts or seg is None:
        return []
    lo, hi = jobs.ports(estate)
    text = render_template("slurm_conf/openmpi-mca-params.conf.j2", {
        "source": source, "spec_name": estate.spec.name, "oob_cidrs": str(seg.cidr),
        "split": jobs.split(estate), "ports": f"{lo}-{hi}"})
    return [Artifact(MCA_PARAMS, text, hosts, PLANE)]
