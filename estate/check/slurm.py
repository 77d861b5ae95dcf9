"""Slurm validators: controllers, partitions, QOS, accounts and node definitions.

Derived Slurm facts (the effective Gres count and RealMemory, which nodes get a
NodeName line) come from estate.model, which the renderer reads too, so a check and
the rendered slurm.conf can never disagree about them.
"""
from __future__ import annotations

import re

from estate.check._common import (
    HostSet, all_hosts, duplicates, group_of, group_sets, groups_touching, hosts_where,
    problem, short, union,
)
from estate.catalogue import UNPACKAGED_PLUGINS
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model import model
from estate.model.nodes import slurm_compute
from estate.model.slurm import (default_time, def_per_gpu, node_lines, partition_lines,
                                state_mount, time_seconds)
from estate.model.slurm_keys import OWNED, closest, conf_keys, plugins, scheduler_options, ships
from estate.model.services import hooks
from estate.model.slurm_plugins import slurm_plugins
from estate.model.slurm_refusals import sentence as refusal
from estate.model.storage import squashes_root
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING

# Slurm's time formats (sbatch(1) --time): minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_TIME = re.compile(r"[0-9]+|[0-9]+:[0-9]+|[0-9]+:[0-9]+:[0-9]+|[0-9]+-[0-9]+|[0-9]+-[0-9]+:[0-9]+"
                   r"|[0-9]+-[0-9]+:[0-9]+:[0-9]+")
_UNLIMITED = {"infinite", "unlimited"}
# The partition name slurm.conf reads as a keyword: PartitionName=DEFAULT sets defaults for
# the partition lines after it and makes no partition (read_config.c, _parse_partitionname;
# 22.05 and 24.11). 'all' is no keyword there: slurmctld loads PartitionName=all and serves
# it (slurm_conf/refusals.json: partition_named_default, partition_named_all; every
# sentence below that says what Slurm does is an entry there, run on both releases by
# tests/live_slurm/test_slurm_refusals.py).
_RESERVED = {"default"}


def _named_lists(slurm):
    """(key, label, items, name key): slurmdbd folds QOS and account names to lowercase."""
    yield "partitions", "partition", slurm.partitions, lambda x: x.name
    yield "qos", "QOS", slurm.qos, lambda x: x.name.lower()
    yield "accounts", "account", slurm.accounts, lambda x: x.name.lower()


@validator("slurm.duplicate_name", E, "slurm", "two partitions, QOS or accounts share a name")
def duplicate_name(estate: Estate) -> Problems:
    for key, label, items, name in _named_lists(estate.spec.slurm):
        for i, item, first in duplicates(items, name):
            yield problem(("slurm", key, i, "name"), f"{label} '{item.name}' is defined twice "
                          f"(first at slurm.{key}[{first}])", "rename or remove one")


@validator("slurm.reserved_name", E, "slurm", "a partition named DEFAULT (a slurm.conf keyword)")
def reserved_name(estate: Estate) -> Problems:
    for i, part in enumerate(estate.spec.slurm.partitions):
        if part.name.lower() in _RESERVED:
            yield problem(("slurm", "partitions", i, "name"), f"'{part.name}' is a slurm.conf "
                          f"keyword: {refusal('partition_named_default')}",
                          "choose another name")


@validator("slurm.unknown_controller", E, "slurm", "a controller that is not a defined host")
def unknown_controller(estate: Estate) -> Problems:
    for i, name in enumerate(estate.spec.slurm.controllers):
        if group_of(estate, name) is None:
            yield problem(("slurm", "controllers", i), f"controller '{name}' is not a host of "
                          "any node group", "name a host from 'nodes'")


@validator("slurm.duplicate_controller", E, "slurm", "the backup controller is the primary")
def duplicate_controller(estate: Estate) -> Problems:
    for i, name, _ in duplicates(estate.spec.slurm.controllers, lambda n: n):
        yield problem(("slurm", "controllers", i), f"'{name}' is listed twice as controller",
                      "name a different host as backup, or list only the primary")


@validator("slurm.controller_role", E, "slurm",
           "a controller whose group lacks the slurm_controller role")
