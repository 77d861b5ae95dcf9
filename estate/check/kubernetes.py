"""Kubernetes validators of the spec: what would make the render wrong or unusable (names
that cannot be Kubernetes names, labels the kubelet refuses, sharing settings for GPUs
that cannot do them). The rendered files are checked by estate.check.kubernetes_artifacts.
"""
from __future__ import annotations

import re
from itertools import islice

from estate.check._common import HostSet, group_of, hosts_where, parse_hosts, problem
from estate.check.kubernetes_schema import (MIN_MINOR, label_problems, schema_version,
                                            shipped_versions)
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model import cni
from estate.model import kubernetes as k8s
from estate.spec.types import DNS_LABEL, DNS_SUBDOMAIN, LABEL_VALUE
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING
KUBELET_ALLOWED = {"kubernetes.io/hostname", "kubernetes.io/instance-type", "kubernetes.io/os",
                   "kubernetes.io/arch", "beta.kubernetes.io/instance-type",
                   "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
                   "failure-domain.beta.kubernetes.io/zone",
                   "failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/zone",
                   "topology.kubernetes.io/region", "node.kubernetes.io/instance-type"}
KUBELET_ALLOWED_PREFIXES = ("kubelet.kubernetes.io/", "node.kubernetes.io/")
RESERVED_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease",
                       *cni.NAMESPACES}



def _plane(estate):
    return estate.spec.kubernetes


@validator("kubernetes.version", E, "kubernetes",
           "a Kubernetes version Estate cannot render or validate")
