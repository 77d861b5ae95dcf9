"""Quotas that add up: the spec's kubelet reservations fit its nodes, and the rendered quotas
(ClusterQueue nominal quotas, tenants' ResourceQuotas) never add up to more than the nodes
can hand out.

What a node hands out is its allocatable: capacity (the node class) less the kubeReserved,
systemReserved and evictionHard memory the rendered KubeletConfiguration sets, which is read
back from kubeadm's init.yaml, not taken from the spec, so a template that drops or changes a
reservation is caught.
"""
from __future__ import annotations

import re

from estate.check._common import problem
from estate.check.kubernetes_schema import _dicts
from estate.check.ownership import _groups, _name, _tenant_path, quota_claims, rendered
from estate.check.registry import ArtifactContext, Problem, Problems, validator
from estate.findings import Severity
from estate.model import kubernetes as k8s
from estate.model import model
from estate.model.services import MANIFESTS
from estate.spec.hostset import HostSet
from estate.spec.resolved import Estate

E = Severity.ERROR
INIT = "kubernetes/kubeadm/init.yaml"
KUBELET_KIND = "KubeletConfiguration"
# Kubernetes quantity suffixes (apimachinery resource.Quantity), as multipliers of one unit.
_SUFFIX = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
# resource -> (unit it is compared in, bytes or cores per unit, spec word)
RESOURCES = {"cpu": (1e-3, "millicores"), "memory": (2**20, "MiB")}


def amount(value, unit: float) -> float:
    """A Kubernetes quantity ('63500m', 4, '1548Mi') in units of unit; what is not a
    quantity counts as unbounded, so a corrupted quota is reported, not ignored."""
    m = _QUANTITY.fullmatch(str(value).strip())
    if not m:
        return float("inf")
    return float(m.group(1)) * _SUFFIX[m.group(2) or ""] / unit


def rendered_reservations(artifacts) -> dict[str, float]:
    """{'cpu': millicores, 'memory': MiB} the rendered KubeletConfiguration keeps from every
    node (kubeadm's init.yaml carries the one cluster-wide kubelet configuration)."""
    out = {"cpu": 0.0, "memory": 0.0}
    docs = _dicts(artifacts[INIT]) if INIT in artifacts else []
    for doc in (d for d in docs if d.get("kind") == KUBELET_KIND):
        for field in ("kubeReserved", "systemReserved"):
            for res, (unit, _) in RESOURCES.items():
                out[res] += amount(((doc.get(field) or {}).get(res)) or 0, unit)
        hard = (doc.get("evictionHard") or {}).get(k8s.MEMORY_SIGNAL)
        if hard and not str(hard).endswith("%"):
            out["memory"] += amount(hard, RESOURCES["memory"][0])
    return out


def _capacity(cls, res: str) -> float:
    return cls.cpus * 1000 if res == "cpu" else cls.memory_mb


def _nominal(queues, flavor: str, res: str) -> list[tuple[str, float]]:
    """[(ClusterQueue, nominal quota of res in flavor)]."""
    unit = RESOURCES[res][0]
    return [(_name(q), amount(r.get("nominalQuota", 0), unit))
            for q in queues for g in (q.get("spec") or {}).get("resourceGroups") or []
            for f in g.get("flavors") or [] if f.get("name") == flavor
            for r in f.get("resources") or [] if r.get("name") == res]


@validator("kubernetes.reserved_exceeds_capacity", E, "kubernetes",
           "the kubelet's reservations leave a Kubernetes node class no CPU or memory")
def reserved_exceeds_capacity(estate: Estate) -> Problems:
    if not estate.spec.kubernetes:
        return
    seen = set()
    for group in model(estate).groups:        # a group shares one class: no per-node scan
        cls = group.cls
        if group.plane != k8s.PLANE or not group.hosts or cls is None or cls.name in seen:
            continue
        seen.add(cls.name)
        free = k8s.allocatable(estate, cls)
        for res, left in (("cpu", free.cpu_millis), ("memory", free.memory_mi)):
            if left <= 0:
                yield problem(("kubernetes", "kubelet"),
                              f"node class '{cls.name}' ({str(group.hosts)[:40]}) has "
                              f"{_capacity(cls, res):.0f} {RESOURCES[res][1]} of {res}; "
                              "kube_reserved, system_reserved and the eviction threshold "
                              "take all of it, so no pod fits",
                              "lower kubernetes.kubelet's reservations, or give the class "
                              "more CPU and memory")


