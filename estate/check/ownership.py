"""GPU ownership, proven from the rendered files rather than from the spec.

The spec validators (estate.check.boundaries) say what the spec means; these read back what
the daemons will be given and prove the same boundaries there, so a renderer or template
that writes something else is caught:

- every advertised GPU has exactly one owner: a Slurm node's Gres (slurm.conf NodeName
  lines) is owned by the Slurm partition pool, the partitions naming it (overlapping
  partitions are one owner: slurmctld arbitrates between them), a Kubernetes GPU node (its
  kubeadm registration: labels and taints) by the one Kueue ResourceFlavor whose nodeLabels
  it carries; no host is both;
- no PartitionName line names a node that registers with Kubernetes;
- only a tenant granted a pool (spec kubernetes.tenants[].gpus) can put pods on the pool's
  nodes: a pod lands on a tainted node only with a toleration, and PodTolerationRestriction
  (enabled in kubeadm's ClusterConfiguration) lets a namespace's pods carry only what its
  tolerationsWhitelist annotation covers; Kueue admits a namespace's workloads to the
  flavors of the ClusterQueues whose namespaceSelector selects it (read from the selector,
  not from the rendered LocalQueues: a tenant may create LocalQueues of its own). Node
  selectors and affinity only narrow where a pod may go; the taint is the fence;
- the nominal quotas of a pool's ClusterQueues, and each tenant's ResourceQuota, stay within
  the GPU resources its nodes advertise: gpu.count times the time-slice replicas of
  the device-plugin config the node selects, or under MIG the devices of the mig-parted
  config its nvidia.com/mig.config label names (nvidia.com/gpu under the single strategy,
  one nvidia.com/mig-<profile> per profile under mixed), else the MIG devices per GPU its
  replicas label declares.

Namespaces Estate does not render (default), kube-system (which Estate renders only to
label its Pod Security level, estate.render.system_policy) and those of the CNI's operator
(estate.model.cni.NAMESPACES, which Estate renders) are the cluster operators' and are not
tenants; they are outside this proof.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from estate.check._common import groups_touching, short
from estate.check.kubernetes_schema import (_dicts, device_plugin_configs, plane_artifacts,
                                            rendered_nodes, rendered_queues)
from estate.check.registry import ArtifactContext, Problem, Problems, validator
from estate.findings import Severity
from estate.model import cni
from estate.model import kubernetes as k8s
from estate.model.services import MANIFESTS
from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.hostset import HostSet, union

E, W = Severity.ERROR, Severity.WARNING
SLURM_CONF = "slurm/slurm.conf"
INIT = "kubernetes/kubeadm/init.yaml"
HARD_EFFECTS = ("NoSchedule", "NoExecute")


# --- reading the rendered files back ------------------------------------------------------

@dataclass
class GpuNode:
    name: str
    labels: dict
    taints: tuple
    advertised: dict     # GPU resource -> units the device plugin advertises on it
    unit_kind: str       # whole GPUs, time-slice replicas, MIG devices
    flavors: list = field(default_factory=list)

    @property
    def units(self) -> int:
        """nvidia.com/gpu it advertises (none under MIG's mixed strategy with a layout)."""
        return self.advertised.get(k8s.GPU_RESOURCE, 0)


@dataclass
class Rendered:
    slurm_gpu_hosts: HostSet                 # NodeName lines with gpu Gres
    partitions: list[tuple[str, HostSet]]    # PartitionName, Nodes
    k8s_hosts: HostSet                       # every node that registers with kubeadm
    gpu_nodes: dict[str, GpuNode]            # Kubernetes nodes labelled gpu.present
    flavors: list[dict]
    queues: list[dict]
    namespaces: dict[str, tuple[str, dict]]  # name -> (artifact path, Namespace)
    # namespace -> (artifact path, {GPU resource: its ResourceQuota's requests.<resource>})
    gpu_quotas: dict[str, tuple[str, dict[str, float]]]
    admission: set[str]

    def pool_nodes(self, flavor: str) -> list[GpuNode]:
        return [n for n in self.gpu_nodes.values() if flavor in n.flavors]

    def pool_taints(self) -> dict[str, set[tuple]]:
        """Pool -> the distinct taint lists of its nodes (a few, however many nodes)."""
        out: dict[str, set] = {}
        for n in self.gpu_nodes.values():
            key = tuple(tuple(sorted(t.items())) for t in n.taints if isinstance(t, dict))
            for f in n.flavors:
                out.setdefault(f, set()).add(key)
        return out


def _slurm(artifacts) -> tuple[HostSet, list[tuple[str, HostSet]]]:
    """(hosts whose NodeName line declares gpu Gres, [(partition, its hosts)]); a node set
    a partition names stands for its nodes, as slurmctld expands it."""
    a = artifacts.get(SLURM_CONF)
    if a is None:
        return HostSet(), []
    gres, nodes, parts, sets = [], [], [], {}
    featured: dict[str, list[HostSet]] = {}
    for line in a.content.decode(errors="replace").splitlines():
        key = line.split("=", 1)[0]
        if key not in ("NodeName", "PartitionName", "NodeSet"):
            continue
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if key == "NodeName":
            hosts = _hosts(words["NodeName"])
            nodes.append(hosts)
            for f in filter(None, words.get("Features", "").split(",")):
                featured.setdefault(f, []).append(hosts)
            if _gres_gpus(words.get("Gres", "")):
                gres.append(hosts)
        elif key == "NodeSet":
            sets[words["NodeSet"]] = words
        else:
            parts.append((words["PartitionName"], words.get("Nodes", "")))
    every = union(nodes)
    members = {name: (union(featured.get(w["Feature"], [])) if "Feature" in w
                      else _hosts(w.get("Nodes", ""))) for name, w in sets.items()}
    return union(gres), [(name, every if expr == "ALL" else _expand(_hosts(expr), members))
                         for name, expr in parts]


def _expand(hosts: HostSet, sets: dict[str, HostSet]) -> HostSet:
    for name, members in sets.items():
        if name in hosts:
            hosts = (hosts - HostSet.names([name])) | members
    return hosts


def _hosts(expr: str) -> HostSet:
    try:
        return HostSet.of(Hostlist.parse(expr))
    except HostlistError:   # slurm.conf holds no unparsable expression the spec let through
        return HostSet()


_SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20,
           "Gi": 2**30, "Ti": 2**40}