def version(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    v = _plane(estate).version
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", v)
    if not m:
        yield problem(("kubernetes", "version"), f"'{v}' is not a version like 1.36.1",
                      "write MAJOR.MINOR.PATCH without a leading v")
    elif (int(m.group(1)), int(m.group(2))) < (1, MIN_MINOR):
        yield problem(("kubernetes", "version"), f"Kubernetes {v} predates kubeadm's "
                      f"{k8s.KUBEADM_API} API, which Estate writes",
                      f"use 1.{MIN_MINOR} or newer")
    elif schema_version(v) is None:
        shipped = ", ".join(shipped_versions())
        yield problem(("kubernetes", "version"), f"no API schema for Kubernetes {v} to "
                      f"validate the manifests against (have {shipped})",
                      "pick a version whose minor has a schema, or upgrade kubernetes-validate")


@validator("kubernetes.control_plane", E, "kubernetes",
           "a control plane that is not a defined host with the k8s_control_plane role")
def control_plane(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    for i, name in enumerate(_plane(estate).control_plane):
        group = group_of(estate, name)
        if group is None:
            yield problem(("kubernetes", "control_plane", i), f"'{name}' is not a defined host",
                          "name a host from nodes[].hosts")
        elif "k8s_control_plane" not in group.roles:
            yield problem(("kubernetes", "control_plane", i), f"'{name}' lacks the "
                          "k8s_control_plane role, so nothing installs the API server there",
                          "add k8s_control_plane to its group's roles")


# Kubernetes' documented scale envelope (kubernetes.io/docs/setup/best-practices/cluster-large):
# beyond it the control plane needs tuning that Estate does not render.
MAX_CLUSTER_NODES = 5000


@validator("kubernetes.plane_too_large", W, "kubernetes",
           "more Kubernetes-plane nodes than upstream's 5,000-node envelope")
def plane_too_large(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    groups = [(gi, len(hosts)) for gi, (group, hosts)
              in enumerate(zip(estate.spec.nodes, estate.group_hosts))
              if group.plane == "kubernetes"]
    total = sum(n for _, n in groups)
    if total > MAX_CLUSTER_NODES:
        gi = max(groups, key=lambda g: g[1])[0]
        yield problem(("nodes", gi, "hosts"), f"the Kubernetes plane has {total} nodes; "
                      f"upstream supports at most {MAX_CLUSTER_NODES} per cluster",
                      "move nodes to the Slurm plane, or split the service plane into "
                      "several estates (one cluster each)")


@validator("kubernetes.control_plane_not_listed", W, "kubernetes",
           "a k8s_control_plane node missing from kubernetes.control_plane")
def control_plane_not_listed(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    listed = set(_plane(estate).control_plane)
    for gi, (group, hosts) in enumerate(zip(estate.spec.nodes, estate.group_hosts)):
        if "k8s_control_plane" in group.roles:
            missing = [h for h in hosts if h not in listed]
            if missing:
                yield problem(("nodes", gi, "roles"), f"{', '.join(missing[:5])} have the "
                              "k8s_control_plane role but are not in kubernetes.control_plane; "
                              "they join as workers", "list them in kubernetes.control_plane")


@validator("kubernetes.api_vip_missing", E, "kubernetes",
           "several control planes but no API VIP")
def api_vip_missing(estate: Estate) -> Problems:
    plane = _plane(estate)
    if plane and len(plane.control_plane) > 1 and not plane.api_vip:
        first = plane.control_plane[0]
        yield problem(("kubernetes", "control_plane"), f"{len(plane.control_plane)} control "
                      f"planes but no kubernetes.api_vip: nodes would join and clients connect "
                      f"through {first}'s own address, so the plane dies with {first}",
                      f"set kubernetes.api_vip to a free address of '{plane.api_segment}' "
                      "(one of its reserved addresses) and kubernetes.api_vip_interface")


@validator("kubernetes.api_vip", E, "kubernetes",
           "an API VIP outside the API segment, or a node's own address")
def api_vip(estate: Estate) -> Problems:
    plane = _plane(estate)
    if not plane or not plane.api_vip:
        return
    seg = next((s for s in estate.spec.segments if s.name == plane.api_segment), None)
    path, vip = ("kubernetes", "api_vip"), plane.api_vip
    if seg is None:
        return   # the API segment's own validators report it
    if vip not in seg.cidr or vip in (seg.cidr.network_address, seg.cidr.broadcast_address):
        yield problem(path, f"{vip} is not a host address of '{seg.name}' ({seg.cidr}), the "
                      "API segment: ARP announces it only there",
                      f"pick a reserved address of {seg.cidr}")
        return
    if owner := address_owner(estate, int(vip)):
        yield problem(path, f"{vip} is {owner}'s own address on '{owner_segment(estate, int(vip))}'"
                      ": kube-vip would take it from the node", "pick an address no node has "
                      f"(the first {seg.reserved} of {seg.cidr} are kept for VIPs)")


def address_owner(estate, addr: int) -> str | None:
    """The node an address belongs to, on any segment (ranges, not a scan of nodes)."""
    for b in estate.address_blocks:
        if b.first <= addr < b.first + b.count:
            return next(islice(estate.group_hosts[b.group], addr - b.first, None))
    return None


def owner_segment(estate, addr: int) -> str:
    return next(b.segment for b in estate.address_blocks if b.first <= addr < b.first + b.count)


# Linux interface names: at most 15 bytes (IFNAMSIZ less the NUL)
IFNAME_MAX = 15


@validator("kubernetes.api_vip_interface", E, "kubernetes",
           "an API VIP without the control planes' interface to announce it on")
def api_vip_interface(estate: Estate) -> Problems:
    plane = _plane(estate)
    if not plane or not plane.api_vip:
        return
    path, name = ("kubernetes", "api_vip_interface"), plane.api_vip_interface
    if not name:
        yield problem(path, "kubernetes.api_vip is set but not the interface kube-vip announces "
                      "it on (without one kube-vip takes the default route's interface, which "
                      f"need not be on '{plane.api_segment}')",
                      f"set kubernetes.api_vip_interface to the control planes' NIC on "
                      f"'{plane.api_segment}', e.g. eth0")
    elif len(name) > IFNAME_MAX:
        yield problem(path, f"'{name}' is longer than a Linux interface name "
                      f"({IFNAME_MAX} characters)", "name the interface as `ip link` shows it")
    else:
        for cp in plane.control_plane:
            group = group_of(estate, cp)
            cls = estate.node_class(group) if group else None
            nics = [n.name for n in cls.nics] if cls and cls.nics else []
            if nics and name not in nics:
                yield problem(path, f"control plane {cp} (class {cls.name}) has no NIC "
                              f"'{name}' (it has {', '.join(nics)})",
                              "name the control planes' NIC on the API segment")
                return


@validator("kubernetes.etcd_even", W, "kubernetes",
           "an even number of control planes (stacked etcd members)")
def etcd_even(estate: Estate) -> Problems:
    plane = _plane(estate)
    n = len(plane.control_plane) if plane else 0
    if n and n % 2 == 0:
        yield problem(("kubernetes", "control_plane"), f"{n} control planes are {n} etcd "
                      f"members: quorum is {n // 2 + 1}, so they survive the loss of "
                      f"{(n - 1) // 2}, no more than {n - 1} would, and fail more often",
                      f"use {n - 1} or {n + 1} control planes")


@validator("kubernetes.api_address", E, "kubernetes",
           "a Kubernetes node without an address on the API segment")
def api_address(estate: Estate) -> Problems:
    plane = _plane(estate)
    if not plane or plane.api_segment not in {s.name for s in estate.spec.segments}:
        return
    for gi, group in enumerate(estate.spec.nodes):
        if group.plane == k8s.PLANE and plane.api_segment not in group.addresses:
            yield problem(("nodes", gi, "addresses"), f"nodes {group.hosts} have no address "
                          f"on '{plane.api_segment}' (kubernetes.api_segment): the kubelet's "
                          "node IP and the API endpoint come from it",
                          f"add '{plane.api_segment}: auto' to their addresses")


@validator("kubernetes.tenant_name", E, "kubernetes",
           "a tenant name that cannot be a namespace, or is used twice")
def tenant_name(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    seen = set()
    for i, t in enumerate(_plane(estate).tenants):
        loc = ("kubernetes", "tenants", i, "name")
        if not DNS_LABEL.fullmatch(t.name):
            yield problem(loc, f"tenant '{t.name}' becomes a namespace, which must be lower "
                          "case letters, digits and '-'", f"rename it, e.g. "
                          f"'{re.sub(r'[^a-z0-9-]', '-', t.name.lower()).strip('-')}'")
        elif t.name in RESERVED_NAMESPACES or t.name.startswith("kube-"):
            yield problem(loc, f"'{t.name}' is a namespace Kubernetes reserves",
                          "give the tenant its own name")
        if t.name in seen:
            yield problem(loc, f"tenant '{t.name}' is defined twice", "merge or rename one")
        seen.add(t.name)
        if not DNS_SUBDOMAIN.fullmatch(t.cohort):
            yield problem(("kubernetes", "tenants", i, "cohort"), f"cohort '{t.cohort}' must "
                          "be lower case letters, digits, '-' and '.'", "rename the cohort")


@validator("kubernetes.allow_from_unknown", E, "kubernetes",
           "a tenant allows traffic from a tenant that does not exist")
def allow_from_unknown(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    names = {t.name for t in _plane(estate).tenants}
    for i, t in enumerate(_plane(estate).tenants):
        for j, other in enumerate(t.allow_from):
            if other not in names:
                yield problem(("kubernetes", "tenants", i, "allow_from", j), f"unknown "
                              f"tenant '{other}'", f"use one of: {', '.join(sorted(names))}")


@validator("kubernetes.tenant_group", E, "kubernetes",
           "a tenant's groups entry names a group missing from identity.groups")
def tenant_group(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    known = {g.name for g in estate.spec.identity.groups}
    for ti, tenant in enumerate(_plane(estate).tenants):
        for gi, name in enumerate(tenant.groups):
            if name not in known:
                yield problem(("kubernetes", "tenants", ti, "groups", gi), f"tenant "
                              f"'{tenant.name}' grants group '{name}', which identity.groups "
                              "does not define: the RoleBinding would name nobody Estate knows",
                              "add the group to identity.groups, or fix the name")


def _plane_gpu_classes(estate):
    """(group index, class) of Kubernetes workers with GPUs of one kind (a class of several
    kinds is kubernetes.gpu_kinds' finding, and nothing else here can describe it)."""
    for gi, group in enumerate(estate.spec.nodes):
        cls = estate.node_class(group)
        if group.plane == k8s.PLANE and "k8s_worker" in group.roles and cls and \
                len(cls.gpu_kinds) == 1:
            yield gi, cls


@validator("kubernetes.gpu_kinds", E, "kubernetes",
           "a Kubernetes worker whose class has several GPU kinds")
def gpu_kinds(estate: Estate) -> Problems:
    for gi, group in enumerate(estate.spec.nodes):
        cls = estate.node_class(group)
        if group.plane == k8s.PLANE and "k8s_worker" in group.roles and cls and \
                len(cls.gpu_kinds) > 1:
            kinds = ", ".join(f"{g.count}x {g.model}" for g in cls.gpu_kinds)
            yield problem(("nodes", gi, "class"), f"class '{cls.name}' has several GPU kinds "
                          f"({kinds}); the device plugin advertises them all as one "
                          f"{k8s.GPU_RESOURCE} and one product label, so no pod, quota or "
                          "Kueue flavor can tell them apart",
                          "give Kubernetes workers a class of one GPU kind (one class per "
                          "kind), or run these nodes on the Slurm plane")


@validator("kubernetes.gpu_model", E, "kubernetes",
           "a Kubernetes GPU model that cannot name a Kueue flavor, or has two products")
def gpu_model(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    products: dict[str, str] = {}
    for gi, cls in _plane_gpu_classes(estate):
        loc = ("node_classes", estate.spec.node_classes.index(cls), "gpus")
        model, product = cls.gpu.model, cls.gpu.product
        if not DNS_LABEL.fullmatch(model):
            yield problem(loc + ("model",), f"GPU model '{model}' names a Kueue ResourceFlavor, "
                          "which must be lower case letters, digits and '-'",
                          f"use e.g. '{model.lower().replace('_', '-')}'")
        for p in label_problems(k8s.GPU_PRODUCT, product):
            yield problem(loc + ("product",), p, "write the product as the driver reports it, "
                          "e.g. NVIDIA-H100-80GB-HBM3")
        if products.setdefault(model, product) != product:
            yield problem(loc + ("product",), f"model '{model}' is both '{products[model]}' and "
                          f"'{product}'; one Kueue flavor selects nodes by one product",
                          "give the second product its own model name")


@validator("kubernetes.gpu_sharing", E, "kubernetes",
           "GPU sharing for an unknown class, or MIG on GPUs without MIG")
def gpu_sharing(estate: Estate) -> Problems:
    plane = _plane(estate)
    if not plane:
        return
    for name in plane.gpu_sharing_by_class:
        cls = estate.classes.get(name)
        if cls is None or not cls.gpus:
            why = "is not a node class" if cls is None else "has no GPUs"
            yield problem(("kubernetes", "gpu_sharing_by_class", name), f"'{name}' {why}",
                          "key gpu_sharing_by_class by a GPU node class's name")
    for gi, cls in _plane_gpu_classes(estate):
        config, sharing = k8s.sharing_for(estate, cls)
        loc = ("kubernetes", "gpu_sharing") if config == k8s.DEFAULT_SHARING_CONFIG \
            else ("kubernetes", "gpu_sharing_by_class", cls.name)
        if sharing.mode == "mig" and not cls.gpu.mig:
            yield problem(loc, f"MIG sharing for class '{cls.name}', whose {cls.gpu.model} GPUs "
                          "are not MIG-capable (gpus.mig is false)",
                          "use time-slicing or none for this class")
        if sharing.mig_devices and (sharing.mode, sharing.mig_strategy) != ("mig", "single"):
            yield problem(loc + ("mig_devices",), "mig_devices is a MIG layout for mode: mig "
                          f"with mig_strategy: single, not {sharing.mode}"
                          + (f" ({sharing.mig_strategy})" if sharing.mode == "mig" else ""),
                          "drop mig_devices, or set mode: mig and mig_strategy: single")
        layout = k8s.mig_layout(cls, sharing)
        if layout and sharing.mig_devices and sharing.mig_devices != sum(layout.values()):
            yield problem(loc + ("mig_devices",), f"mig_devices is {sharing.mig_devices}, but "
                          f"class '{cls.name}''s layout (gpus.mig_profiles) makes "
                          f"{sum(layout.values())} MIG devices per GPU",
                          "drop mig_devices: the layout gives the count")


@validator("kubernetes.mig_quota_units", W, "kubernetes",
           "MIG GPUs under Kueue quotas that count whole GPUs")
def mig_quota_units(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    for gi, cls in _plane_gpu_classes(estate):
        _, sharing = k8s.sharing_for(estate, cls)
        if sharing.mode == "mig" and not k8s.mig_layout(cls, sharing) and \
                k8s.replicas(sharing, cls) == 1 and sharing.mig_devices != 1:
            yield problem(("nodes", gi, "class"), f"class '{cls.name}' runs MIG "
                          f"({sharing.mig_strategy}): the device plugin advertises MIG "
                          f"devices, not whole GPUs, but quotas for '{cls.gpu.model}' count "
                          "whole GPUs because the spec has no MIG layout",
                          "give the class a MIG layout (gpus.mig_profiles), or mig_devices "
                          "(single strategy), or use time-slicing or none "
                          "on the Kubernetes plane for exact quotas")


@validator("kubernetes.node_labels", E, "kubernetes",
           "node labels the kubelet refuses, or that clash with labels Estate derives")
def node_labels(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    derived = {k8s.GPU_PRESENT, k8s.GPU_PRODUCT, k8s.GPU_COUNT, k8s.GPU_REPLICAS,
               k8s.DEVICE_PLUGIN_CONFIG_LABEL, k8s.POOL_LABEL, k8s.MIG_CONFIG_LABEL,
               *k8s.TOPOLOGY_LABELS.values()}
    for gi, group in enumerate(estate.spec.nodes):
        if group.plane != k8s.PLANE:
            continue
        for key, value in group.labels.items():
            loc = ("nodes", gi, "labels", key)
            for p in label_problems(key, value):
                yield problem(loc, p, "fix the label")
            prefix = key.rpartition("/")[0]
            restricted = prefix.endswith("kubernetes.io") or prefix.endswith("k8s.io")
            if restricted and key not in KUBELET_ALLOWED \
                    and not key.startswith(KUBELET_ALLOWED_PREFIXES):
                yield problem(loc, f"the kubelet may not set '{key}' on its own node "
                              "(NodeRestriction) and refuses to start",
                              "use your own prefix, e.g. example.com/pool")
            if key in derived:
                yield problem(loc, f"'{key}' is derived from the spec (GPUs, sharing, "
                              "topology); setting it here would contradict it", "remove it")


@validator("kubernetes.topology_label", E, "kubernetes",
           "a switch or block name that cannot be a topology label value")
def topology_label(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    topo = estate.spec.topology
    named = [(("topology", "switches", i, "name"), s.name) for i, s in enumerate(topo.switches)]
    named += [(("topology", "blocks", i, "name"), b.name) for i, b in enumerate(topo.blocks)]
    for loc, name in named:
        if not LABEL_VALUE.fullmatch(name) or len(name) > 63:
            yield problem(loc, f"'{name}' becomes a {k8s.TOPOLOGY_LABELS['leaf'].split('/')[0]}"
                          " label value, which must start and end with a letter or digit",
                          "rename it")


@validator("kubernetes.export_name", E, "kubernetes",
           "an export Kubernetes mounts whose name cannot name a PersistentVolume")
def export_name(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    plane = hosts_where(estate, lambda g: g.plane == k8s.PLANE)
    mounted = {m.export for m in estate.spec.storage.mounts
               if (hosts := parse_hosts(m.clients)) and HostSet.of(hosts) & plane}
    for i, e in enumerate(estate.spec.storage.exports):
        if e.name in mounted and not DNS_LABEL.fullmatch(e.name):
            yield problem(("storage", "exports", i, "name"), f"export '{e.name}' names "
                          "PersistentVolumes and claims, which must be lower case letters, "
                          "digits and '-'", "rename the export")


# YAML 1.1 (PyYAML, and go-yaml v2 behind kubectl and kubeadm) reads these plain words as
# booleans or null: printed as a name they would not be a string any more.
YAML_WORDS = "y|yes|n|no|true|false|on|off|null|~"
YAML_WORD = re.compile(YAML_WORDS, re.IGNORECASE)
# one of them as a whole string of the dumped spec's JSON: none there, none anywhere (such
# a word needs no escape), and the walk below is skipped (a 10,000-node spec in groups of 8
# holds 34,000 strings)
_QUOTED_YAML_WORD = re.compile(f'"(?:{YAML_WORDS})"', re.IGNORECASE)


def _strings(value, loc: tuple = ()):
    """(location, text) of every string in a dumped spec, dict keys included."""
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield loc + (key,), key
            yield from _strings(item, loc + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, loc + (i,))


def _slurm_only(loc: tuple) -> bool:
    """Slurm settings that only slurm.conf prints (OverSubscribe=NO, PreemptMode=OFF,
    slurm.extra's values), never a Kubernetes file."""
    return loc[:1] == ("slurm",) and (loc[1:2] == ("extra",)
                                      or loc[-1] in ("oversubscribe", "preempt_mode"))


@validator("kubernetes.yaml_word", E, "kubernetes",
           "a name YAML reads as a boolean or null (yes, no, on, off, true, null, ...)")
def yaml_word(estate: Estate) -> Problems:
    if not _plane(estate):
        return
    if not _QUOTED_YAML_WORD.search(estate.spec.model_dump_json(by_alias=True,
                                                                exclude_defaults=True)):
        return
    data = estate.spec.model_dump(by_alias=True, mode="json", exclude_defaults=True)
    for loc, text in _strings(data):
        if YAML_WORD.fullmatch(text) and not _slurm_only(loc):
            yield problem(loc, f"'{text}' reads as a boolean or null in the Kubernetes "
                          "manifests and configs (YAML 1.1), not as a name",
                          "rename it, e.g. with a letter or digit added")
