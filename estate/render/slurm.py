"""Slurm's configuration from the spec: slurm.conf, gres.conf, topology, cgroup, accounts.

The derived facts (NodeName grouping, Gres, NodeAddr ranges, partition members, switch
membership) come from estate.model, which validators and verify read too; this module
chooses Slurm's settings and lays the facts out through the templates in slurm_conf/.
"""
from __future__ import annotations

import hashlib
import json

from markupsafe import Markup

from estate.model import bridge, model
from estate.model.flows import srun_ports
from estate.model.monitoring import JOB_MAP_DIR, gpu_job_map, unmapped_mig_groups
from estate.model.slurm import (block_topology, def_mem_per_cpu, def_per_gpu, default_time,
                                gpu_affinity, node_lines, propagate_except, state_mount,
                                suspend_excluded, weights)
from estate.model.slurm_files import slurmd_restart_facts
from estate.model.slurm_policy import (coordinated, coordinators, dbd_private_data,
                                       private_data)
from estate.model.slurm_keys import MERGED, conf_keys
# The plugin choices are model facts (validators and doctor read them too); re-exported here
# for the renderer's callers.
from estate.model.slurm_plugins import (job_acct_gather, plugin_settings,  # noqa: F401
                                        slurm_plugins, unset_by_release)
from estate.model.services import (CGROUP_BIND, CGROUP_BIND_SBIN, DEFAULT_CGROUP_MOUNTPOINT,
                                   GPU_DEVICES, HOOK_DIR, HOOKS, NVIDIA_MAJOR, PORTS, SEFF,
                                   SLURM_USER, SLURMD_RESTART, SLURMDBD_DATABASE,
                                   SLURMDBD_PATHS, STATE_DROPIN, hooks, jwt_key_path,
                                   slurm_daemon_paths, uses_jwt)
from estate.render import jobs
from estate.render.artifacts import Artifact
from estate.render.templates import RenderError, render_template, shell_quote
from estate.spec.hostlist import Hostlist, compress
from estate.spec.hostset import HostSet, union
from estate.spec.resolved import Estate

PLANE = "slurm"


def controllers(estate: Estate) -> list[dict]:
    seg = estate.spec.slurm.address_segment
    return [{"name": c, "addr": estate.address(c, seg)} for c in estate.spec.slurm.controllers]


def device_files(prefix: str, count: int, first: int = 0) -> str:
    last = first + count - 1
    return f"{prefix}{first}" if count == 1 else f"{prefix}[{first}-{last}]"


def partition_settings(estate: Estate, lines) -> dict[str, list[tuple[str, str]]]:
    """Partition -> its PartitionName line's settings after Nodes, in order."""
    slurm = estate.spec.slurm
    mem_per_cpu, per_gpu = def_mem_per_cpu(estate, lines), def_per_gpu(estate, lines)
    out = {}
    for p in slurm.partitions:
        s = [("Default", "YES" if p.default else "NO"), ("MaxTime", p.max_time),
             ("DefaultTime", default_time(p)), ("PriorityTier", str(p.priority_tier))]
        if p.name in mem_per_cpu:
            s.append(("DefMemPerCPU", str(mem_per_cpu[p.name])))
        cpu, mem = per_gpu.get(p.name, (None, None))
        s += [(k, str(v)) for k, v in (("DefCpuPerGPU", cpu), ("DefMemPerGPU", mem),
                                       ("MaxMemPerNode", p.max_mem_per_node_mb),
                                       ("GraceTime", p.grace_time_s)) if v is not None]
        if p.qos and slurm.accounting:
            s.append(("QOS", p.qos))
        s += [(k, ",".join(v)) for k, v in (("AllowAccounts", p.allow_accounts),
                                            ("DenyAccounts", p.deny_accounts),
                                            ("AllowQos", p.allow_qos),
                                            ("AllowGroups", p.allow_groups)) if v]
        if p.hidden:
            s.append(("Hidden", "YES"))
        if p.oversubscribe:
            s.append(("OverSubscribe", p.oversubscribe))
        if p.preempt_mode:
            s.append(("PreemptMode", p.preempt_mode.upper()))
        if p.tres_billing_weights:
            s.append(("TRESBillingWeights", weights(p.tres_billing_weights)))
        out[p.name] = s + [("State", "UP")]
    return out


def scheduler_parameters(params: dict) -> str:
    return ",".join(k if v is True else f"{k}={v}" for k, v in params.items())