def quantity(value) -> float:
    """A count as Kubernetes writes it ('4', 4, '2k'); a value that is not one counts as
    unbounded, so a corrupted quota is reported rather than ignored."""
    text = str(value).strip()
    for suffix, factor in sorted(_SUFFIX.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix) and text[: -len(suffix)].isdigit():
            return int(text[: -len(suffix)]) * factor
    return int(text) if text.isdigit() else float("inf")


def _count(value, default: int = 0) -> int:
    """A label's count; what is not one advertises nothing (the device plugin's view)."""
    text = str(value if value is not None else default)
    return int(text) if text.isdigit() else 0


def _gres_gpus(gres: str) -> int:
    """GPUs of a Gres value such as gpu:a100:2 or gpu:2,gpu:l4:1."""
    total = 0
    for item in gres.split(","):
        parts = item.split(":")
        if parts[0] == "gpu":
            total += int(parts[-1]) if parts[-1].isdigit() else 1
    return total


def plugin_config(labels: dict, configs: dict) -> dict:
    """The device-plugin config a node selects (its label, else the default)."""
    return configs.get(labels.get(k8s.DEVICE_PLUGIN_CONFIG_LABEL)) or \
        configs.get(k8s.DEFAULT_SHARING_CONFIG) or {}


def mig_strategy(config: dict) -> str:
    return str((config.get("flags") or {}).get("migStrategy", "none"))


def mig_configs(artifacts) -> dict[str, dict[str, int]]:
    """Config name -> profile -> instances per GPU, from the rendered mig-parted file (its
    `devices: all` entries that enable MIG; a layout per GPU index is not Estate's)."""
    a = artifacts.get(k8s.MIG_PARTED)
    out: dict[str, dict[str, int]] = {}
    for doc in _dicts(a) if a else ():
        for name, entries in (doc.get("mig-configs") or {}).items():
            layout: dict[str, int] = {}
            for e in entries if isinstance(entries, list) else ():
                if isinstance(e, dict) and e.get("devices") == "all" and e.get("mig-enabled"):
                    for p, n in (e.get("mig-devices") or {}).items():
                        layout[str(p)] = layout.get(str(p), 0) + _count(n)
            out[str(name)] = layout
    return out


