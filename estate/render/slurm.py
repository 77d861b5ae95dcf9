"""Slurm's configuration from the spec: slurm.conf, gres.conf, topology, cgroup, accounts.

Everything Slurm-specific that is *derived* (NodeName grouping, Gres strings,
device files, NodeAddr ranges) is computed here once; the templates in
slurm_conf/ only lay it out. Validators that need the same facts import them
from this module rather than recomputing them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from ipaddress import IPv4Address

from estate.render.artifacts import Artifact
from estate.render.templates import render_template
from estate.spec.hostlist import Hostlist, HostlistError, Range
from estate.spec.hostset import HostSet
from estate.spec.model import NodeGroup
from estate.spec.resolved import Estate

PLANE = "slurm"

# Daemon ports: the single source for slurm.conf, slurmdbd.conf and the firewall rules.
PORTS = {"slurmctld": 6817, "slurmd": 6818}
NVIDIA_MAJOR = 195
# Service accounts the daemons run as; the spec's identity section must define them
# (fixed UIDs across nodes), which estate.check.identity verifies.
SLURM_USER = "slurm"
MUNGE_USER = "munge"  # character major of /dev/nvidiaN


@dataclass
class NodeLine:
    """One NodeName line: nodes with identical hardware, in spec order."""
    names: list[Range]
    addrs: list[Range]
    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    real_memory: int
    gres: str | None
    gres_model: str | None
    gres_count: int
    features: tuple[str, ...]
    weight: int

    @property
    def hostlist(self) -> Hostlist:
        return Hostlist(self.names)

    @property
    def addr_list(self) -> Hostlist:
        return Hostlist(self.addrs)


def gres_count(estate: Estate, group: NodeGroup) -> int:
    cls = estate.node_class(group)
    default = cls.gpu_count if cls else 0
    return default if group.slurm.gres_count is None else group.slurm.gres_count


def real_memory(estate: Estate, group: NodeGroup) -> int:
    cls = estate.node_class(group)
    default = cls.memory_mb if cls else 0
    return group.slurm.real_memory_mb or default


def is_compute(group: NodeGroup) -> bool:
    return group.plane == "slurm" and "slurm_worker" in group.roles


def address_ranges(first: int, count: int) -> list[Range]:
    """A block of consecutive IPv4 addresses as hostlist ranges, one per /24."""
    out, n, end = [], first, first + count
    while n < end:
        chunk_end = min(end, (n | 0xFF) + 1)
        prefix = str(IPv4Address(n)).rsplit(".", 1)[0] + "."
        out.append(Range(prefix, n & 0xFF, (chunk_end - 1) & 0xFF, 1))
        n = chunk_end
    return out


def node_lines(estate: Estate) -> list[NodeLine]:
    seg = estate.spec.slurm.address_segment
    blocks = {(b.group, b.segment): b for b in estate.address_blocks}
    lines: dict[tuple, NodeLine] = {}
    for gi, (group, hosts) in enumerate(zip(estate.spec.nodes, estate.group_hosts)):
        cls = estate.node_class(group)
        if not is_compute(group) or cls is None or not hosts:
            continue
        count = gres_count(estate, group)
        model = cls.gpus.model if cls.gpus else None
        key = (cls.sockets, cls.cores_per_socket, cls.threads_per_core,
               real_memory(estate, group), model, count,
               tuple(group.slurm.features), group.slurm.weight)
        line = lines.get(key)
        if line is None:
            line = lines[key] = NodeLine(
                [], [], cls.cpus, cls.sockets, cls.cores_per_socket, cls.threads_per_core,
                key[3], f"gpu:{model}:{count}" if count else None, model, count,
                key[6], key[7])
        line.names.extend(hosts.ranges)
        block = blocks.get((gi, seg))
        if block:
            line.addrs.extend(address_ranges(block.first, block.count))
    return list(lines.values())


def def_mem_per_cpu(estate: Estate, lines: list[NodeLine]) -> dict[str, int]:
    """Partition -> DefMemPerCPU: the smallest RealMemory/CPUs among its nodes.

    With CR_Core_Memory and no default, a job is given all of a node's memory, so
    two 1-GPU jobs could never share a 2-GPU node (measured on real slurmctld).
    """
    sets = [(HostSet.of(line.names), line.real_memory // line.cpus) for line in lines]
    out = {}
    for part in estate.spec.slurm.partitions:
        try:
            members = HostSet.of(Hostlist.parse(part.nodes))
        except HostlistError:
            continue  # nodes.bad_hostlist reports it
        per_cpu = [mem for hosts, mem in sets if hosts & members]
        if per_cpu:
            out[part.name] = min(per_cpu)
    return out


def controllers(estate: Estate) -> list[dict]:
    seg = estate.spec.slurm.address_segment
    return [{"name": c, "addr": estate.address(c, seg)} for c in estate.spec.slurm.controllers]


def device_files(prefix: str, count: int) -> str:
    return f"{prefix}0" if count == 1 else f"{prefix}[0-{count - 1}]"


def switch_nodes(estate: Estate) -> dict[str, Hostlist]:
    """Leaf switch -> compute nodes under it (node.switch plus a switch's own nodes)."""
    members: dict[str, list[Range]] = {}
    for group, hosts in zip(estate.spec.nodes, estate.group_hosts):
        if is_compute(group) and group.switch:
            members.setdefault(group.switch, []).extend(hosts.ranges)
    for sw in estate.spec.topology.switches:
        if sw.nodes:
            members.setdefault(sw.name, []).extend(Hostlist.parse(sw.nodes).ranges)
    return {name: Hostlist(r) for name, r in members.items()}


def plugin_settings(estate: Estate) -> dict[str, dict[str, str]]:
    """The plugin keywords of each rendered config file, the one place their values are chosen.

    The templates print them; ``slurm_plugins`` lists what a daemon will load, so that
    ``estate doctor`` and the plugin-package test know which shared objects must exist."""
    slurm = estate.spec.slurm
    cgroup = slurm.process_tracking == "cgroup"
    conf = {"AuthType": "auth/munge"}
    if slurm.slurmrestd is not None:
        conf["AuthAltTypes"] = "auth/jwt"
    conf |= {
        "ProctrackType": "proctrack/cgroup" if cgroup else "proctrack/linuxproc",
        "TaskPlugin": "task/cgroup,task/affinity" if cgroup else "task/none",
        "SelectType": "select/cons_tres",
        "TopologyPlugin": "topology/tree",
        "SchedulerType": "sched/backfill",
        "PriorityType": "priority/multifactor",
        "AccountingStorageType": ("accounting_storage/slurmdbd" if slurm.accounting
                                  else "accounting_storage/none"),
        "JobAcctGatherType": "jobacct_gather/linux" if slurm.accounting else "jobacct_gather/none",
        "GresTypes": "gpu",
    }
    out = {"slurm.conf": conf, "cgroup.conf": {"CgroupPlugin": "autodetect"}}
    if slurm.accounting:
        out["slurmdbd.conf"] = {"AuthType": "auth/munge",
                                "StorageType": "accounting_storage/mysql"}
    if slurm.slurmrestd is not None:
        out["slurmrestd"] = {"rest_auth": "rest_auth/jwt"}
    return out


# Keywords whose values are not "type/name" plugins but imply one.
_IMPLIED = {"GresTypes": "gres/{}"}


def slurm_plugins(estate: Estate) -> dict[str, list[str]]:
    """Plugin names ('auth/jwt') each rendered file makes a daemon load.

    'autodetect' (cgroup/v1 or v2, chosen by the running kernel) names no one plugin:
    ``estate doctor`` checks cgroup v2 on its own."""
    out = {}
    for path, settings in plugin_settings(estate).items():
        names = []
        for key, value in settings.items():
            for item in value.split(","):
                if key in _IMPLIED:
                    names.append(_IMPLIED[key].format(item))
                elif "/" in item:
                    names.append(item)
        out[path] = list(dict.fromkeys(names))
    return out


def _context(estate: Estate, source: str) -> dict:
    spec = estate.spec
    lines = node_lines(estate)
    return {
        "spec": spec, "slurm": spec.slurm, "source": source,
        "controllers": controllers(estate),
        "node_lines": lines,
        "def_mem_per_cpu": def_mem_per_cpu(estate, lines),
        "accounting_addr": (estate.address(spec.slurm.accounting.host,
                                           spec.slurm.address_segment)
                            if spec.slurm.accounting else None),
        "switch_nodes": switch_nodes(estate),
        "device_files": device_files,
        "jwt": spec.slurm.slurmrestd is not None,
        "plugins": plugin_settings(estate),
        "ports": PORTS,
        "slurm_user": SLURM_USER,
    }


def render_slurm(estate: Estate, source: str = "") -> list[Artifact]:
    ctx = _context(estate, source)
    ctl = Hostlist.from_names(estate.spec.slurm.controllers)
    login = estate.role_hosts("slurm_login")
    # Configless: workers fetch slurm.conf and gres.conf from slurmctld, so only the
    # controllers and login nodes (where clients run without slurmd) install them.
    readers = Hostlist(ctl.ranges + login.ranges)
    out = [
        Artifact("slurm/slurm.conf", render_template("slurm_conf/slurm.conf.j2", ctx),
                 readers, PLANE),
        Artifact("slurm/gres.conf", render_template("slurm_conf/gres.conf.j2", ctx),
                 readers, PLANE),
        Artifact("slurm/topology.conf", render_template("slurm_conf/topology.conf.j2", ctx),
                 ctl, PLANE),
        Artifact("slurm/cgroup.conf", render_template("slurm_conf/cgroup.conf.j2", ctx),
                 Hostlist(readers.ranges + estate.role_hosts("slurm_worker").ranges), PLANE),
    ]
    if estate.spec.topology.blocks:
        out.append(Artifact("slurm/topology.block.conf",
                            render_template("slurm_conf/topology.block.conf.j2", ctx),
                            ctl, PLANE))
    out += worker_artifacts(estate)
    out += slurmrestd_artifacts(estate)
    acct = estate.spec.slurm.accounting
    if acct:
        dbd = Hostlist.from_names([acct.host])
        out.append(Artifact("slurm/slurmdbd.conf",
                            render_template("slurm_conf/slurmdbd.conf.j2", ctx),
                            dbd, PLANE, mode=0o600, owner="slurm:slurm"))
        out.append(Artifact("slurm/accounts.cfg",
                            render_template("slurm_conf/accounts.cfg.j2", ctx), ctl, PLANE))
        out.append(Artifact("slurm/accounting.sh",
                            render_template("slurm_conf/accounting.sh.j2", ctx), ctl, PLANE,
                            mode=0o755))
    return out


def worker_artifacts(estate: Estate) -> list[Artifact]:
    """What each worker needs besides configless config: slurmd options and its GPUs."""
    seg = estate.spec.slurm.address_segment
    servers = ",".join(str(estate.address(c, seg) or c) for c in estate.spec.slurm.controllers)
    workers = estate.role_hosts("slurm_worker")
    out = [Artifact("slurm/slurmd.env",
                    f'SLURMD_OPTIONS="--conf-server {servers}"\n'.encode(), workers, PLANE)]
    for cls in estate.spec.node_classes:
        hosts = estate.hosts_where(lambda g: g.node_class == cls.name and is_compute(g))
        if hosts and cls.gpus:
            out.append(Artifact(f"slurm/gpu-devices/{cls.name}.json",
                                gpu_devices_json(estate, cls.gpu_count), hosts, PLANE))
    return out


def gpu_devices_json(estate: Estate, count: int) -> bytes:
    """Device nodes gres.conf names. Under /dev the driver makes them and the role only
    checks they exist; elsewhere (labs) the role creates them as fake devices."""
    prefix = estate.spec.slurm.gpu_device_path
    doc = {"mode": "expect" if prefix.startswith("/dev/") else "create",
           "devices": [{"path": f"{prefix}{i}", "major": NVIDIA_MAJOR, "minor": i}
                       for i in range(count)]}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def slurmrestd_artifacts(estate: Estate) -> list[Artifact]:
    rest = estate.spec.slurm.slurmrestd
    if rest is None:
        return []
    out = []
    for name in estate.role_hosts("slurmrestd"):
        addr = estate.address(name, rest.segment)
        out.append(Artifact(f"slurm/slurmrestd/{name}.env",
                            f'SLURMRESTD_LISTEN="{addr}:{rest.port}"\n'.encode(),
                            Hostlist.from_names([name]), PLANE))
    return out
