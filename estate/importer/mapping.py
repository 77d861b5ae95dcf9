"""The whole import: parsed files -> a spec document (a dict, dumped as YAML) + report."""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from estate.importer import nodes as nodemap
from estate.importer import programs, settings
from estate.importer.parse import ConfLine, parse
from estate.importer.partitions import nodesets, partitions
from estate.catalogue import DEFAULT_SLURM
from estate.importer.accounts import Accounting, associations
from estate.importer.report import ImportReport
from estate.importer.users import service_identity
from estate.spec import hostlist
from estate.model.slurm_refusals import sentence as refusal

SEGMENT = "management"
PLACEHOLDER_CIDR = "10.0.0.0/16"
_NAME = re.compile(r"[^A-Za-z0-9_.-]")
# a controller that is not a compute node: hardware slurm.conf does not describe
CONTROLLER_CLASS = {"name": "controller", "sockets": 1, "cores_per_socket": 1,
                    "memory_mb": 1024}


class ImportFailed(Exception):
    """The source cannot become a spec at all; names the file and line (0: the file)."""

    def __init__(self, file: str, line: int, message: str):
        super().__init__(f"{file}:{line}: {message}" if line else f"{file}: {message}")
        self.file, self.line = file, line


@dataclass
class Sources:
    slurm: str
    gres: str | None = None
    topology: str | None = None
    cgroup: str | None = None
    slurm_name: str = "slurm.conf"
    gres_name: str = "gres.conf"
    topology_name: str = "topology.conf"
    cgroup_name: str = "cgroup.conf"


def _controllers(lines: list[ConfLine], report: ImportReport, file: str) -> list[tuple[str, str]]:
    """(name, address or '') of the primary, from SlurmctldHost lines, else ControlMachine.
    A backup is reported, not imported: it needs StateSaveLocation on storage both
    controllers share, which slurm.conf does not name (estate check refuses HA without
    it), so the user adds it with that storage."""
    out, numbers = [], []
    for line in lines:
        key, value = line.keyword, line.name
        if key == "slurmctldhost":
            name, _, addr = value.partition("(")
            out.append((name, addr.rstrip(")")))
            numbers.append(line.number)
        elif key in ("controlmachine", "backupcontroller"):
            out.append((value, ""))
            numbers.append(line.number)
            if key == "controlmachine":
                report.change(file, line.number, line.text, "written as SlurmctldHost= "
                              "(Slurm reads ControlMachine as the first SlurmctldHost)")
        elif key in ("controladdr", "backupaddr") and out:
            out[-1] = (out[-1][0], value)
    for (name, _), number in zip(out[1:], numbers[1:]):
        report.drop(file, number, f"SlurmctldHost={name}", "a backup controller needs "
                    "StateSaveLocation on storage both controllers share, and slurm.conf "
                    "does not say which: declare it (storage.exports and storage.mounts), "
                    f"then add {name} to slurm.controllers")
    return out[:1]


def _segment(addrs: list[str], report: ImportReport) -> dict:
    if not addrs:
        report.default(f"segment {SEGMENT}: {PLACEHOLDER_CIDR}, vlan 1 (the source gives no "
                       "addresses; nodes get none and slurmctld resolves their names)")
        return {"name": SEGMENT, "cidr": PLACEHOLDER_CIDR, "vlan": 1, "purpose": "management"}
    ints = sorted(int(ipaddress.IPv4Address(a)) for a in addrs)
    net = ipaddress.IPv4Network(f"{ipaddress.IPv4Address(ints[0])}/30", strict=False)
    while not (int(net.network_address) < ints[0] and ints[-1] < int(net.broadcast_address)):
        net = net.supernet()
    report.default(f"segment {SEGMENT}: {net}, vlan 1 (the smallest network holding the "
                   "source's addresses)")
    return {"name": SEGMENT, "cidr": str(net), "vlan": 1, "purpose": "management",
            "reserved": 1}