def preempt_mode(slurm) -> str | None:
    """The cluster's PreemptMode; SUSPEND needs GANG to resume what it suspended."""
    if not slurm.preemption:
        return None
    mode = slurm.preemption.mode.upper()
    return "SUSPEND,GANG" if mode == "SUSPEND" else mode


def extra_settings(slurm) -> list[tuple[str, str]]:
    """slurm.extra in Slurm's spelling of each key (the validators refused unknown ones),
    less the keys the template writes merged with the typed fields (MERGED)."""
    known = conf_keys(slurm.version)
    return [(known.get(k.lower(), k), str(v)) for k, v in slurm.extra.items()
            if k.lower() not in MERGED]


def dependency_parameters(slurm) -> str:
    """DependencyParameters: slurm.extra's options, with kill_invalid_depend where the
    spec asks for it (slurmctld reads it only here since 20.02: slurm_conf/keys/moved.json)."""
    extra = next((str(v) for k, v in slurm.extra.items()
                  if k.lower() == "dependencyparameters"), "")
    options = [o for o in extra.split(",") if o]
    if slurm.kill_invalid_depend and "kill_invalid_depend" not in options:
        options.append("kill_invalid_depend")
    return ",".join(options)


def account_tree(slurm) -> list[tuple[str, list]]:
    """(parent, its child accounts) from root down: sacctmgr's load file needs a parent
    account before its children, whatever order the spec lists them in."""
    children: dict[str, list] = {}
    for a in slurm.accounts:
        children.setdefault(a.parent, []).append(a)
    out, queue, seen = [], ["root"], set()
    while queue:
        parent = queue.pop(0)
        if parent in seen or parent not in children:
            continue
        seen.add(parent)
        out.append((parent, children[parent]))
        queue += [a.name for a in children[parent]]
    return out


def account_users(slurm) -> list[tuple[str, list[tuple[str, bool]]]]:
    """(account, [(user, is it the user's default account)]) in spec order. A user's
    DefaultAccount is the first account listing them; sacctmgr keeps one per user, so it
    is written on that account's line only (and that line comes first)."""
    default: dict[str, str] = {}
    for a in slurm.accounts:
        for u in a.users:
            default.setdefault(u, a.name)
    return [(a.name, [(u, default[u] == a.name) for u in a.users])
            for a in slurm.accounts if a.users]


def bridge_associations(estate: Estate) -> list[dict]:
    """Each grant's user with its (account, partition) associations, the only ones
    accounting.sh leaves it (estate.model.bridge)."""
    return [{"tenant": g.tenant, "user": g.user, "account": g.account, "qos": list(g.qos),
             "partitions": list(g.partitions),
             # a case pattern: each pair one quoted word, since '|' separates them there
             "pattern": Markup("|").join(shell_quote(f"{g.account}|{p}")
                                         for p in g.partitions)}
            for g in bridge.grants(estate)]


def _context(estate: Estate, source: str) -> dict:
    spec = estate.spec
    lines = node_lines(estate)
    return {
        "spec": spec, "slurm": spec.slurm, "source": source,
        "controllers": controllers(estate),
        "node_lines": lines,
        "partition_settings": partition_settings(estate, lines),
        "partitions": model(estate).partitions,
        "nodesets": list(model(estate).nodesets.values()),
        "propagate_except": ",".join(propagate_except(estate)),
        "scheduler_parameters": scheduler_parameters(spec.slurm.scheduler_parameters),
        "priority_tres": weights(spec.slurm.priority.tres),
        "preempt_mode": preempt_mode(spec.slurm),
        "extra": extra_settings(spec.slurm),
        "dependency_parameters": dependency_parameters(spec.slurm),
        "private_data": ",".join(private_data(estate)),
        "dbd_private_data": ",".join(dbd_private_data(estate)),
        "coordinators": coordinators(spec.slurm),
        "coordinated": coordinated(spec.slurm),
        "account_tree": account_tree(spec.slurm),
        "account_users": account_users(spec.slurm),
        "bridges": bridge_associations(estate),
        "accounting_addr": (estate.address(spec.slurm.accounting.host,
                                           spec.slurm.address_segment)
                            if spec.slurm.accounting else None),
        "switch_nodes": model(estate).switch_nodes,
        # child switches as Slurm writes a hostlist (spine[01-02]), so that
        # `scontrol show topology` reads back what was written
        "switch_lists": {sw.name: compress(sw.switches) for sw in spec.topology.switches},
        "device_files": device_files,
        "gpu_affinity": gpu_affinity,
        "gres_autodetect": spec.slurm.gres_autodetect,
        "jwt": uses_jwt(spec),
        "jwt_key": jwt_key_path(spec),
        "daemon_paths": slurm_daemon_paths(spec),
        "dbd_paths": SLURMDBD_PATHS,
        "slurmdbd_database": SLURMDBD_DATABASE,
        "plugins": plugin_settings(estate),
        "ports": PORTS,
        "srun_ports": srun_ports(estate),
        "slurm_user": SLURM_USER,
        "hooks": spec.slurm.hooks,
        "node_hooks": node_hooks(estate),
        "ctld_hooks": [(h.key, h.installed) for h in hooks(spec) if h.daemon == "slurmctld"],
        "power": spec.slurm.power_saving,
        "suspend_excluded": str(suspend_excluded(lines)),
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
        Artifact("slurm/topology.conf", render_template(topology_template(estate), ctx),
                 ctl, PLANE),
        Artifact("slurm/cgroup.conf", render_template("slurm_conf/cgroup.conf.j2", ctx),
                 Hostlist(readers.ranges + estate.role_hosts("slurm_worker").ranges), PLANE),
    ]
    if login and estate.spec.slurm.accounting:
        # seff: a job's CPU and memory efficiency from sacct (Debian packages no seff)
        out.append(Artifact(SEFF, render_template("slurm_conf/seff.py.j2", {
            "cluster": estate.spec.slurm.cluster_name}), login, PLANE, mode=0o755))
    out += worker_artifacts(estate) + restart_facts(estate, out)
    out += slurmrestd_artifacts(estate)
    shared = state_mount(estate)
    if shared:
        # systemd mounts the state before it starts slurmctld, at every boot
        out.append(Artifact(STATE_DROPIN, render_template("slurm_conf/slurmctld-state.conf.j2",
                                                          ctx), ctl, PLANE))
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