def controller_role(estate: Estate) -> Problems:
    for i, name in enumerate(estate.spec.slurm.controllers):
        group = group_of(estate, name)
        if group is not None and "slurm_controller" not in group.roles:
            yield problem(("slurm", "controllers", i), f"controller '{name}' has no "
                          "slurm_controller role, so slurmctld is never installed there",
                          "add slurm_controller to its group's roles")


@validator("slurm.controller_not_listed", W, "slurm",
           "a node with the slurm_controller role that slurm.controllers does not name")
def controller_not_listed(estate: Estate) -> Problems:
    named = HostSet.names(estate.spec.slurm.controllers)
    for gi, group in enumerate(estate.spec.nodes):
        if "slurm_controller" in group.roles:
            extra = group_sets(estate)[gi] - named
            if extra:
                yield problem(("nodes", gi, "roles"), f"{short(extra)} have the slurm_controller "
                              "role but are not in slurm.controllers, so no node points at them",
                              "list them in slurm.controllers or drop the role")


@validator("slurm.partition_unknown_node", E, "slurm", "a partition names hosts that do not exist")
def partition_unknown_node(estate: Estate) -> Problems:
    for part in model(estate).partitions:
        if missing := part.members - all_hosts(estate):
            yield problem(("slurm", "partitions", part.index, "nodes"), f"partition '{part.name}' "
                          f"names unknown hosts {short(missing)}",
                          "list only hosts defined under 'nodes'")


@validator("slurm.partition_non_compute", E, "slurm",
           "a partition names Slurm hosts that are not slurm_worker nodes")
def partition_non_compute(estate: Estate) -> Problems:
    for part in model(estate).partitions:
        for gi, inter in groups_touching(estate, part.members):
            group = estate.spec.nodes[gi]
            if group.plane != "kubernetes" and not slurm_compute(group):
                yield problem(("slurm", "partitions", part.index, "nodes"), f"partition '{part.name}' "
                              f"names {short(inter)} (nodes[{gi}]), which run no slurmd and "
                              f"have no NodeName line: {refusal('partition_unknown_node')}",
                              "list only slurm_worker nodes")


@validator("slurm.no_default_partition", W, "slurm", "no partition is the default")
def no_default_partition(estate: Estate) -> Problems:
    parts = estate.spec.slurm.partitions
    if parts and not any(p.default for p in parts):
        yield problem(("slurm", "partitions"), "no partition has default: true; jobs "
                      "without -p go to the first one Slurm reads",
                      "set default: true on one partition")


@validator("slurm.multiple_default_partitions", W, "slurm", "several partitions are the default")
def multiple_default_partitions(estate: Estate) -> Problems:
    defaults = [i for i, p in enumerate(estate.spec.slurm.partitions) if p.default]
    for i in defaults[1:]:
        yield problem(("slurm", "partitions", i, "default"), "more than one partition has "
                      f"default: true: {refusal('two_default_partitions')}",
                      "keep default: true on one partition")


@validator("slurm.idle_worker", W, "slurm", "a slurm_worker node in no partition")
def idle_worker(estate: Estate) -> Problems:
    covered = union(p.members for p in model(estate).partitions)
    for gi, group in enumerate(estate.spec.nodes):
        idle = group_sets(estate)[gi] - covered if slurm_compute(group) else None
        if idle:
            yield problem(("nodes", gi, "hosts"), f"{short(idle)} are in no partition; no "
                          "job can ever run there", "add them to a partition")


def _qos_refs(slurm):
    for i, part in enumerate(slurm.partitions):
        if part.qos:
            yield ("slurm", "partitions", i, "qos"), part.qos
        for j, name in enumerate(part.allow_qos):
            yield ("slurm", "partitions", i, "allow_qos", j), name
    for i, acct in enumerate(slurm.accounts):
        for j, name in enumerate(acct.qos):
            yield ("slurm", "accounts", i, "qos", j), name