def _node_groups(defs, ctl, report: ImportReport):
    """Node groups, splitting a controller that is also a compute node into its own."""
    classes, names = nodemap.classes(defs)
    groups, addrs, compute = [], [], set()
    ctl_names = {n for n, _ in ctl}
    for d in defs:
        cls = names[nodemap._class_key(d)]
        by_host = dict(zip(d.hosts, d.addrs)) if d.addrs else {}
        run: list[str] = []
        for host in d.hosts + [None]:
            if host is not None and host not in ctl_names:
                run.append(host)
                continue
            if run:
                groups.append(nodemap.group(d, cls, run, ["slurm_worker"], SEGMENT,
                                            by_host.get(run[0])))
            if host is not None:
                ctl_addr = dict(ctl)[host] or by_host.get(host)
                groups.append(nodemap.group(d, cls, [host], ["slurm_controller",
                                                              "slurm_worker"],
                                            SEGMENT, ctl_addr))
            run = []
        compute.update(d.hosts)
        addrs += d.addrs
    for name, addr in ctl:
        if name not in compute:
            if CONTROLLER_CLASS not in classes:
                classes.append(CONTROLLER_CLASS)
                report.default("node class controller: 1 core, 1024 MB (slurm.conf does not "
                               "describe a controller that is not a compute node)")
            g = {"hosts": name, "class": "controller", "plane": "slurm",
                 "roles": ["slurm_controller"]}
            if _is_ip(addr):
                g["addresses"] = {SEGMENT: addr}
            groups.append(g)
        addrs.append(addr)
    return classes, groups, [a for a in addrs if _is_ip(a)]


def linear(lines: list[ConfLine], slurm: dict, report: ImportReport, file: str) -> None:
    """select/linear allocates whole nodes; Estate renders select/cons_tres, which keeps
    that as OverSubscribe=EXCLUSIVE and needs a CPU unit beside CR_Memory."""
    line = next((ln for ln in lines if ln.keyword == "selecttype"
                 and ln.name.lower() == "select/linear"), None)
    if line is None:
        return
    params = slurm.get("select_type_parameters", [])
    slurm["select_type_parameters"] = ["CR_Core_Memory" if p == "CR_Memory" else p
                                       for p in params] or ["CR_Core_Memory"]
    whole = [p["name"] for p in slurm["partitions"] if "oversubscribe" not in p]
    for p in slurm["partitions"]:
        p.setdefault("oversubscribe", "EXCLUSIVE")
    report.change(file, line.number, f"{line.text} (partitions {', '.join(whole)})",
                  "written as select/cons_tres with SelectTypeParameters="
                  f"{','.join(slurm['select_type_parameters'])} and OverSubscribe=EXCLUSIVE on "
                  "these partitions: Estate renders cons_tres, and that is how it allocates "
                  "whole nodes as select/linear does")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
        return True
    except ValueError:
        return False


def _globals(lines: list[ConfLine], report: ImportReport, file: str, version: str) -> dict:
    """The global settings into the spec's slurm section (a dict); the rest reported."""
    slurm: dict = {}
    for line in lines:
        if line.keyword in ("nodename", "partitionname", "nodeset"):
            continue
        if line.keyword == "include":
            report.drop(file, line.number, line.text, "Include is not followed; import the "
                        "included file's lines into this one")
        elif line.keyword in ("downnodes", "frontendname"):
            report.drop(file, line.number, line.text, f"{line.pairs[0][0]} lines are not "
                        "part of the spec (node states are the running cluster's, set "
                        "with scontrol)")
        elif len(line.pairs) != 1 or not line.pairs[0][0]:
            report.drop(file, line.number, line.text, "not one key=value setting")
        elif line.keyword not in settings.HANDLED_ELSEWHERE:
            try:
                settings.apply(slurm, line.keyword, line.pairs[0][0], line.name, line, report,
                               file, version)
            except ValueError as exc:
                report.drop(file, line.number, line.text, f"unreadable value: {exc}")
    return slurm


