"""PartitionName and NodeSet lines into spec partitions and node sets."""
from __future__ import annotations

from estate.importer.moved import renamed
from estate.importer.parse import ConfLine, with_defaults
from estate.importer.report import ImportReport
from estate.model.slurm import time_seconds
from estate.model.slurm_refusals import sentence as refusal
from estate.spec import hostlist

_LISTS = {"allowaccounts": "allow_accounts", "denyaccounts": "deny_accounts",
          "allowqos": "allow_qos", "allowgroups": "allow_groups"}
_INTS = {"prioritytier": "priority_tier", "gracetime": "grace_time_s",
         "maxmempernode": "max_mem_per_node_mb", "defcpupergpu": "def_cpu_per_gpu",
         "defmempergpu": "def_mem_per_gpu_mb"}


def _time(value: str) -> str:
    return "INFINITE" if value.upper() in ("UNLIMITED", "INFINITE") else value


def _setting(p: dict, key: str, value: str) -> bool:
    """Set one partition key; False when the spec has no field for it."""
    if key == "default":
        p["default"] = value.upper() == "YES"
    elif key == "maxtime":
        p["max_time"] = _time(value)
    elif key == "defaulttime":
        p["default_time"] = _time(value)
    elif key == "hidden":
        p["hidden"] = value.upper() == "YES"
    elif key == "qos":
        p["qos"] = value
    elif key in _LISTS and value.upper() != "ALL":
        p[_LISTS[key]] = value.split(",")
    elif key in _INTS and value.isdigit():
        p[_INTS[key]] = int(value)
    elif key == "oversubscribe":
        p["oversubscribe"] = value.upper()
    elif key == "preemptmode" and value.lower() in ("off", "cancel", "requeue", "suspend"):
        p["preempt_mode"] = value.lower()
    elif key == "tresbillingweights":
        p["tres_billing_weights"] = {k: float(v) for k, v in
                                     (i.split("=") for i in value.split(","))}
    elif key == "state" and value.upper() == "UP":
        pass
    else:
        return False
    return True


def nodesets(lines: list[ConfLine], all_hosts: list[str], report: ImportReport, file: str
             ) -> list[dict]:
    """NodeSet lines with one selector, Nodes= (a hostlist) or Feature=, as slurm.nodesets;
    others (Nodes=ALL, both, several features) are reported and dropped, and so are the
    hosts no NodeName line defines."""
    out, known = [], frozenset(all_hosts)
    for line in lines:
        params = {k: v for k, (_, v) in line.params().items()}
        nodes, feature = params.pop("nodes", None), params.pop("feature", None)
        if params or (nodes is None) == (feature is None) or (nodes or "").upper() == "ALL" \
                or any(c in (feature or "") for c in ",&|"):
            report.drop(file, line.number, line.text, "a node set the spec has no form for "
                        "(it takes one Nodes= hostlist or one Feature=)")
            continue
        if nodes is not None:
            try:
                nodes = _defined(line, nodes, known, report, file)
            except hostlist.HostlistError as exc:
                report.drop(file, line.number, line.text, f"Nodes: {exc}")
                continue
            if not nodes:
                report.drop(file, line.number, line.text, "a node set without nodes")
                continue
        out.append({"name": line.name, **({"nodes": nodes} if nodes else {"feature": feature})})
    return out


def _split_nodes(nodes: str, sets: set[str]) -> tuple[str, list[str]]:
    """Nodes= into (its hosts as a hostlist, the node sets it names)."""
    names = hostlist.expand(nodes)
    named = [n for n in dict.fromkeys(names) if n in sets]
    return hostlist.compress([n for n in names if n not in sets]), named


def _defined(line: ConfLine, nodes: str, known: frozenset[str], report: ImportReport,
             file: str) -> str:
    """Nodes= without the hosts no NodeName line defines (reported: slurmctld stops at a
    partition that names them, itself or through a node set; slurmctld/partition_mgr.c,
    build_part_bitmap; slurm_conf/refusals.json)."""
    names = hostlist.expand(nodes) if nodes else []
    unknown = [n for n in names if n not in known]
    if unknown:
        report.drop(file, line.number, f"Nodes={hostlist.compress(unknown)} ({line.pairs[0][0]}="
                    f"{line.name})", "no NodeName line defines these hosts: "
                    + refusal("partition_unknown_node") + "; so does one whose node set "
                    "names them")
    return hostlist.compress([n for n in names if n in known])


# What slurmctld does with a DefaultTime above MaxTime (slurmctld/read_config.c,
# _build_single_partitionline_info, 22.05 and 24.11; slurm_conf/refusals.json)
DEFAULT_ABOVE_MAX = refusal("default_time_above_max_time")


def _default_within_max(p: dict, line: ConfLine, report: ImportReport, file: str) -> None:
    """A DefaultTime above MaxTime (where one is set) becomes the MaxTime, reported: what
    slurmctld gives a job without --time there."""
    limit = time_seconds(p.get("max_time", "INFINITE"))
    default = time_seconds(p["default_time"])
    if limit is None or (default is not None and default <= limit):
        return
    report.change(file, line.number, f"DefaultTime={p['default_time']} (PartitionName="
                  f"{line.name})", f"written as DefaultTime={p['max_time']}, the MaxTime: "
                  + DEFAULT_ABOVE_MAX + " (the spec says so rather than a DefaultTime that "
                  "never applies)")
    p["default_time"] = p["max_time"]


def partitions(lines: list[ConfLine], all_hosts: list[str], report: ImportReport,
               file: str, sets: set[str], version: str) -> list[dict]:
    out, known = [], frozenset(all_hosts)
    for line, params in with_defaults(lines):
        params = renamed(line, params, "PartitionName", version, report, file)
        written, nodes = params.pop("nodes", ("Nodes", ""))
        if nodes.upper() == "ALL":
            nodes = hostlist.compress(all_hosts)
            report.change(file, line.number, f"{written}=ALL (PartitionName={line.name})",
                          "written as the nodes slurm.conf names now: Nodes=ALL also takes "
                          "in nodes added later (dynamic nodes; Slurm's dynamic_nodes.html), "
                          "and 24.11's scontrol shows it as NodeSets=ALL")
        try:
            nodes, named = _split_nodes(nodes, sets)
        except hostlist.HostlistError as exc:
            report.drop(file, line.number, line.text, f"Nodes: {exc}")
            continue
        nodes = _defined(line, nodes, known, report, file)
        if not nodes and not named:
            report.drop(file, line.number, line.text, "a partition without nodes")
            continue
        p = {"name": line.name, **({"nodes": nodes} if nodes else {}),
             **({"nodesets": named} if named else {})}
        for key, (k, value) in params.items():
            try:
                ok = _setting(p, key, value)
            except ValueError:
                ok = False
            if not ok:
                report.drop(file, line.number, f"{k}={value} (PartitionName={line.name})",
                            "the spec has no partition setting for this value")
        if "default_time" not in p:
            # Slurm's: no DefaultTime means MaxTime; Estate would cap it at an hour
            p["default_time"] = p.get("max_time", "INFINITE")
        _default_within_max(p, line, report, file)
        out.append(p)
    return out
