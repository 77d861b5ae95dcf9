"""NodeName lines into node classes and node groups (identical hardware, one class)."""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from estate.importer.moved import renamed
from estate.importer.parse import ConfLine, with_defaults
from estate.importer.report import ImportReport
from estate.spec import hostlist
from estate.spec.bounds import MAX_SOCKETS
from estate.spec.model import FEATURE_PATTERN

# NodeName keys the spec expresses; every other key on a node line is reported.
_NODE_KEYS = {"cpus", "sockets", "corespersocket", "threadspercore", "realmemory", "gres",
              "feature", "features", "weight", "nodeaddr", "state", "corespeccount",
              "memspeclimit"}
# a feature the spec takes: the spec's own rule (CPU_GEN:SKX is one)
_FEATURE = re.compile(FEATURE_PATTERN)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")   # a GRES type the spec can name a model
PLACEHOLDER_GPU_MEMORY_GB = 1   # slurm.conf has no GPU memory; the class says so


@dataclass
class NodeDef:
    line: ConfLine
    hosts: list[str]
    sockets: int
    cores: int
    threads: int
    memory: int
    gpu: tuple[tuple[str, int], ...] | None   # ((type, count), ...): the GPU kinds
    features: list[str]
    weight: int
    core_spec: int | None = None
    mem_spec: int | None = None
    gpu_typed: bool = True
    state: str = "unknown"
    addrs: list[str] = field(default_factory=list)
    # NodeAddr and NodeHostname as written, one per host (where they can be read so)
    machines: dict[str, list[str]] = field(default_factory=dict)
    port: bool = False


def _int(params: dict, key: str, default: int | None = None) -> int | None:
    return int(params[key][1]) if key in params else default


def _gres(value: str, where: ConfLine, report: ImportReport, file: str
          ) -> tuple[tuple[tuple[str, int], ...], bool] | None:
    """Gres=gpu[:type]:count[,gpu:type:count...] as (((type, count), ...), typed): several
    typed items are a class's GPU kinds; an untyped GPU's class takes the model 'gpu' and
    its group renders untyped. Other GRES, and items that do not fit that, are reported."""
    kinds: list[tuple[str, int]] = []
    typed = True
    for item in value.split(","):
        parts = item.split("(")[0].split(":")
        again = kinds and (not typed or len(parts) != 3 or
                           parts[1] in dict(kinds) or not _NAME.match(parts[1]))
        if parts[0] != "gpu" or again:
            report.drop(file, where.number, f"Gres item {item}",
                        "the spec expresses GPU GRES as gpu[:type]:count, or several "
                        "gpu:type:count of distinct types (a node class's GPU kinds)")
            continue
        count = parts[-1] if len(parts) > 1 else "1"
        kind = parts[1] if len(parts) == 3 else "gpu"
        if not count.isdigit():
            report.drop(file, where.number, f"Gres item {item}", "count is not a number")
            continue
        if "(" in item:
            report.drop(file, where.number, f"Gres item {item}",
                        "socket binding (S:...) is not expressed; the GPUs stay")
        kinds.append((kind, int(count)))
        typed = len(parts) != 2
    return (tuple(kinds), typed) if kinds else None


