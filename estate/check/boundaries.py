"""Boundary validators: every node, role and GPU belongs to exactly one plane."""
from __future__ import annotations

from collections import Counter

from estate.catalogue import ROLES
from estate.check._common import (
    group_of, group_sets, groups_touching, hosts_where, overlapping, problem, short,
)
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model import model
from estate.model.kubernetes import flavors
from estate.spec.hostlist import HostlistError
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING

# The plane a role's software belongs to (the role catalogue); roles without one (storage)
# serve both planes.
ROLE_PLANE = {name: r.plane for name, r in ROLES.items() if r.spec_role and r.plane}


@validator("boundaries.node_in_both_planes", E, "boundaries",
           "a host is defined in a Slurm group and in a Kubernetes group")
def node_in_both_planes(estate: Estate) -> Problems:
    sets = group_sets(estate)
    if not hosts_where(estate, lambda g: g.plane == "slurm") & \
            hosts_where(estate, lambda g: g.plane == "kubernetes"):
        return
    earlier = overlapping(sets)
    for gi, group in enumerate(estate.spec.nodes):
        for gj in earlier.get(gi, ()):
            other = estate.spec.nodes[gj]
            if group.plane and other.plane and group.plane != other.plane:
                both = sets[gi] & sets[gj]
                if both:
                    yield problem(("nodes", gi, "hosts"), f"{short(both)} belong to the "
                                  f"{other.plane} plane in nodes[{gj}] and to the "
                                  f"{group.plane} plane here; both schedulers would hand out "
                                  "their CPUs and GPUs", "give each host to one plane only")


@validator("boundaries.role_plane", E, "boundaries",
           "a node group has a role of a plane it is not on")
def role_plane(estate: Estate) -> Problems:
    for gi, group in enumerate(estate.spec.nodes):
        for ri, role in enumerate(group.roles):
            want = ROLE_PLANE.get(role)
            if want and group.plane != want:
                yield problem(("nodes", gi, "roles", ri), f"role '{role}' needs plane "
                              f"'{want}', but nodes {group.hosts} are on "
                              f"{group.plane or 'no plane'}",
                              f"set plane: {want}, or drop the role")


@validator("boundaries.kubernetes_node_in_partition", E, "boundaries",
           "a Slurm partition names Kubernetes-plane nodes")
def kubernetes_node_in_partition(estate: Estate) -> Problems:
    for part in model(estate).partitions:
        for gi, inter in groups_touching(estate, part.members):
            if estate.spec.nodes[gi].plane == "kubernetes":
                yield problem(("slurm", "partitions", part.index, "nodes"), f"partition '{part.name}' "
                              f"includes Kubernetes-plane nodes {short(inter)} (nodes[{gi}])",
                              "remove them from the partition, or move them to the Slurm plane")


def _named_hosts(estate):
    """(loc, host, plane it must be on) for single hosts the spec gives a plane job."""
    slurm = estate.spec.slurm
    for i, name in enumerate(slurm.controllers):
        yield ("slurm", "controllers", i), name, "slurm"
    if slurm.accounting:
        yield ("slurm", "accounting", "host"), slurm.accounting.host, "slurm"
    if estate.spec.kubernetes:
        for i, name in enumerate(estate.spec.kubernetes.control_plane):
            yield ("kubernetes", "control_plane", i), name, "kubernetes"


@validator("boundaries.host_on_wrong_plane", E, "boundaries",
           "a Slurm controller on the Kubernetes plane, or a control plane node off it")
def host_on_wrong_plane(estate: Estate) -> Problems:
    for loc, name, plane in _named_hosts(estate):
        group = group_of(estate, name)
        if group is not None and group.plane != plane:
            yield problem(loc, f"'{name}' serves the {plane} plane here but its group is on "
                          f"{group.plane or 'no plane'}",
                          f"choose a {plane}-plane node, or move '{name}' to plane {plane}")


@validator("boundaries.kubernetes_section_missing", E, "boundaries",
           "Kubernetes-plane nodes exist but the spec has no 'kubernetes' section")
def kubernetes_section_missing(estate: Estate) -> Problems:
    if estate.spec.kubernetes is None:
        for gi, group in enumerate(estate.spec.nodes):
            if group.plane == "kubernetes":
                yield problem(("nodes", gi, "plane"), f"nodes {group.hosts} are on the "
                              "Kubernetes plane but the spec has no 'kubernetes' section",
                              "add 'kubernetes:' (control_plane, pod_cidr, service_cidr)")
                return


def kubernetes_gpus(estate) -> Counter:
    """Physical GPUs per model that Kueue flavors will hold (what tenants may be given),
    as estate.render.kubernetes computes them for the rendered flavors."""
    try:
        return Counter({f.name: f.gpus for f in flavors(estate)})
    except HostlistError:  # a broken hostlist: nodes.bad_hostlist reports it
        return Counter()


def _tenant_claims(estate) -> dict[str, list[tuple[tuple, int]]]:
    claims: dict[str, list] = {}
    for ti, tenant in enumerate(estate.spec.kubernetes.tenants):
        for model, n in tenant.gpus.items():
            claims.setdefault(model, []).append((("kubernetes", "tenants", ti, "gpus", model), n))
    return claims


@validator("boundaries.tenant_gpus_exceed_plane", E, "boundaries",
           "tenants' GPU quotas exceed the GPUs of that model on the Kubernetes plane")
def tenant_gpus_exceed_plane(estate: Estate) -> Problems:
    if estate.spec.kubernetes is None:
        return
    have = kubernetes_gpus(estate)
    for model, claims in _tenant_claims(estate).items():
        total = sum(n for _, n in claims)
        if total > have[model]:
            where = "none" if not have[model] else f"only {have[model]}"
            yield problem(claims[-1][0], f"tenants claim {total} '{model}' GPUs; the "
                          f"Kubernetes plane has {where}",
                          "lower the quotas or add Kubernetes workers with these GPUs; "
                          "Slurm-plane GPUs cannot be lent to tenants")


@validator("boundaries.tenant_gpus_unassigned", E, "boundaries",
           "Kubernetes-plane GPUs that no tenant has quota for")
def tenant_gpus_unassigned(estate: Estate) -> Problems:
    if estate.spec.kubernetes is None:
        return
    claims = _tenant_claims(estate)
    for model, n in sorted(kubernetes_gpus(estate).items()):
        claimed = sum(q for _, q in claims.get(model, []))
        if claimed < n:
            yield problem(("kubernetes", "tenants"), f"{n - claimed} of {n} '{model}' GPUs "
                          "on the Kubernetes plane are in no tenant's quota",
                          "raise a tenant's quota so the GPUs are usable")