def _per_gpu(labels: dict, configs: dict, layouts: dict) -> tuple[dict[str, int], str]:
    """GPU resource -> units per physical GPU on a node, as its device-plugin config (and
    under MIG its mig-parted config) advertises."""
    config = plugin_config(labels, configs)
    for r in ((config.get("sharing") or {}).get("timeSlicing") or {}).get("resources", []):
        if r.get("name") == k8s.GPU_RESOURCE:
            return {k8s.GPU_RESOURCE: _count(r.get("replicas"), 1)}, "time-slice replicas"
    strategy = mig_strategy(config)
    if strategy == "none":
        return {k8s.GPU_RESOURCE: 1}, "whole GPUs"
    layout = layouts.get(labels.get(k8s.MIG_CONFIG_LABEL))
    if layout and strategy == "mixed":
        return {k8s.mig_resource(p): n for p, n in layout.items()}, "MIG devices"
    if layout:
        return {k8s.GPU_RESOURCE: sum(layout.values())}, "MIG devices"
    # no layout rendered: the node's label says how many devices the plugin advertises
    return {k8s.GPU_RESOURCE: _count(labels.get(k8s.GPU_REPLICAS), 1)}, "MIG devices"


def _gpu_nodes(artifacts, flavors) -> dict[str, GpuNode]:
    configs = {}
    for a in plane_artifacts(artifacts, MANIFESTS):
        configs.update(device_plugin_configs(a))
    layouts = mig_configs(artifacts)
    out = {}
    for name, node in rendered_nodes(artifacts).items():
        labels = node["labels"]
        if labels.get(k8s.GPU_PRESENT) != "true":
            continue
        per_gpu, kind = _per_gpu(labels, configs, layouts)
        gpus = _count(labels.get(k8s.GPU_COUNT))
        n = GpuNode(name, labels, tuple(node["taints"]),
                    {r: gpus * u for r, u in per_gpu.items()}, kind)
        n.flavors = [(f.get("metadata") or {}).get("name") for f in flavors
                     if _matches((f.get("spec") or {}).get("nodeLabels") or {}, labels)]
        out[name] = n
    return out


def _matches(want: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in want.items())


OPERATORS = (*cni.NAMESPACES, "kube-system")


def _namespaced(artifacts) -> tuple[dict, dict]:
    namespaces: dict = {}
    quotas: dict = {}
    for a in plane_artifacts(artifacts, MANIFESTS):
        for doc in _dicts(a):
            meta = doc.get("metadata") or {}
            if doc.get("kind") == "Namespace" and meta.get("name") not in OPERATORS:
                namespaces[meta.get("name")] = (a.path, doc)
            elif doc.get("kind") == "ResourceQuota":
                hard = (doc.get("spec") or {}).get("hard") or {}
                for key, value in hard.items():
                    res = str(key).removeprefix("requests.")
                    if res != key and k8s.gpu_resource(res):
                        ns = meta.get("namespace")
                        held = quotas.setdefault(ns, (a.path, {}))[1]
                        held[res] = held.get(res, 0) + quantity(value)
    return namespaces, quotas


def _admission(artifacts) -> set[str]:
    a = artifacts.get(INIT)
    for doc in _dicts(a) if a else ():
        if doc.get("kind") == "ClusterConfiguration":
            for arg in (doc.get("apiServer") or {}).get("extraArgs") or []:
                if arg.get("name") == "enable-admission-plugins":
                    return set(str(arg.get("value", "")).split(","))
    return set()


_LAST: list = []   # [(key, Rendered)]: the five validators read one parse of the same files


def rendered(ctx) -> Rendered:
    key = (ctx.estate, tuple(map(id, ctx.artifacts.values())))
    if _LAST and _LAST[0][0][0] is key[0] and _LAST[0][0][1] == key[1]:
        return _LAST[0][1]
    arts = ctx.artifacts
    gres, parts = _slurm(arts)
    flavors, queues = rendered_queues(arts)
    namespaces, quotas = _namespaced(arts)
    view = Rendered(gres, parts, HostSet.names(rendered_nodes(arts)),
                    _gpu_nodes(arts, flavors), flavors, queues, namespaces, quotas,
                    _admission(arts))
    _LAST[:] = [(key + (arts,), view)]   # the artifacts stay referenced: ids stay unique
    return view


# --- where in the spec ---------------------------------------------------------------------

def _groups(estate, hosts: HostSet) -> str:
    """'nodes[3].hosts (gpu[1-2])' for each spec group the hosts are in."""
    return ", ".join(f"nodes[{gi}].hosts ({short(part, 40)})"
                     for gi, part in groups_touching(estate, hosts)) or f"({short(hosts, 40)})"