def node_def(line: ConfLine, params: dict, report: ImportReport, file: str) -> NodeDef | None:
    for key, (written, value) in params.items():
        if key not in _NODE_KEYS:
            report.drop(file, line.number, f"{written}={value} (NodeName={line.name})",
                        "the spec has no node setting for it")
    try:
        hosts = hostlist.expand(line.name)
    except hostlist.HostlistError as exc:
        report.drop(file, line.number, line.text, f"hostlist: {exc}")
        return None
    threads = _int(params, "threadspercore", 1)
    cores = _int(params, "corespersocket", 1)
    cpus = _int(params, "cpus")
    sockets = _int(params, "sockets")
    if sockets is None:
        # Slurm's default: CPUs spread over sockets of CoresPerSocket*ThreadsPerCore
        sockets = max(1, (cpus or 1) // (cores * threads))
        if sockets > MAX_SOCKETS and "corespersocket" not in params:
            # CPUs=36 alone is 36 one-core sockets to Slurm; the spec has at most 16
            report.change(file, line.number, f"CPUs={cpus} (NodeName={line.name})",
                          f"written as Sockets=1 CoresPerSocket={sockets} (Slurm makes "
                          f"{sockets} one-core sockets of CPUs alone; the spec takes at most "
                          f"{MAX_SOCKETS} sockets)")
            sockets, cores = 1, sockets
    if cpus is not None and cpus != sockets * cores * threads:
        report.drop(file, line.number, f"CPUs={cpus} (NodeName={line.name})",
                    f"renders as CPUs={sockets * cores * threads} "
                    "(Sockets x CoresPerSocket x ThreadsPerCore)")
    state = params.get("state", ("", "UNKNOWN"))[1]
    if state.upper() not in ("UNKNOWN", "CLOUD", "FUTURE"):
        report.drop(file, line.number, f"State={state} (NodeName={line.name})",
                    "nodes render State=UNKNOWN, CLOUD or FUTURE")
    gres = params.get("gres")
    found = _gres(gres[1], line, report, file) if gres and gres[1] else None
    gpu, typed = found if found else (None, True)
    features = []
    for key in ("feature", "features"):
        for f in params.get(key, ("", ""))[1].split(","):
            if f and _FEATURE.match(f):
                features.append(f)
            elif f:
                report.drop(file, line.number, f"Feature {f}", "not a spec name")
    node = NodeDef(line, hosts, sockets, cores, threads, _int(params, "realmemory", 1), gpu,
                   features, _int(params, "weight", 1), _int(params, "corespeccount"),
                   _int(params, "memspeclimit"), typed,
                   state.lower() if state.upper() in ("CLOUD", "FUTURE") else "unknown")
    if "nodeaddr" in params:
        node.addrs = _addresses(params["nodeaddr"][1], node, report, file)
    node.machines = {params[k][0]: _per_host(params[k][1], hosts)
                     for k in ("nodeaddr", "nodehostname") if k in params}
    node.port = "port" in params
    return node


def _per_host(value: str, hosts: list[str]) -> list[str]:
    """NodeAddr or NodeHostname for each host: Slurm takes one value for all the line's
    hosts, or one each (read_config.c, _check_callback); [] where it is neither."""
    try:
        values = hostlist.expand(value)
    except hostlist.HostlistError:
        return []
    return values * len(hosts) if len(values) == 1 else \
        values if len(values) == len(hosts) else []


def several_per_host(nodes: list[NodeDef]) -> str | None:
    """Why the nodes cannot be a spec where several NodeName hosts share one NodeAddr or
    NodeHostname (Slurm's multiple-slurmd mode, each with its own Port=), naming the
    lines; None where every node has a host of its own."""
    for key in ("NodeAddr", "NodeHostname"):
        owners: dict[str, dict[str, NodeDef]] = {}
        for n in nodes:
            machines = next((v for k, v in n.machines.items() if k.lower() == key.lower()),
                            [])
            for host, machine in zip(n.hosts, machines):
                owners.setdefault(machine, {})[host] = n
        shared = {m: o for m, o in owners.items() if len(o) > 1}
        if shared:
            return _several(key, shared)
    return None


def _several(key: str, shared: dict[str, dict[str, NodeDef]]) -> str:
    defs = sorted({id(n): n for o in shared.values() for n in o.values()}.values(),
                  key=lambda n: n.line.number)
    hosts = {h for o in shared.values() for h in o}
    ports = ", each with its own Port=" if all(n.port for n in defs) else ""
    return (f"NodeName line{'s' if len(defs) > 1 else ''} "
            f"{', '.join(str(n.line.number) for n in defs)} "
            f"({', '.join(n.line.name for n in defs)}) put {len(hosts)} nodes on "
            f"{len(shared)} host{'s' if len(shared) > 1 else ''} ({key}="
            f"{hostlist.compress(list(shared))}{ports}): that is Slurm's multiple-slurmd "
            "mode, several slurmd on one host, which Estate cannot express, as it runs one "
            "slurmd per host, so no spec is written")


def _addresses(value: str, node: NodeDef, report: ImportReport, file: str) -> list[str]:
    """NodeAddr as IPv4 addresses, one per host, consecutive (the spec's group blocks)."""
    try:
        addrs = [ipaddress.IPv4Address(a) for a in hostlist.expand(value)]
    except (ValueError, hostlist.HostlistError):
        report.drop(file, node.line.number, f"NodeAddr={value}",
                    "not IPv4 addresses; slurmctld will resolve the node names instead")
        return []
    if len(addrs) != len(node.hosts) or any(
            int(b) - int(a) != 1 for a, b in zip(addrs, addrs[1:])):
        report.drop(file, node.line.number, f"NodeAddr={value}", "the spec gives a node "
                    "group consecutive addresses, one per host; these are not")
        return []
    return [str(a) for a in addrs]


def node_defs(lines: list[ConfLine], report: ImportReport, file: str, version: str
              ) -> list[NodeDef]:
    out = []
    for line, params in with_defaults(lines):
        params = renamed(line, params, "NodeName", version, report, file)
        try:
            node = node_def(line, params, report, file)
        except ValueError as exc:
            report.drop(file, line.number, line.text, f"unreadable number: {exc}")
            continue
        if node:
            out.append(node)
    return out


def _class_key(n: NodeDef) -> tuple:
    return (n.sockets, n.cores, n.threads, n.memory, n.gpu)


def _base_name(key: tuple) -> str:
    sockets, cores, threads, memory, gpu = key
    return f"c{sockets * cores * threads}-m{memory}" + "".join(f"-{t}x{c}" for t, c in gpu or ())


def _class_names(nodes: list[NodeDef]) -> dict[tuple, str]:
    """Each hardware shape's class name: CPUs, memory and GPUs, and where two shapes share
    those (the same CPUs in other sockets, cores or threads) the layout too, so that each
    name says what differs (-s2c16t1: 2 sockets of 16 cores, 1 thread per core)."""
    keys = list(dict.fromkeys(_class_key(n) for n in nodes))
    base = [_base_name(k) for k in keys]
    names: dict[tuple, str] = {}
    for key, name in zip(keys, base):
        if base.count(name) > 1:
            name += "-s{}c{}t{}".format(*key[:3])
        names[key] = name
    return names


def classes(nodes: list[NodeDef]) -> tuple[list[dict], dict[tuple, str]]:
    """One node class per distinct hardware shape, named after it."""
    out, names = [], _class_names(nodes)
    done: set[tuple] = set()
    for n in nodes:
        key = _class_key(n)
        if key in done:
            continue
        done.add(key)
        name = names[key]
        cls = {"name": name, "sockets": n.sockets, "cores_per_socket": n.cores,
               "threads_per_core": n.threads, "memory_mb": max(n.memory, 256)}
        if n.gpu:
            kinds = [{"model": t, "product": t, "count": c,
                      "memory_gb": PLACEHOLDER_GPU_MEMORY_GB} for t, c in n.gpu]
            cls["gpus"] = kinds[0] if len(kinds) == 1 else kinds
        out.append(cls)
    return out, names


def group(n: NodeDef, cls: str, hosts: list[str], roles: list[str], segment: str,
          addr: str | None) -> dict:
    g: dict[str, object] = {"hosts": hostlist.compress(hosts), "class": cls, "plane": "slurm",
                            "roles": roles}
    if addr:
        g["addresses"] = {segment: addr}
    slurm: dict[str, object] = {"real_memory_mb": n.memory}
    if n.gpu:
        slurm["gres_count"] = sum(c for _, c in n.gpu)
        if not n.gpu_typed:
            slurm["gres_typed"] = False
    if n.weight != 1:
        slurm["weight"] = n.weight
    if n.features:
        slurm["features"] = n.features
    if n.core_spec:
        slurm["core_spec_count"] = n.core_spec
    if n.mem_spec:
        slurm["mem_spec_limit_mb"] = n.mem_spec
    if n.state != "unknown":
        slurm["state"] = n.state
    g["slurm"] = slurm
    return g
