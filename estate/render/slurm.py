"""Slurm's configuration from the spec: slurm.conf, gres.conf, topology, cgroup, accounts.

The derived facts (NodeName grouping, Gres, NodeAddr ranges, partition members, switch
membership) come from estate.model, which validators and verify read too; this module
chooses Slurm's settings and lays the facts out through the templates in slurm_conf/.
"""
from __future__ import annotations

import json

from estate.model import model
from estate.model.slurm import def_mem_per_cpu, node_lines
from estate.model.flows import srun_ports
from estate.model.services import (GPU_DEVICES, PORTS, SLURM_USER, SLURMDBD_DATABASE,
                                   jwt_key_path, slurm_daemon_paths, uses_jwt)
from estate.render.artifacts import Artifact
from estate.render.templates import render_template
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

PLANE = "slurm"
NVIDIA_MAJOR = 195  # character major of /dev/nvidiaN


def controllers(estate: Estate) -> list[dict]:
    seg = estate.spec.slurm.address_segment
    return [{"name": c, "addr": estate.address(c, seg)} for c in estate.spec.slurm.controllers]


def device_files(prefix: str, count: int) -> str:
    return f"{prefix}0" if count == 1 else f"{prefix}[0-{count - 1}]"


def plugin_settings(estate: Estate) -> dict[str, dict[str, str]]:
    """The plugin keywords of each rendered config file, the one place their values are chosen.

    The templates print them; ``slurm_plugins`` lists what a daemon will load, so that
    ``estate doctor`` and the plugin-package test know which shared objects must exist."""
    slurm = estate.spec.slurm
    cgroup = slurm.process_tracking == "cgroup"
    conf = {"AuthType": "auth/munge"}
    if uses_jwt(estate.spec):
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
    if uses_jwt(estate.spec):
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
        "switch_nodes": model(estate).switch_nodes,
        "device_files": device_files,
        "jwt": uses_jwt(spec),
        "jwt_key": jwt_key_path(spec),
        "daemon_paths": slurm_daemon_paths(spec),
        "slurmdbd_database": SLURMDBD_DATABASE,
        "plugins": plugin_settings(estate),
        "ports": PORTS,
        "srun_ports": srun_ports(estate),
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
        hosts = Hostlist([r for g in model(estate).groups
                          if g.spec.node_class == cls.name and g.slurm_compute
                          for r in g.hosts.ranges])
        if hosts and cls.gpus:
            out.append(Artifact(f"{GPU_DEVICES}{cls.name}.json",
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