def _last_group(estate, hosts: HostSet, fallback: str) -> str:
    """The last spec group holding any of the hosts: where a second claim on them was made."""
    gis = [gi for gi, _ in groups_touching(estate, hosts)]
    return f"nodes[{gis[-1]}].hosts" if gis else fallback


def _index(items, name: str) -> int | None:
    return next((i for i, x in enumerate(items) if x.name == name), None)


def _tenant_path(estate, name: str, fallback: str, *rest: str) -> str:
    ti = _index(estate.spec.kubernetes.tenants, name) if estate.spec.kubernetes else None
    if ti is None:
        return fallback
    return ".".join([f"kubernetes.tenants[{ti}]", *rest])


# --- every GPU has one owner -----------------------------------------------------------------

@validator("ownership.gpu_double_booked", E, "ownership",
           "a rendered GPU is owned twice: a Slurm node Kubernetes also registers, or a "
           "Kubernetes node two ResourceFlavors select", stage="artifacts")
def gpu_double_booked(ctx: ArtifactContext) -> Problems:
    r = rendered(ctx)
    both = r.slurm_gpu_hosts & r.k8s_hosts
    if both:
        yield Problem(_last_group(ctx.estate, both, SLURM_CONF),
                      f"hosts {short(both)} have GPUs in Slurm (slurm.conf NodeName Gres) and "
                      f"register with Kubernetes (kubeadm): both schedulers would hand out "
                      f"the same GPUs; spec: {_groups(ctx.estate, both)}",
                      "give each host to one plane only")
    twice = [n for n in r.gpu_nodes.values() if len(n.flavors) > 1]
    by_flavors: dict[tuple, list[str]] = {}
    for n in twice:
        by_flavors.setdefault(tuple(n.flavors), []).append(n.name)
    for names, hosts in sorted(by_flavors.items()):
        hs = HostSet.names(hosts)
        yield Problem(_last_group(ctx.estate, hs, f"{MANIFESTS}50-kueue.yaml"),
                      f"Kubernetes GPU nodes {short(hs)} match ResourceFlavors "
                      f"{', '.join(names)}: Kueue would promise their GPUs in each",
                      "give each GPU model its own product string, so one flavor selects "
                      "each node")


@validator("ownership.gpu_unowned", W, "ownership",
           "rendered GPUs that no Slurm partition and no Kueue flavor hands out",
           stage="artifacts")
def gpu_unowned(ctx: ArtifactContext) -> Problems:
    r = rendered(ctx)
    idle = r.slurm_gpu_hosts - union(hosts for _, hosts in r.partitions)
    if idle:
        yield Problem(_last_group(ctx.estate, idle, SLURM_CONF),
                      f"slurm.conf declares GPUs on {short(idle)} but no PartitionName names "
                      f"them: no job can use them; spec: {_groups(ctx.estate, idle)}",
                      "add them to a partition")
    stray = HostSet.names(n.name for n in r.gpu_nodes.values() if not n.flavors)
    if stray:
        yield Problem(_last_group(ctx.estate, stray, INIT),
                      f"Kubernetes GPU nodes {short(stray)} match no ResourceFlavor: no "
                      f"tenant's quota covers their GPUs; spec: {_groups(ctx.estate, stray)}",
                      "grant the GPU model to a tenant (kubernetes.tenants[].gpus)")


# --- no partition names a Kubernetes node --------------------------------------------------

@validator("ownership.partition_kubernetes_node", E, "ownership",
           "a rendered PartitionName line names a node that registers with Kubernetes",
           stage="artifacts")
def partition_kubernetes_node(ctx: ArtifactContext) -> Problems:
    r = rendered(ctx)
    for name, hosts in r.partitions:
        inter = hosts & r.k8s_hosts
        if inter:
            pi = _index(ctx.estate.spec.slurm.partitions, name)
            path = SLURM_CONF if pi is None else f"slurm.partitions[{pi}].nodes"
            yield Problem(path, f"slurm.conf partition '{name}' names {short(inter)}, which "
                          f"register with Kubernetes (kubeadm); spec: "
                          f"{_groups(ctx.estate, inter)}",
                          "remove them from the partition, or move them to the Slurm plane")


# --- only granted tenants reach a pool --------------------------------------------------------