@validator("slurm.unknown_qos", E, "slurm", "a reference to a QOS that is not defined")
def unknown_qos(estate: Estate) -> Problems:
    known = {q.name for q in estate.spec.slurm.qos}
    for loc, name in _qos_refs(estate.spec.slurm):
        if name not in known:
            yield problem(loc, f"unknown QOS '{name}'",
                          f"define it under slurm.qos (defined: {', '.join(sorted(known)) or 'none'})")


def _account_refs(slurm):
    for i, part in enumerate(slurm.partitions):
        for key in ("allow_accounts", "deny_accounts"):
            for j, name in enumerate(getattr(part, key)):
                yield ("slurm", "partitions", i, key, j), name
    for i, acct in enumerate(slurm.accounts):
        if acct.parent != "root":
            yield ("slurm", "accounts", i, "parent"), acct.parent


@validator("slurm.unknown_account", E, "slurm", "a reference to an account that is not defined")
def unknown_account(estate: Estate) -> Problems:
    known = {a.name for a in estate.spec.slurm.accounts}
    for loc, name in _account_refs(estate.spec.slurm):
        if name not in known:
            yield problem(loc, f"unknown account '{name}'",
                          f"define it under slurm.accounts (defined: {', '.join(sorted(known)) or 'none'})")


@validator("slurm.account_cycle", E, "slurm", "accounts whose parents form a loop")
def account_cycle(estate: Estate) -> Problems:
    accounts = estate.spec.slurm.accounts
    parent = {a.name: a.parent for a in accounts}
    for i, acct in enumerate(accounts):
        seen, name = set(), acct.name
        while name in parent and name not in seen:
            seen.add(name)
            name = parent[name]
        if name == acct.name:
            yield problem(("slurm", "accounts", i, "parent"), f"account '{acct.name}' is its "
                          "own ancestor", "make the account tree end at 'root'")


@validator("slurm.unknown_user", W, "slurm", "an account names a user missing from identity")
def unknown_user(estate: Estate) -> Problems:
    known = {u.name for u in estate.spec.identity.users}
    for i, acct in enumerate(estate.spec.slurm.accounts):
        for j, user in enumerate(acct.users):
            if user not in known:
                yield problem(("slurm", "accounts", i, "users", j), f"user '{user}' has no "
                              "entry under identity.users, so no node knows its UID",
                              "add the user to identity.users (or manage it in your directory)")