def import_slurm(src: Sources, passwd=None, version: str = DEFAULT_SLURM,
                 accounting: Accounting | None = None,
                 can_read: programs.Readable = programs.readable) -> tuple[dict, ImportReport]:
    """The spec for Slurm release `version` (Slurm's own renames and moves up to it
    applied), with accounting's associations where sacctmgr was read."""
    report, file = ImportReport(), src.slurm_name
    lines = parse(src.slurm)
    slurm = _globals(lines, report, file, version)
    cluster = next((ln.name for ln in lines if ln.keyword == "clustername"), "cluster")
    ctl = _controllers(lines, report, file)
    defs = nodemap.node_defs([ln for ln in lines if ln.keyword == "nodename"], report, file,
                             version)
    if not defs:
        raise ImportFailed(file, 0, "no NodeName line defines a node (an Include'd file "
                           "is not followed: import the file that has the NodeName lines)")
    if (several := nodemap.several_per_host(defs)) is not None:
        raise ImportFailed(file, 0, several)
    hooks, power = programs.programs(lines, report, file, can_read)
    if power is None:
        programs.no_cloud(defs, report, file)
    if not ctl:
        report.default("controllers: none in the source; the first node")
        ctl = [(defs[0].hosts[0], "")]
    classes, groups, addrs = _node_groups(defs, ctl, report)
    if any("gpus" in c for c in classes):
        report.default(f"GPU product and memory_gb: the GRES type and "
                       f"{nodemap.PLACEHOLDER_GPU_MEMORY_GB} GB (slurm.conf has neither; "
                       "the Kubernetes plane's labels and quotas use them)")
    slurm = {"cluster_name": _NAME.sub("-", cluster.lower()), "version": version,
             "controllers": [n for n, _ in ctl], **slurm,
             **({"hooks": hooks} if hooks else {}),
             **({"power_saving": power} if power else {})}
    hosts = [h for d in defs for h in d.hosts]
    sets = nodesets([ln for ln in lines if ln.keyword == "nodeset"], hosts, report, file)
    if sets:
        slurm["nodesets"] = sets
    slurm["partitions"] = partitions([ln for ln in lines if ln.keyword == "partitionname"],
                                     hosts, report, file,
                                     {s["name"] for s in sets}, version)
    linear(lines, slurm, report, file)
    slurm["slurmrestd"] = None   # the source runs none; Estate's default would add one
    doc = {"name": slurm["cluster_name"], "description": f"Imported from {file}",
           "segments": [_segment(addrs, report)], "node_classes": classes, "nodes": groups,
           "slurm": slurm}
    _accounting(lines, doc, report, file)
    _other_files(src, doc, report, hosts)
    users = next((ln.name for ln in lines if ln.keyword == "slurmuser"), "slurm")
    doc["identity"] = service_identity(report, users, **({"passwd": passwd} if passwd else {}))
    associations(doc, accounting, report)
    return doc, report


def _other_files(src: Sources, doc: dict, report: ImportReport, hosts: list[str]) -> None:
    if src.gres is not None:
        _gres(src, doc, report)
    if src.topology is not None:
        doc["topology"] = _topology(src, report, set(hosts))
    if src.cgroup is not None:
        for line in parse(src.cgroup):
            report.drop(src.cgroup_name, line.number, line.text,
                        "cgroup.conf is Estate's own (slurm_conf/cgroup.conf.j2)")


def _accounting(lines: list[ConfLine], doc: dict, report: ImportReport, file: str) -> None:
    """slurmdbd on one of the spec's nodes becomes slurm.accounting; anything else is
    reported (the spec runs slurmdbd on a node it describes, or not at all)."""
    found = {ln.keyword: ln for ln in lines if ln.keyword.startswith("accountingstorage")}
    kind = found.get("accountingstoragetype")
    if kind is None or kind.name.lower() == "accounting_storage/none":
        return
    host = found.get("accountingstoragehost")
    name = host.name if host else doc["slurm"]["controllers"][0]
    # Estate points AccountingStorageHost at the node's address: it needs one
    known = {h for g in doc["nodes"] if g.get("addresses")
             for h in hostlist.expand(g["hosts"])}
    if kind.name.lower() != "accounting_storage/slurmdbd" or name not in known:
        for ln in (kind, host, found.get("accountingstorageport")):
            if ln is not None:
                report.drop(file, ln.number, ln.text, f"the spec runs slurmdbd on one of "
                            f"its nodes, with an address; {name} is not one (add it, then "
                            "slurm.accounting)")
        return
    port = found.get("accountingstorageport")
    doc["slurm"]["accounting"] = {"host": name, **({"port": int(port.name)} if port else {})}