@validator("kubernetes.quota_exceeds_allocatable", E, "kubernetes",
           "tenants' rendered quotas add up to more than the nodes' allocatable (capacity "
           "less the kubelet's reservations) or the GPUs they advertise", stage="artifacts")
def quota_exceeds_allocatable(ctx: ArtifactContext) -> Problems:
    if not ctx.estate.spec.kubernetes:
        return
    r = rendered(ctx)
    kept = rendered_reservations(ctx.artifacts)
    classes = {n.name: n.cls for n in k8s.plane_nodes(ctx.estate)}
    for flavor in (_name(f) for f in r.flavors):
        nodes = [n.name for n in r.pool_nodes(flavor) if classes.get(n.name)]
        for res in RESOURCES:
            yield from _over(ctx, r, flavor, res, nodes, classes, kept[res])
    yield from _resource_quotas_over(ctx, r)


def _over(ctx, r, flavor, res, nodes, classes, kept) -> list[Problem]:
    claims = _nominal(r.queues, flavor, res)
    total = sum(q for _, q in claims)
    have = sum(max(_capacity(classes[n], res) - kept, 0) for n in nodes)
    if not claims or total <= have:
        return []
    unit = RESOURCES[res][1]
    listed = ", ".join(f"{q} {n:.0f}" for q, n in claims)
    return [Problem(_tenant_path(ctx.estate, claims[-1][0], f"{MANIFESTS}50-kueue.yaml",
                                 "gpus", flavor),
                    f"ClusterQueues give {total:.0f} {unit} of {res} in flavor '{flavor}' "
                    f"({listed}); its nodes' allocatable is {have:.0f} (capacity less "
                    f"{kept:.0f} reserved per node in {INIT}; "
                    f"{_groups(ctx.estate, HostSet.names(nodes))})",
                    "re-render: quotas split the nodes' allocatable; a hand-edited quota or "
                    "kubelet reservation breaks that")]


def _resource_quotas_over(ctx, r) -> list[Problem]:
    """The tenants' GPU ResourceQuotas together within what every pool advertises, per GPU
    resource: each one alone within its pools (ownership.pool_overcommitted) is not
    enough, since two tenants each allowed a whole pool could both fill it."""
    out = []
    for res in sorted({res for _, held in r.gpu_quotas.values() for res in held}):
        quotas = {ns: held[res] for ns, (_, held) in r.gpu_quotas.items() if res in held}
        total = sum(quotas.values())
        have = sum(n.advertised.get(res, 0) for n in r.gpu_nodes.values() if n.flavors)
        if total <= have:
            continue
        listed = ", ".join(f"{ns} {q:g}" for ns, q in sorted(quotas.items()))
        out.append(Problem("kubernetes.tenants",
                           f"the tenants' ResourceQuotas allow {total:g} requests.{res} "
                           f"together ({listed}); the pools advertise {have}",
                           "re-render: each ResourceQuota is its tenant's share"))
    return out


@validator("kubernetes.quota_not_advertised", E, "kubernetes",
           "a rendered quota (ClusterQueue or ResourceQuota) is in a GPU resource the "
           "pool's nodes do not advertise", stage="artifacts")
def quota_not_advertised(ctx: ArtifactContext) -> Problems:
    """Under MIG's mixed strategy a node advertises nvidia.com/mig-<profile>, not
    nvidia.com/gpu: a quota in the wrong resource admits nothing, or (a ResourceQuota)
    fences nothing."""
    for c in quota_claims(ctx):
        if not c.unadvertised:
            continue
        offered = sorted({res for n in c.nodes for res, u in n.advertised.items() if u})
        yield Problem(c.path, f"{c.what}; the nodes of {c.pools} "
                      f"({_groups(ctx.estate, HostSet.names(n.name for n in c.nodes))}) "
                      f"advertise no {c.resource}, only {', '.join(offered) or 'nothing'}",
                      "re-render: quotas are derived from the nodes' MIG layout "
                      "(node_classes[].gpus.mig_profiles) and mig_strategy; a hand-edited "
                      "quota must name a resource the nodes advertise")