def topology_template(estate: Estate) -> str:
    """topology.conf's form: the blocks where the Slurm reads them, else the switch tree
    (topology.block_version refuses blocks the spec's Slurm cannot read)."""
    return ("slurm_conf/topology.block.conf.j2" if block_topology(estate)
            else "slurm_conf/topology.conf.j2")


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
        if hosts and cls.gpu_kinds:
            out.append(Artifact(f"{GPU_DEVICES}{cls.name}.json",
                                gpu_devices_json(estate, cls), hosts, PLANE))
    site = dict(_site_hooks(estate)).get("TaskProlog")
    return (out + hook_artifacts(estate, workers) + job_map_artifacts(estate, workers)
            + jobs.task_prologs(estate, site) + jobs.mca_params(estate)
            + cgroup_bind_artifacts(estate, workers))


def cgroup_bind_artifacts(estate: Estate, workers: Hostlist) -> list[Artifact]:
    """Where slurm.cgroup_mountpoint moves Slurm's cgroup tree: a script slurmd runs before
    it starts (a drop-in's ExecStartPre) that binds the node's own cgroups there."""
    slurm = estate.spec.slurm
    if slurm.cgroup_mountpoint == DEFAULT_CGROUP_MOUNTPOINT or \
            slurm.process_tracking != "cgroup" or not workers:
        return []
    script = render_template("slurm_conf/cgroup-bind.sh.j2", {
        "cluster": slurm.cluster_name, "mountpoint": slurm.cgroup_mountpoint})
    dropin = ("# Written by Estate: slurmd's job cgroups nest under this node's own "
              "(slurm.cgroup_mountpoint)\n[Service]\n"
              f"ExecStartPre={CGROUP_BIND_SBIN}\n").encode()
    return [Artifact(CGROUP_BIND + "estate-slurm-cgroup", script, workers, PLANE, mode=0o755),
            Artifact(CGROUP_BIND + "slurmd-cgroup.conf", dropin, workers, PLANE)]


def restart_facts(estate: Estate, confs: list[Artifact]) -> list[Artifact]:
    """Per group of workers, the settings of the Slurm files that their slurmd restarts
    for: configless, they install none of those files, so this is what tells their role
    (and the Pulumi step's trigger) that a change needs their slurmd restarted."""
    files = {a.path: a.content for a in confs}
    return [Artifact(f"{SLURMD_RESTART}{hashlib.sha256(text).hexdigest()[:12]}.txt", text,
                     hosts, PLANE)
            for hosts, text in slurmd_restart_facts(files, estate.spec.slurm.version,
                                                    estate.role_hosts("slurm_worker"))]