def tolerates(t: dict, taint: dict) -> bool:
    """Kubernetes' ToleratesTaint (k8s.io/api/core/v1)."""
    if t.get("effect") and t.get("effect") != taint.get("effect"):
        return False
    op = t.get("operator") or "Equal"
    if not t.get("key"):
        return op == "Exists"          # an empty key with Exists tolerates every taint
    if t["key"] != taint.get("key"):
        return False
    return op == "Exists" or (op == "Equal" and (t.get("value") or "") ==
                              (taint.get("value") or ""))


def _name(doc: dict) -> str:
    return str((doc.get("metadata") or {}).get("name"))


def _open_to(whitelist: list, taints: tuple) -> bool:
    """Whether a pod allowed only the whitelist's tolerations can land on these taints."""
    return all(any(tolerates(t, taint) for t in whitelist)
               for taint in taints if taint.get("effect") in HARD_EFFECTS)


def _whitelist(ns: dict) -> list | None:
    """The namespace's tolerationsWhitelist; None when absent, empty or unreadable, which
    PodTolerationRestriction treats as 'any toleration'."""
    raw = ((ns.get("metadata") or {}).get("annotations") or {}).get(k8s.TOLERATIONS_WHITELIST)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, list) and value and \
        all(isinstance(t, dict) for t in value) else None


def selects(selector, labels: dict) -> bool:
    """A LabelSelector; None selects nothing (Kueue's namespaceSelector), {} everything."""
    if selector is None:
        return False
    if not _matches(selector.get("matchLabels") or {}, labels):
        return False
    for e in selector.get("matchExpressions") or []:
        has, value, values = e.get("key") in labels, labels.get(e.get("key")), e.get("values")
        if not {"In": has and value in (values or []), "NotIn": value not in (values or []),
                "Exists": has, "DoesNotExist": not has}.get(e.get("operator"), False):
            return False
    return True


def _reachable(r: Rendered, pool_taints: dict, ns_name: str, ns: dict) -> dict[str, str]:
    """Pool -> how this namespace's pods reach its nodes (GPU nodes no flavor owns are
    ownership.gpu_unowned's)."""
    out: dict[str, str] = {}
    whitelist = _whitelist(ns)
    enforced = "PodTolerationRestriction" in r.admission
    for pool, taint_lists in pool_taints.items():
        if not enforced:
            out[pool] = "PodTolerationRestriction is not enabled (kubeadm init.yaml)"
        elif whitelist is None:
            out[pool] = f"its Namespace has no {k8s.TOLERATIONS_WHITELIST}"
        elif any(_open_to(whitelist, tuple(dict(t) for t in taints))
                 for taints in taint_lists):
            out[pool] = "its tolerationsWhitelist tolerates the pool's taint"
    labels = {k8s.NAMESPACE_NAME_LABEL: ns_name, **((ns.get("metadata") or {}).get("labels")
                                                  or {})}
    for q in r.queues:
        if selects((q.get("spec") or {}).get("namespaceSelector"), labels):
            for group in (q.get("spec") or {}).get("resourceGroups") or []:
                for f in group.get("flavors") or []:
                    out.setdefault(f.get("name"), f"ClusterQueue '{_name(q)}' "
                                   "admits its workloads to the flavor")
    return out


@validator("ownership.tenant_pool_access", E, "ownership",
           "the rendered files let a tenant's pods onto a GPU pool it is not granted",
           stage="artifacts")
def tenant_pool_access(ctx: ArtifactContext) -> Problems:
    r = rendered(ctx)
    k8s_spec = ctx.estate.spec.kubernetes
    tenants = {t.name: t for t in (k8s_spec.tenants if k8s_spec else [])}
    pool_taints = r.pool_taints()
    for ns_name, (path, ns) in sorted(r.namespaces.items(), key=lambda kv: str(kv[0])):
        tenant = tenants.get(ns_name)
        granted = set(tenant.gpus) if tenant else set()
        for pool, how in sorted(_reachable(r, pool_taints, ns_name, ns).items(),
                                key=lambda kv: str(kv[0])):
            if pool in granted:
                continue
            nodes = HostSet.names(n.name for n in r.pool_nodes(pool))
            yield Problem(_tenant_path(ctx.estate, ns_name, path, "gpus"),
                          f"tenant '{ns_name}' is not granted pool '{pool}', yet its pods can "
                          f"be scheduled on {short(nodes, 40)} ({_groups(ctx.estate, nodes)}): "
                          f"{how} ({path})",
                          f"grant '{pool}' in kubernetes.tenants[].gpus if it is meant; "
                          "otherwise the rendered files are wrong: re-render, and fix the "
                          "renderer or template that wrote them")