_FILE = re.compile(r"^(/[A-Za-z0-9_./-]*?)(\[[0-9,-]+\]|[0-9]+)$")


def _gres(src: Sources, doc: dict, report: ImportReport) -> None:
    """gres.conf: GPU device files become gpu_device_path; the rest is reported."""
    for line in parse(src.gres):
        params = {k.lower(): v for k, v in line.pairs}
        m = _FILE.match(params.get("file", ""))
        if params.get("name") == "gpu" and m and set(params) <= {"nodename", "name", "type",
                                                                 "file"}:
            doc["slurm"]["gpu_device_path"] = m.group(1)
        elif line.keyword == "autodetect" and line.name == "off":
            pass
        else:
            report.drop(src.gres_name, line.number, line.text,
                        "Estate writes gres.conf from the node classes (Name=gpu File=...)")


def _topology(src: Sources, report: ImportReport, hosts: set[str]) -> dict:
    """topology.conf's tree: switches, with a leaf's nodes as its Nodes= list. A member no
    NodeName line defines is reported and left out (slurmctld starts with it and logs it
    as invalid); a switch left with no member goes with it."""
    switches = []
    for line in parse(src.topology):
        params = {k.lower(): v for k, v in line.pairs[1:]}
        if line.keyword != "switchname" or set(params) - {"switches", "nodes", "linkspeed"}:
            report.drop(src.topology_name, line.number, line.text,
                        "the spec's topology is a tree of SwitchName lines")
            continue
        sw = {"name": line.name, "line": line.number}
        if "switches" in params:
            sw["switches"] = hostlist.expand(params["switches"])
        if "nodes" in params:
            sw["nodes"] = _known_members(line, hostlist.expand(params["nodes"]), hosts,
                                         report, src.topology_name)
        switches.append(sw)
    return {"switches": _without_empty(switches, report, src.topology_name)}


def _known_members(line: ConfLine, nodes: list[str], hosts: set[str], report: ImportReport,
                   file: str) -> list[str]:
    unknown = [n for n in nodes if n not in hosts]
    if unknown:
        report.drop(file, line.number, f"SwitchName={line.name} Nodes="
                    f"{hostlist.compress(unknown)}", "no NodeName line defines these hosts: "
                    + refusal("switch_unknown_node") + ", and the spec leaves them out")
    return [n for n in nodes if n in hosts]


def _without_empty(switches: list[dict], report: ImportReport, file: str) -> list[dict]:
    """Drop switches with no member left (a leaf whose nodes were all unknown, then a
    parent of only such leaves), reporting each; hostlists compressed for the spec."""
    while True:
        names = {sw["name"] for sw in switches}
        for sw in switches:
            if "switches" in sw:
                sw["switches"] = [c for c in sw["switches"] if c in names]
        empty = [sw for sw in switches if not sw.get("nodes") and not sw.get("switches")]
        if not empty:
            break
        for sw in empty:
            report.drop(file, sw["line"], f"SwitchName={sw['name']}", "no member left once "
                        "the hosts no NodeName line defines are left out: "
                        + refusal("switch_empty"))
        switches = [sw for sw in switches if sw not in empty]
    out = []
    for sw in switches:
        sw = {k: v for k, v in sw.items() if k != "line" and v}
        if "nodes" in sw:
            sw["nodes"] = hostlist.compress(sw["nodes"])
        out.append(sw)
    return out