@validator("slurm.time_format", E, "slurm", "a time limit Slurm cannot parse")
def time_format(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    limits: list[tuple[tuple, str]] = [(("slurm", "partitions", i, "max_time"), p.max_time)
              for i, p in enumerate(slurm.partitions)]
    limits += [(("slurm", "partitions", i, "default_time"), p.default_time)
               for i, p in enumerate(slurm.partitions) if p.default_time is not None]
    limits += [(("slurm", "qos", i, "max_wall"), q.max_wall)
               for i, q in enumerate(slurm.qos) if q.max_wall is not None]
    limits += [(("slurm", "priority", key), getattr(slurm.priority, key))
               for key in ("decay_half_life", "max_age")]
    for loc, value in limits:
        if value.lower() not in _UNLIMITED and not _TIME.fullmatch(value):
            yield problem(loc, f"'{value}' is not a Slurm time: {refusal('bad_time')}",
                          "use minutes, HH:MM:SS, "
                          "D-HH:MM:SS or INFINITE, e.g. 2-00:00:00")


@validator("slurm.gres_mismatch", E, "slurm", "a GRES count that differs from the class's GPUs")
def gres_mismatch(estate: Estate) -> Problems:
    for g in model(estate).groups:
        if g.cls and g.slurm_compute and g.gres_count != g.class_gpus:
            yield problem(("nodes", g.index, "slurm", "gres_count"), f"gres_count "
                          f"{g.gres_count} but class '{g.cls.name}' has "
                          f"{g.class_gpus} GPUs: {refusal('gres_count_above_node')}",
                          "drop gres_count (it defaults to the class) or fix the class")


@validator("slurm.real_memory_exceeds", E, "slurm", "RealMemory above the class's memory")
def real_memory_exceeds(estate: Estate) -> Problems:
    for g in model(estate).groups:
        if g.cls and g.slurm_compute and g.real_memory > g.cls.memory_mb:
            yield problem(("nodes", g.index, "slurm", "real_memory_mb"), f"real_memory_mb "
                          f"{g.real_memory} exceeds the {g.cls.memory_mb} MB of "
                          f"class '{g.cls.name}': {refusal('real_memory_above_node')}",
                          f"set it below {g.cls.memory_mb}, leaving room for the OS")


@validator("slurm.core_spec_exceeds", E, "slurm",
           "CoreSpecCount that leaves a node no core for jobs")
def core_spec_exceeds(estate: Estate) -> Problems:
    for g in model(estate).groups:
        spec = g.spec.slurm.core_spec_count
        if g.cls and g.slurm_compute and spec and spec >= g.cls.sockets * g.cls.cores_per_socket:
            cores = g.cls.sockets * g.cls.cores_per_socket
            yield problem(("nodes", g.index, "slurm", "core_spec_count"), f"core_spec_count "
                          f"{spec} keeps all {cores} cores of class '{g.cls.name}' for the "
                          "system; no job could run there", f"keep fewer than {cores} cores "
                          "(1 or 2 per socket is usual)")


@validator("slurm.mem_spec_exceeds", E, "slurm",
           "MemSpecLimit that leaves a node no memory for jobs")
def mem_spec_exceeds(estate: Estate) -> Problems:
    for g in model(estate).groups:
        spec = g.spec.slurm.mem_spec_limit_mb
        if g.cls and g.slurm_compute and spec and spec >= g.real_memory:
            yield problem(("nodes", g.index, "slurm", "mem_spec_limit_mb"), f"mem_spec_limit_mb "
                          f"{spec} keeps all of RealMemory ({g.real_memory} MB) for the "
                          "system; no job could get memory there",
                          f"set it well below {g.real_memory} (a few GB is usual)")


def _needs_node_addr(estate):
    """Groups slurm.conf names with an address: compute nodes and controllers."""
    controllers = HostSet.names(estate.spec.slurm.controllers)
    for gi, (group, hosts) in enumerate(zip(estate.spec.nodes, group_sets(estate))):
        if slurm_compute(group) or (group.plane == "slurm" and hosts & controllers):
            yield gi, group


@validator("slurm.node_addr_missing", W, "slurm",
           "a Slurm node without an address on slurm.address_segment")
def node_addr_missing(estate: Estate) -> Problems:
    seg = estate.spec.slurm.address_segment
    for gi, group in _needs_node_addr(estate):
        if seg not in group.addresses:
            yield problem(("nodes", gi, "addresses"), f"nodes {group.hosts} have no address "
                          f"on '{seg}' (slurm.address_segment); without NodeAddr slurmctld "
                          "blocks on name look-ups at start-up", f"add '{seg}: auto'")


@validator("slurm.no_compute_nodes", W, "slurm", "the Slurm plane has no slurm_worker nodes")
def no_compute_nodes(estate: Estate) -> Problems:
    if not any(slurm_compute(g) for g in estate.spec.nodes):
        yield problem(("nodes",), "no node group is on plane slurm with role slurm_worker",
                      "add compute nodes, or this Slurm cluster can run nothing")


@validator("slurm.accounting_host", E, "slurm",
           "slurmdbd placed on an unknown host, or one without an address slurmctld can use")
def accounting_host(estate: Estate) -> Problems:
    acct, seg = estate.spec.slurm.accounting, estate.spec.slurm.address_segment
    group = group_of(estate, acct.host) if acct else None
    if acct and group is None:
        yield problem(("slurm", "accounting", "host"), f"'{acct.host}' is not a host of any "
                      "node group", "name a Slurm-plane service node, e.g. a controller")
    elif acct and seg not in group.addresses:
        yield problem(("slurm", "accounting", "host"), f"'{acct.host}' has no address on "
                      f"'{seg}', so AccountingStorageHost has nothing to point at",
                      f"add '{seg}: auto' to its group's addresses")


@validator("slurm.slurmrestd_address", E, "slurm",
           "a slurmrestd node without an address on slurm.slurmrestd.segment")
def slurmrestd_address(estate: Estate) -> Problems:
    rest = estate.spec.slurm.slurmrestd
    for gi, group in enumerate(estate.spec.nodes):
        if rest and "slurmrestd" in group.roles and rest.segment not in group.addresses:
            yield problem(("nodes", gi, "addresses"), f"nodes {group.hosts} run slurmrestd "
                          f"on '{rest.segment}' but have no address there",
                          f"add '{rest.segment}: auto', or change slurm.slurmrestd.segment")


@validator("slurm.limits_without_accounting", W, "slurm",
           "QOS or accounts defined without slurmdbd, so nothing enforces them")
def limits_without_accounting(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    if slurm.accounting is None and (slurm.qos or slurm.accounts):
        yield problem(("slurm",), "QOS and accounts need slurmdbd; without "
                      "slurm.accounting, fair share and QOS limits are not enforced",
                      "add slurm.accounting: {host: <controller>}")


@validator("slurm.slurmrestd_host", W, "slurm",
           "slurmrestd configured without a host, or a host without the configuration")
def slurmrestd_host(estate: Estate) -> Problems:
    hosts = hosts_where(estate, lambda g: "slurmrestd" in g.roles)
    if estate.spec.slurm.slurmrestd and not hosts:
        yield problem(("slurm", "slurmrestd"), "slurmrestd is configured but no node group "
                      "has the slurmrestd role", "add the role to a controller, or set "
                      "slurmrestd: null")
    if not estate.spec.slurm.slurmrestd and hosts:
        yield problem(("slurm",), f"{short(hosts)} have the slurmrestd role but "
                      "slurm.slurmrestd is null", "configure slurm.slurmrestd or drop the role")


# --- settings and partition policy ------------------------------------------------------

@validator("slurm.unknown_setting", E, "slurm",
           "a slurm.extra key that the Slurm version's slurm.conf parser does not know")
def unknown_setting(estate: Estate) -> Problems:
    version = estate.spec.slurm.version
    known = conf_keys(version)
    for key in estate.spec.slurm.extra:
        if key.lower() not in known:
            near = closest(key, known.values())
            yield problem(("slurm", "extra", key), f"slurm.conf has no key '{key}' (Slurm "
                          f"{version}'s parser, slurm_conf/keys/{version}.json): "
                          f"{refusal('unknown_key', version)}",
                          f"did you mean '{near}'?" if near else
                          "remove it, or check the spelling in slurm.conf(5)")


@validator("slurm.owned_setting", E, "slurm",
           "a slurm.extra key that Estate writes itself from a typed field")
def owned_setting(estate: Estate) -> Problems:
    for key in estate.spec.slurm.extra:
        if key.lower() in OWNED:
            yield problem(("slurm", "extra", key), f"'{key}' is written by Estate from the "
                          f"spec; of two lines {refusal('key_given_twice')}",
                          "set it through its typed field (estate schema lists them), "
                          "or drop it from slurm.extra")


@validator("slurm.unknown_scheduler_parameter", E, "slurm",
           "a SchedulerParameters option that the Slurm version does not document")
def unknown_scheduler_parameter(estate: Estate) -> Problems:
    version = estate.spec.slurm.version
    known = scheduler_options(version)
    for key in estate.spec.slurm.scheduler_parameters:
        if key not in known:
            near = closest(key, known)
            yield problem(("slurm", "scheduler_parameters", key), f"'{key}' is not a "
                          f"SchedulerParameters option of Slurm {version} (slurm.conf(5)): "
                          f"{refusal('scheduler_parameter_unknown', version)}",
                          f"did you mean '{near}'?" if near else "remove it")


# The spec field that chooses a plugin of each type; Estate chooses the others itself.
_PLUGIN_FIELDS = {"mpi": ("slurm", "mpi_default"), "jobacct_gather": ("slurm", "job_acct_gather"),
                  "preempt": ("slurm", "preemption", "type"),
                  "gpu": ("slurm", "gres_autodetect")}


@validator("slurm.plugin_not_in_release", E, "slurm",
           "a plugin the rendered files name that the spec's Slurm release does not ship")
def plugin_not_in_release(estate: Estate) -> Problems:
    version = estate.spec.slurm.version
    for conf, names in slurm_plugins(estate).items():
        for plugin in names:
            if ships(version, plugin):
                continue
            kind = plugin.split("/")[0]
            others = sorted(p[len(kind) + 1:] for p in plugins(version)
                            if p.startswith(kind + "_"))
            hint = (UNPACKAGED_PLUGINS.get(plugin) or
                    (f"use one of: {', '.join(others)}" if others
                     else "set slurm.version to a release that has it"))
            yield problem(_PLUGIN_FIELDS.get(kind, ("slurm", "version")),
                          f"{plugin} ({conf}) is not a plugin of Slurm {version} "
                          f"(slurm_conf/keys/{version}.json lists what it ships): "
                          f"{refusal('plugin_missing', version)}", hint)


_CR_TYPES = {"CR_CPU", "CR_CPU_Memory", "CR_Core", "CR_Core_Memory", "CR_Socket",
             "CR_Socket_Memory", "CR_Memory"}


@validator("slurm.select_type_parameters", E, "slurm",
           "SelectTypeParameters without exactly one CR_* resource type")
def select_type_parameters(estate: Estate) -> Problems:
    params = estate.spec.slurm.select_type_parameters
    types = [p for p in params if p in _CR_TYPES]
    if len(types) != 1:
        yield problem(("slurm", "select_type_parameters"), f"{len(types)} resource types "
                      f"({', '.join(types) or 'none'}); select/cons_tres needs exactly one",
                      "keep one of CR_Core_Memory, CR_CPU_Memory, CR_Socket_Memory, ...")
    elif types == ["CR_Memory"]:
        # select/linear's CR_Memory; cons_tres: "fatal: Invalid SelectTypeParameters:
        # CR_MEMORY (16), You need at least CR_(CPU|CORE|SOCKET)*" (22.05 and 24.11, seen
        # loading a select/linear site's settings)
        yield problem(("slurm", "select_type_parameters"), "CR_Memory alone: "
                      f"{refusal('cr_memory_alone')}",
                      "use CR_Core_Memory (or CR_CPU_Memory)")


@validator("slurm.default_time_exceeds", E, "slurm", "a DefaultTime above the MaxTime")
def default_time_exceeds(estate: Estate) -> Problems:
    for i, part in enumerate(estate.spec.slurm.partitions):
        limit, default = time_seconds(part.max_time), time_seconds(default_time(part))
        if limit is not None and (default is None or default > limit):
            yield problem(("slurm", "partitions", i, "default_time"), f"default_time "
                          f"{default_time(part)} exceeds max_time {part.max_time}: "
                          f"{refusal('default_time_above_max_time')} "
                          f"({part.max_time}, not {default_time(part)})",
                          f"set it at most {part.max_time}")


@validator("slurm.allow_and_deny_accounts", W, "slurm",
           "a partition with both allow_accounts and deny_accounts")
def allow_and_deny_accounts(estate: Estate) -> Problems:
    for i, part in enumerate(estate.spec.slurm.partitions):
        if part.allow_accounts and part.deny_accounts:
            yield problem(("slurm", "partitions", i, "deny_accounts"), f"partition "
                          f"'{part.name}' has allow_accounts and deny_accounts: "
                          f"{refusal('allow_and_deny_accounts')}",
                          "keep one of the two lists")


@validator("slurm.unknown_group", W, "slurm", "allow_groups names a group missing from identity")
def unknown_group(estate: Estate) -> Problems:
    known = {g.name for g in estate.spec.identity.groups}
    for i, part in enumerate(estate.spec.slurm.partitions):
        for j, name in enumerate(part.allow_groups):
            if name not in known:
                yield problem(("slurm", "partitions", i, "allow_groups", j), f"group "
                              f"'{name}' has no entry under identity.groups, so no node "
                              "may know it, and with a group no user is in, "
                              f"{refusal('allow_groups_unknown', estate.spec.slurm.version)}",
                              "add it to identity.groups (or manage it in your directory)")


@validator("slurm.preempt_mode_unused", W, "slurm",
           "a partition preempt_mode without slurm.preemption")
def preempt_mode_unused(estate: Estate) -> Problems:
    for i, part in enumerate(estate.spec.slurm.partitions):
        if part.preempt_mode and not estate.spec.slurm.preemption:
            yield problem(("slurm", "partitions", i, "preempt_mode"), f"partition "
                          f"'{part.name}' sets preempt_mode but slurm.preemption is not set "
                          "(PreemptType=preempt/none), so nothing is ever preempted",
                          "add slurm.preemption: {type: partition_prio, mode: requeue}")


@validator("slurm.gpu_defaults_exceed_node", E, "slurm",
           "DefCpuPerGPU or DefMemPerGPU times a node's GPUs exceeds the node")
def gpu_defaults_exceed_node(estate: Estate) -> Problems:
    lines = node_lines(estate)
    per_gpu, members = def_per_gpu(estate, lines), partition_lines(estate, lines)
    for i, part in enumerate(estate.spec.slurm.partitions):
        cpu, mem = per_gpu.get(part.name, (None, None))
        for line in members.get(part.name, []):
            # what jobs may get: CoreSpecCount and MemSpecLimit are the system's
            for key, want, have in (("def_cpu_per_gpu", cpu, line.job_cpus),
                                    ("def_mem_per_gpu_mb", mem, line.job_memory)):
                if want and line.gres_count and want * line.gres_count > have:
                    yield problem(("slurm", "partitions", i, key), f"{key} {want} times the "
                                  f"{line.gres_count} GPUs of {line.hostlist} is more than "
                                  f"their {have}: a job asking for all their GPUs never runs",
                                  f"set it at most {have // line.gres_count}")
                    break


def _tres_refs(slurm):
    for i, part in enumerate(slurm.partitions):
        for key in part.tres_billing_weights:
            yield ("slurm", "partitions", i, "tres_billing_weights", key), key
    for key in slurm.priority.tres:
        yield ("slurm", "priority", "tres", key), key


@validator("slurm.unknown_tres", E, "slurm", "a TRES weight naming a GRES or GPU type "
           "the estate does not have")
def unknown_tres(estate: Estate) -> Problems:
    models = {k.type for line in node_lines(estate) for k in line.kinds if k.type}
    for loc, key in _tres_refs(estate.spec.slurm):
        kind, _, rest = key.partition("/")
        name, _, gpu_type = rest.partition(":")
        if kind.upper() == "LICENSE" or (kind.upper() == "GRES" and (
                name != "gpu" or (gpu_type and gpu_type not in models))):
            yield problem(loc, f"'{key}' is no TRES of this estate (GresTypes=gpu, GPU "
                          f"types: {', '.join(sorted(models)) or 'none'}), so the "
                          "weight counts nothing", "use CPU, Mem, Node or GRES/gpu[:TYPE]")


@validator("slurm.tres_weight_without_accounting", E, "slurm",
           "priority.tres weighs a GRES while no slurmdbd tracks it")
def tres_weight_without_accounting(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    if slurm.accounting:
        return
    for key in slurm.priority.tres:
        if key.upper().startswith("GRES/"):
            yield problem(("slurm", "priority", "tres", key), f"PriorityWeightTRES weighs "
                          f"{key}, which Slurm tracks only with slurmdbd: "
                          f"{refusal('tres_weight_without_accounting', slurm.version)}",
                          "set slurm.accounting, or drop the GRES weight")


@validator("slurm.prolog_flags", E, "slurm",
           "PrologFlags that slurm.conf(5) says cannot work together or with the tracking")
def prolog_flags(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    flags = set(slurm.hooks.prolog_flags)
    where = ("slurm", "hooks", "prolog_flags")
    if "X11" in flags and slurm.process_tracking == "linuxproc":
        yield problem(where, "PrologFlags=X11 with ProctrackType=proctrack/linuxproc: "
                      f"{refusal('prolog_x11_linuxproc', slurm.version)}",
                      "set slurm.process_tracking: cgroup, or drop X11")
    if "NoHold" in flags and flags & {"Contain", "X11"}:
        yield problem(where, "PrologFlags=NoHold with Contain or X11: "
                      f"{refusal('prolog_nohold_contain', slurm.version)}", "drop NoHold, or Contain and X11")


@validator("slurm.hooks_without_workers", W, "slurm",
           "node hooks but no slurm_worker node to run them")
def hooks_without_workers(estate: Estate) -> Problems:
    if any(h.daemon == "slurmd" for h in hooks(estate.spec)) and \
            not any(g.slurm_compute for g in model(estate).groups):
        yield problem(("slurm", "hooks"), "slurm.hooks names scripts, but no node has the "
                      "slurm_worker role, so no slurmd runs them",
                      "add slurm_worker nodes, or drop the hooks")


@validator("slurm.ha_state_not_shared", E, "slurm",
           "a backup controller whose StateSaveLocation is not the primary's")
def ha_state_not_shared(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    if len(slurm.controllers) == 2 and state_mount(estate) is None:
        yield problem(("slurm", "state_dir"), f"two controllers, but state_dir "
                      f"{slurm.state_dir} is a local directory on each: the backup would "
                      "take over with none of the primary's jobs (slurm.conf(5) wants "
                      "StateSaveLocation on storage both controllers reach)",
                      f"export a directory (storage.exports, no_root_squash with a reason) "
                      f"and mount it at {slurm.state_dir} on "
                      f"{' and '.join(slurm.controllers)} (storage.mounts)")


@validator("slurm.state_export_squashed", E, "slurm",
           "slurmctld's shared state on an export that squashes root")
def state_export_squashed(estate: Estate) -> Problems:
    mount = state_mount(estate)
    exports = {e.name: (i, e) for i, e in enumerate(estate.spec.storage.exports)}
    if mount is None or mount.export not in exports:
        return
    i, export = exports[mount.export]
    if squashes_root(export):
        yield problem(("storage", "exports", i, "options"), f"export '{export.name}' holds "
                      f"slurmctld's state ({estate.spec.slurm.state_dir}) but squashes root, "
                      "so the controllers cannot give the directory to SlurmUser",
                      "replace root_squash with no_root_squash and give the reason (only the "
                      "controllers mount it)")


@validator("slurm.cloud_without_power_saving", E, "slurm",
           "cloud nodes but no slurm.power_saving to power them up")
def cloud_without_power_saving(estate: Estate) -> Problems:
    if estate.spec.slurm.power_saving:
        return
    for g in model(estate).groups:
        if g.power_managed:
            yield problem(("nodes", g.index, "slurm", "state"), f"{g.spec.hosts} are cloud "
                          "nodes, but without slurm.power_saving slurmctld has no "
                          "ResumeProgram: they stay powered down and their jobs wait",
                          "add slurm.power_saving (resume_program, suspend_program), or "
                          "drop state: cloud")


@validator("slurm.power_saving_without_cloud", W, "slurm",
           "slurm.power_saving but no cloud node to power")
def power_saving_without_cloud(estate: Estate) -> Problems:
    if estate.spec.slurm.power_saving and not any(
            g.power_managed for g in model(estate).groups):
        yield problem(("slurm", "power_saving"), "slurm.power_saving is set, but no node "
                      "group has state: cloud, so it powers nothing (the other nodes are "
                      "SuspendExcNodes)", "set nodes[].slurm.state: cloud on the groups "
                      "slurmctld may power down, or drop power_saving")


@validator("slurm.cgroup_mountpoint_without_cgroup", W, "slurm",
           "a CgroupMountpoint other than /sys/fs/cgroup, but no cgroup tracking")
def cgroup_mountpoint_without_cgroup(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    if slurm.cgroup_mountpoint != "/sys/fs/cgroup" and slurm.process_tracking != "cgroup":
        yield problem(("slurm", "cgroup_mountpoint"), "slurm.cgroup_mountpoint is set, but "
                      "process_tracking is linuxproc: no job cgroup is made there",
                      "set slurm.process_tracking: cgroup, or drop cgroup_mountpoint")