# Estate's own Prolog and Epilog where it keeps the DCGM exporter's job mapping; each runs
# the site's script of the same key after it (estate.model.monitoring.gpu_job_map).
JOB_MAP_HOOKS = {"Prolog": "estate-prolog", "Epilog": "estate-epilog"}
# Their variant for the workers with MIG devices, which keeps no mapping: installed at the
# same path (slurm.conf's Prolog= and Epilog= are one line for all workers), as the
# destination table maps every artifact under slurm/hooks/ by its file name.
MIG_HOOKS = f"{HOOKS}mig/"


def node_hooks(estate: Estate) -> list[tuple[str, str]]:
    """slurm.conf's node hook keys and the programs they name: the site's, or Estate's
    mapping hooks in front of the site's Prolog and Epilog."""
    site = _site_hooks(estate)
    ours = [(key, f"{HOOK_DIR}/{name}") for key, name in JOB_MAP_HOOKS.items()] \
        if gpu_job_map(estate) else []
    # the jobs' network environment (estate.render.jobs), in front of the site's TaskProlog
    if jobs.task_prologs_wanted(estate):
        ours.append(("TaskProlog", jobs.task_prolog_path()))
    mine = {k for k, _ in ours}
    return ours + [(k, p) for k, p in site if k not in mine]


def _site_hooks(estate: Estate) -> list[tuple[str, str]]:
    return [(h.key, h.installed) for h in hooks(estate.spec) if h.daemon == "slurmd"]


def job_map_artifacts(estate: Estate, workers: Hostlist) -> list[Artifact]:
    """Estate's Prolog and Epilog: on the workers, the pair that keeps the mapping; on
    those with MIG devices, a pair that leaves it alone (unmapped_mig_groups says why)."""
    if not gpu_job_map(estate):
        return []
    mig = union(HostSet.of(g.hosts) for g in unmapped_mig_groups(estate))
    mapped = (HostSet.of(workers) - mig).hostlist() if mig else workers
    out = []
    for prefix, hosts, keeps_map in ((HOOKS, mapped, True), (MIG_HOOKS, mig.hostlist(), False)):
        if hosts:
            out += _job_map_hooks(estate, prefix, hosts, keeps_map)
    return out


def _job_map_hooks(estate: Estate, prefix: str, hosts: Hostlist, keeps_map: bool
                   ) -> list[Artifact]:
    site = {h.key: h.installed for h in hooks(estate.spec) if h.daemon == "slurmd"}
    return [Artifact(f"{prefix}{name}", render_template("slurm_conf/gpu-job-map.sh.j2", {
                "key": key, "dir": JOB_MAP_DIR, "site": site.get(key), "map": keeps_map}),
                hosts, PLANE, mode=0o755)
            for key, name in JOB_MAP_HOOKS.items()]


def hook_artifacts(estate: Estate, workers: Hostlist) -> list[Artifact]:
    """The site's scripts, byte for byte, executable: node hooks on every worker (slurmd
    runs them; configless workers get slurm.conf from slurmctld but never these files),
    power programs on the controllers (slurmctld runs them)."""
    out = []
    controllers = Hostlist.from_names(estate.spec.slurm.controllers)
    for hook in hooks(estate.spec):
        content = estate.files.get(hook.file)
        if content is None:
            raise RenderError(f"{hook.file} (slurm.hooks) was not read: load the spec from "
                              "its file so the files next to it come along")
        on = workers if hook.daemon == "slurmd" else controllers
        out.append(Artifact(hook.artifact, content, on, PLANE, mode=0o755))
    return out


def gpu_devices_json(estate: Estate, cls) -> bytes:
    """Device nodes gres.conf names. The driver makes them and the role only checks they
    exist, unless the class's GPUs are emulated (or the prefix is under /run): then the
    role creates them as fake devices, under /dev where a devices cgroup governs them."""
    prefix = estate.spec.slurm.gpu_device_path
    fake = prefix.startswith("/run/") or all(k.emulated for k in cls.gpu_kinds)
    doc = {"mode": "create" if fake else "expect",
           "devices": [{"path": f"{prefix}{i}", "major": NVIDIA_MAJOR, "minor": i}
                       for i in range(cls.gpu_count)]}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def slurmrestd_artifacts(estate: Estate) -> list[Artifact]:
    rest = estate.spec.slurm.slurmrestd
    if rest is None:
        return []
    out = []
    for name in estate.role_hosts("slurmrestd"):
        # loopback only: its TLS front (estate.render.bridge) holds the segment's address
        out.append(Artifact(f"slurm/slurmrestd/{name}.env",
                            f'SLURMRESTD_LISTEN="{bridge.LOOPBACK}:{rest.port}"\n'.encode(),
                            Hostlist.from_names([name]), PLANE))
    return out