# --- quotas within what the pool advertises ---------------------------------------------------

def _nominal(queues) -> dict[tuple[str, str], list[tuple[str, float]]]:
    """(flavor, GPU resource) -> [(ClusterQueue, nominal quota)]."""
    out: dict[tuple, list] = {}
    for q in queues:
        for group in (q.get("spec") or {}).get("resourceGroups") or []:
            for f in group.get("flavors") or []:
                for res in f.get("resources") or []:
                    if k8s.gpu_resource(str(res.get("name"))):
                        out.setdefault((f.get("name"), res.get("name")), []).append(
                            (_name(q), quantity(res.get("nominalQuota", 0))))
    return out


@dataclass
class Claim:
    """What one tenant's rendered quota (or all of a pool's) asks of one GPU resource."""
    path: str            # the spec path to name
    what: str            # "ClusterQueues give ... in pool 'x'" or "ResourceQuota of ..."
    resource: str
    total: float
    have: int            # units of resource the nodes behind it advertise
    nodes: list          # those nodes (GpuNode)
    pools: str           # the pools, for the message

    @property
    def unadvertised(self) -> bool:
        """Asks for a resource the pool's nodes do not advertise at all (a quota in
        nvidia.com/gpu on MIG nodes under the mixed strategy, or the reverse)."""
        return self.total > 0 and self.have == 0 and bool(self.nodes)


def quota_claims(ctx) -> list[Claim]:
    """Every ClusterQueue pool total and every tenant ResourceQuota, per GPU resource, with
    what the rendered nodes advertise of it."""
    r = rendered(ctx)
    kueue = f"{MANIFESTS}50-kueue.yaml"
    units = {_name(f): r.pool_nodes(_name(f)) for f in r.flavors}
    out = []
    for (flavor, res), claims in sorted(_nominal(r.queues).items(), key=lambda kv: str(kv[0])):
        nodes = units.get(flavor, [])
        listed = ", ".join(f"{q} ({_tenant_path(ctx.estate, q, 'ClusterQueue ' + q, 'gpus', flavor)})"
                           f" {n:g}" for q, n in claims)
        out.append(Claim(_tenant_path(ctx.estate, claims[-1][0], kueue, "gpus", flavor),
                         f"ClusterQueues give {sum(q for _, q in claims):g} {res} in pool "
                         f"'{flavor}' ({listed})", res, sum(q for _, q in claims),
                         sum(n.advertised.get(res, 0) for n in nodes), nodes, flavor))
    tenants = ctx.estate.spec.kubernetes.tenants if ctx.estate.spec.kubernetes else []
    for ns, (path, held) in sorted(r.gpu_quotas.items(), key=lambda kv: str(kv[0])):
        granted = next((set(t.gpus) for t in tenants if t.name == ns), set())
        nodes = [n for f in sorted(granted) for n in units.get(f, [])]
        for res, quota in sorted(held.items()):
            out.append(Claim(_tenant_path(ctx.estate, ns, path, "gpus"),
                             f"ResourceQuota of namespace '{ns}' allows {quota:g} "
                             f"requests.{res} ({path})", res, quota,
                             sum(n.advertised.get(res, 0) for n in nodes), nodes,
                             ", ".join(sorted(granted)) or "none"))
    return out


@validator("ownership.pool_overcommitted", E, "ownership",
           "tenants' rendered GPU quotas add up to more than their pool's nodes advertise",
           stage="artifacts")
def pool_overcommitted(ctx: ArtifactContext) -> Problems:
    for c in quota_claims(ctx):
        if c.total <= c.have or c.unadvertised:   # unadvertised: kubernetes.quota_not_advertised
            continue
        kind = ", ".join(sorted({n.unit_kind for n in c.nodes})) or c.resource
        where = _groups(ctx.estate, HostSet.names(n.name for n in c.nodes)) if c.nodes else \
            "matches no rendered node"
        yield Problem(c.path, f"{c.what}; the nodes of {c.pools} advertise {c.have} "
                      f"({kind}; {where})",
                      "lower the tenants' quotas, or add nodes to the pool; a hand-edited "
                      "rendered quota: re-render (the quota is the tenant's Kueue ceiling, "
                      "which cannot exceed its pools)")
