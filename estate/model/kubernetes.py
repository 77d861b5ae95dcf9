"""The Kubernetes plane's derived facts: node labels, taints and sharing, GPU flavors and
tenant quotas, and the names Kubernetes, NVIDIA and Kueue define.

The renderer lays these out as manifests and kubeadm files; the artifact and boundary
validators and the Pulumi driver read them here, never from rendered text.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from estate.model import model
from estate.model.nodes import GroupFacts
from estate.model.services import PORTS
from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.model import GpuSharing, NodeClass, NodeGroup, Tenant
from estate.spec.resolved import Estate

PLANE = "kubernetes"

# --- names Kubernetes, NVIDIA and Kueue define ----------------------------------

GPU_RESOURCE = "nvidia.com/gpu"
# Under MIG's mixed strategy the device plugin advertises each profile as its own resource
# (nvidia.com/mig-1g.10gb) and a GPU in MIG mode no nvidia.com/gpu at all.
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# nvidia-mig-manager's label: the named config of the mig-parted file its node applies.
# Estate names each config after the node class (one layout per class).
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_PARTED = "kubernetes/nvidia/mig-parted.yaml"
# Every GPU worker carries this taint with its pool (its flavor's name) as the value, so a
# toleration names the pool it opens: Kueue adds it to the workloads it admits to that
# flavor, and PodTolerationRestriction lets only the namespaces of the tenants granted the
# pool carry it (TOLERATIONS_WHITELIST).
GPU_TAINT = {"key": GPU_RESOURCE, "effect": "NoSchedule"}
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
# kubeadm labels the control planes it initialises or joins with this key (empty value).
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# Where the cluster add-ons Estate renders (Kueue's controller) run: every node is tainted
# (control planes, GPU pools) unless the spec has untainted workers, so an add-on tolerates
# the control-plane taint and prefers the control planes; it never tolerates a GPU pool's
# taint, so it takes no tenant's node. kubernetes.addon_unschedulable checks the rendered
# add-ons have a node.
ADDON_TOLERATIONS = ({"key": CONTROL_PLANE_TAINT["key"], "operator": "Exists",
                      "effect": CONTROL_PLANE_TAINT["effect"]},)


def addon_affinity() -> dict:
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": CONTROL_PLANE_LABEL, "operator": "Exists"}]}}]}}
GPU_PRESENT = "nvidia.com/gpu.present"
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_COUNT = "nvidia.com/gpu.count"
GPU_REPLICAS = "nvidia.com/gpu.replicas"
# The pool (Kueue flavor, taint value: the GPU model) a GPU worker is in. Flavors select
# on this, Estate's own label, not on nvidia.com/gpu.product: GPU Feature Discovery
# rewrites the product label from the hardware and the sharing (a `-SHARED` suffix under
# time-slicing, `-MIG-<profile>` under MIG's single strategy), which would unselect the
# nodes from their flavor.
POOL_LABEL = "estate.io/gpu-pool"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
DEFAULT_SHARING_CONFIG = "default"
# Kueue gives a job without a queue name the LocalQueue of this name in its namespace
# (pkg/controller/constants DefaultLocalQueueName): every tenant namespace has one.
DEFAULT_LOCAL_QUEUE = "default"
# NVIDIA topograph's keys: tree levels and the accelerated (block) domain.
TOPOLOGY_LABELS = {
    "leaf": "network.topology.nvidia.com/leaf",
    "spine": "network.topology.nvidia.com/spine",
    "core": "network.topology.nvidia.com/core",
    "block": "network.topology.nvidia.com/accelerator",
}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"   # set by the API server
# PodTolerationRestriction: a namespace's pods may carry only tolerations this annotation
# (a JSON list) covers. The plugin is enabled on the API server (ADMISSION_PLUGINS).
TOLERATIONS_WHITELIST = "scheduler.alpha.kubernetes.io/tolerationsWhitelist"
ADMISSION_PLUGINS = ("NodeRestriction", "PodTolerationRestriction")   # kubeadm's + ours
# The ClusterRole a tenant's groups get, bound per namespace (a RoleBinding). Estate's own,
# not the built-in `edit`: `edit` may create, change and delete NetworkPolicies (a tenant
# could delete its default-deny, or add a policy that opens it), may impersonate the
# namespace's ServiceAccounts, and grows with every ClusterRole labelled aggregate-to-edit.
# This one lists what a tenant runs its work with and reads the boundaries without writing
# them (kubernetes.tenant_boundary_writable proves it from the rendered RBAC).
TENANT_ROLE = "estate-tenant-admin"
_WRITE = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
_READ = ["get", "list", "watch"]
TENANT_ROLE_RULES = (
    {"apiGroups": [""], "verbs": _WRITE, "resources": [
        "pods", "pods/attach", "pods/exec", "pods/portforward", "persistentvolumeclaims",
        "configmaps", "secrets", "services", "serviceaccounts", "replicationcontrollers"]},
    {"apiGroups": [""], "verbs": _READ, "resources": [
        "pods/log", "pods/status", "events", "endpoints", "resourcequotas", "limitranges",
        "namespaces"]},
    {"apiGroups": ["apps"], "verbs": _WRITE, "resources": [
        "deployments", "deployments/scale", "replicasets", "replicasets/scale",
        "statefulsets", "statefulsets/scale"]},
    {"apiGroups": ["batch"], "verbs": _WRITE, "resources": ["jobs", "cronjobs"]},
    {"apiGroups": ["autoscaling"], "verbs": _WRITE, "resources": ["horizontalpodautoscalers"]},
    {"apiGroups": ["policy"], "verbs": _WRITE, "resources": ["poddisruptionbudgets"]},
    {"apiGroups": ["networking.k8s.io"], "verbs": _READ, "resources": ["networkpolicies"]},
    {"apiGroups": ["events.k8s.io", "discovery.k8s.io"], "verbs": _READ,
     "resources": ["events", "endpointslices"]},
    {"apiGroups": ["kueue.x-k8s.io"], "verbs": _READ, "resources": [
        "workloads", "workloads/status", "localqueues", "localqueues/status"]},
)
# Kubernetes' built-in PriorityClasses, meant for cluster add-ons, never for tenants.
SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
# Pod Security Admission on every tenant namespace: baseline is enforced (no privileged
# pods, host namespaces or hostPath, so root in a tenant pod cannot reach a node's mounts),
# restricted is what users are warned and audited against. GPU pods pass both: the device
# plugin hands them devices without privileges.
POD_SECURITY_LABELS = {"pod-security.kubernetes.io/enforce": "baseline",
                       "pod-security.kubernetes.io/enforce-version": "latest",
                       "pod-security.kubernetes.io/warn": "restricted",
                       "pod-security.kubernetes.io/audit": "restricted"}
# DefaultTolerationSeconds gives every pod these; a whitelist must cover them.
DEFAULT_TOLERATIONS = ({"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                        "effect": "NoExecute"},
                       {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                        "effect": "NoExecute"})

RUNTIME_HANDLER = "nvidia"                 # containerd runtime name == RuntimeClass handler
NVIDIA_RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
# A pod must see only the GPUs it was allocated. The device plugin passes them as volume
# mounts (not the NVIDIA_VISIBLE_DEVICES variable), and the container toolkit ignores that
# variable from unprivileged containers, so `NVIDIA_VISIBLE_DEVICES=all` in a pod spec that
# tolerates the GPU taint gets nothing. Either half alone leaks or breaks allocation:
# kubernetes.gpu_isolation checks the rendered pair.
DEVICE_LIST_STRATEGY = "volume-mounts"
TOOLKIT_CONFIG = "kubernetes/nvidia/config.toml"
TOOLKIT_SETTINGS = {"accept-nvidia-visible-devices-envvar-when-unprivileged": False,
                    "accept-nvidia-visible-devices-as-volume-mounts": True}
# "Unprivileged" in the toolkit's sense: CAP_SYS_ADMIN missing from the container's bounding
# set (nvidia-container-toolkit v1.20.0 internal/config/image/privileged.go IsPrivileged),
# not Kubernetes' `privileged`. So the add-ons that must see every GPU of their node through
# NVIDIA_VISIBLE_DEVICES=all (the device plugin, GPU Feature Discovery) add SYS_ADMIN and
# drop every other capability instead of running privileged: upstream's Helm chart does the
# same (k8s-device-plugin v0.20.0 deployments/helm/nvidia-device-plugin/templates/
# _helpers.tpl, requiresCapSysAdmin: a volume-mounts device list strategy or MIG). Tenants
# cannot copy it: Pod Security baseline refuses SYS_ADMIN in their namespaces.
TOOLKIT_PRIVILEGE = "SYS_ADMIN"
# Their root filesystems stay writable: the toolkit's createContainer hooks write into the
# container's root (the ldcache; toolkit 1.20.0's update-application-profile hook makes
# /etc/nvidia/nvidia-application-profiles-rc.d and fails the container on EROFS,
# NVIDIA/nvidia-container-toolkit#2026, fixed after 1.20.0 by #2028; kserve/kserve#5711
# turned readOnlyRootFilesystem off for the same hook), and Estate does not pin the toolkit
# below those releases. Upstream's dcgm-exporter.yaml leaves it off for the same containers.
TOOLKIT_READ_ONLY_ROOT = False
CRI_SOCKET = "unix:///run/containerd/containerd.sock"
# containerd's package source (estate.kubernetes_releases.CONTAINERD_SUITE), installed by
# k8s_node before containerd itself
CONTAINERD_APT_LIST = "kubernetes/containerd/apt/debian-containerd.list"
CONTAINERD_APT_PREF = "kubernetes/containerd/apt/containerd.pref"
API_PORT = PORTS["kube-apiserver"]
DNS_DOMAIN = "cluster.local"
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
DEVICE_PLUGIN_NAMESPACE = "kube-system"
DEVICE_PLUGIN_NAME = "nvidia-device-plugin"
# NVIDIA's DCGM exporter (GPU metrics), vendored verbatim from its release's static
# manifest (k8s/dcgm-exporter/, see its README): the tag, the file's sha256, its port.
DCGM_VERSION = "4.5.3-4.8.2"               # NVIDIA/dcgm-exporter tag: DCGM 4.5.3, exporter 4.8.2
DCGM_MANIFEST = "k8s/dcgm-exporter/dcgm-exporter.yaml"
DCGM_SHA256 = "8f5b1580b55bc5a09a831184b0957e7671edb1e5c5f60cb17a0b4f58ffd76450"
DCGM_NAME = "dcgm-exporter"
# A container that mounts the host's /dev/null here gets every GPU from the container
# toolkit without privileges (accept-nvidia-visible-devices-as-volume-mounts; toolkit
# v1.20.0 internal/config/image/cuda_image.go, DeviceListAsVolumeMountsRoot)
ALL_GPUS_MOUNT = "/var/run/nvidia-container-devices/all"
DCGM_PORT = PORTS["dcgm-exporter"]
# GPU Feature Discovery (labels from the hardware), from the device plugin's repository at
# the plugin's tag, and node-feature-discovery, which publishes GFD's labels (GFD writes
# them to NFD's features.d; nfd-worker reads it, nfd-master labels the node). Vendored in
# k8s/gfd/ and k8s/nfd/ (see their READMEs).
GFD_MANIFEST = "k8s/gfd/gpu-feature-discovery-daemonset.yaml"
GFD_SHA256 = "b029b407280f7216e5de0663a36cb3c264af4fc27922d769446cca1d6e412633"
GFD_NAME = "gpu-feature-discovery"
NFD_VERSION = "v0.19.0"      # the NFD chart version the device plugin v0.20.0 chart depends on
NFD_MANIFEST = "k8s/nfd/node-feature-discovery.yaml"
NFD_SHA256 = "7d3af59a690ef540ffd8a4481c5a6f82d205f01c62931e401cde35d55e5e21df"
# kube-state-metrics (the telemetry plane's `kube-state-metrics` job), upstream's
# examples/standard/ at the tag, each file verbatim (k8s/kube-state-metrics/, see its README),
# in the order of upstream's kustomization.yaml; its port is the flow matrix's.
KSM_VERSION = "v2.20.0"
KSM_DIR = "k8s/kube-state-metrics"
KSM_SHA256 = {
    "cluster-role.yaml": "4447544443859be7f70deca48e4cb75d30b0b7da090cb9e914c9c08f97f7e62c",
    "cluster-role-binding.yaml": "afd513a9dba5ffe1a4128e4f612788dcccc314fb58afaef7a627c506229570df",
    "service-account.yaml": "91f24588ac4f8944b9211fccefdce9ee70434676e8a4a55a14d69bc7f68ae0a5",
    "deployment.yaml": "08d57682c0117bda50b8e894be1669001e49ce0ff3e60c11fccc6f56dfbc9f2e",
    "service.yaml": "efa9813fb6a6a2d11b509cf4f2eb0ab044935b4153b425e697d4b31c7f6f42a4",
}
KSM_NAME = "kube-state-metrics"
KSM_MANIFEST = "26-kube-state-metrics.yaml"    # after 25-storage, before the tenants
KSM_PORT = PORTS["kube-state-metrics"]         # the default flow's; a spec flow may replace it
KUEUE_API = "kueue.x-k8s.io/v1beta2"
# The Kueue release Estate installs (k8s/kueue/, vendored and checksummed) and the
# Kubernetes minors its README's e2e suites run on at that tag (kind 1.34, 1.35, 1.36).
KUEUE_VERSION = "v0.19.2"
KUEUE_TESTED = ((1, 34), (1, 36))          # first and last minor, inclusive
# Names in the release's manifests that Estate renders its own version of, and the file
# they are rendered into (applied before the queues).
KUEUE_INSTALL = "40-kueue-install.yaml"          # the release, the same for every spec
KUEUE_CONTROLLER = "41-kueue-controller.yaml"    # its configuration and Deployment
KUEUE_NAMESPACE = "kueue-system"
KUEUE_CONFIG_MAP = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
KUEUE_DEPLOYMENT = "kueue-controller-manager"
# The integrations whose objects could hold GPUs in a tenant namespace without a Kueue
# admission if Kueue did not manage them (built-in kinds; the others need their CRDs).
KUEUE_REQUIRED_FRAMEWORKS = ("batch/job", "pod", "deployment", "statefulset")
KUBEADM_API = "kubeadm.k8s.io/v1beta4"     # kubeadm >= 1.31
KIND_API = "kind.x-k8s.io/v1alpha4"
KIND_IMAGE = "kindest/node:v{version}"

# Secrets are never rendered: the k8s_worker / k8s_control_plane roles replace
# these placeholders at join time with values read from the first control plane
# (`kubeadm token create`, the CA public-key hash, `kubeadm certs certificate-key`).
TOKEN_PLACEHOLDER = "${KUBEADM_TOKEN}"
CA_HASH_PLACEHOLDER = "${KUBEADM_CA_CERT_HASH}"
CERT_KEY_PLACEHOLDER = "${KUBEADM_CERTIFICATE_KEY}"
PLACEHOLDERS = (TOKEN_PLACEHOLDER, CA_HASH_PLACEHOLDER, CERT_KEY_PLACEHOLDER)

# NFS ignores a PersistentVolume's capacity, but the API requires one.
NFS_NOMINAL_CAPACITY = "1Ti"
# fstab-only mount options that mean nothing to the kubelet's `mount -o`.
FSTAB_ONLY_OPTIONS = {"defaults", "_netdev", "auto", "noauto", "nofail", "user", "nouser",
                      "users"}


# --- per-node facts ----------------------------------------------------------------

@dataclass(frozen=True)
class KNode:
    name: str
    facts: GroupFacts                   # the node's group in estate.model
    control_plane: bool
    address: str | None                 # on spec.kubernetes.api_segment
    labels: dict = field(hash=False)
    taints: tuple = ()

    @property
    def group(self) -> NodeGroup:
        return self.facts.spec

    @property
    def cls(self) -> NodeClass | None:
        return self.facts.cls

    @property
    def gpus(self) -> int:
        return self.facts.class_gpus

    @property
    def is_gpu_worker(self) -> bool:
        """GPUs that tenants' workloads get (control planes keep their taint)."""
        return gpu_worker(self.facts, self.control_plane)


def gpu_worker(facts: GroupFacts, control_plane: bool) -> bool:
    """A node whose GPUs tenants get: the one rule labels, taints, flavors and the
    capacity model (estate.model.Model.schedulable) share."""
    return not control_plane and facts.kubernetes_worker and facts.gpus_per_node > 0


def sharing_for(estate: Estate, cls: NodeClass) -> tuple[str, GpuSharing]:
    """(device-plugin config name, sharing) for a node class."""
    k8s = estate.spec.kubernetes
    if cls.name in k8s.gpu_sharing_by_class:
        return cls.name, k8s.gpu_sharing_by_class[cls.name]
    return DEFAULT_SHARING_CONFIG, k8s.gpu_sharing


def mig_layout(cls: NodeClass | None, sharing: GpuSharing) -> dict[str, int]:
    """Profile -> instances per GPU where the class's GPUs run MIG on this plane, else {}."""
    if sharing.mode != "mig" or cls is None or cls.gpus is None:
        return {}
    return dict(sorted(cls.gpu.mig_profiles.items()))


def mig_resource(profile: str) -> str:
    return f"{MIG_RESOURCE_PREFIX}{profile}"


def replicas(sharing: GpuSharing, cls: NodeClass | None = None) -> int:
    """nvidia.com/gpu units the device plugin advertises per physical GPU.

    Under MIG (single strategy) that is the MIG devices each GPU is split into: the class's
    layout (gpus.mig_profiles) counts them, else the spec's mig_devices; without either
    quotas count whole GPUs (estate check warns about it).
    """
    if sharing.mode == "time-slicing":
        return sharing.replicas
    if sharing.mode == "mig" and sharing.mig_strategy == "single":
        return sum(mig_layout(cls, sharing).values()) or sharing.mig_devices or 1
    return 1


def advertised(cls: NodeClass, sharing: GpuSharing) -> dict[str, int]:
    """Resource -> units the device plugin advertises per physical GPU of the class: what
    quotas count in. Under the mixed strategy with a layout, one resource per profile."""
    layout = mig_layout(cls, sharing)
    if layout and sharing.mig_strategy == "mixed":
        return {mig_resource(p): n for p, n in layout.items()}
    return {GPU_RESOURCE: replicas(sharing, cls)}


def gpu_resource(name: str) -> bool:
    """Whether a resource name is one the device plugin advertises (what quotas fence)."""
    return name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)


def gpu_pools(estate: Estate) -> tuple[str, ...]:
    """The GPU pools (taint values, Kueue flavors) the plane's GPU workers are in."""
    return tuple(sorted({n.facts.gpu_model for n in plane_nodes(estate) if n.is_gpu_worker}))


def gpu_addon_tolerations(estate: Estate) -> list[dict]:
    """What a GPU-node add-on (DCGM exporter, GPU feature discovery) tolerates: exactly the
    pools' taints, one toleration each, so it lands on every GPU worker and on nothing a
    taint fences for another reason."""
    return [pool_toleration(p) for p in gpu_pools(estate)]


def gpu_taint(pool: str) -> dict:
    """The taint of a GPU worker in a pool (a Kueue flavor: the GPU model)."""
    return {"key": GPU_TAINT["key"], "value": pool, "effect": GPU_TAINT["effect"]}


def pool_toleration(pool: str) -> dict:
    return {"key": GPU_TAINT["key"], "operator": "Equal", "value": pool,
            "effect": GPU_TAINT["effect"]}


class _Member:
    """Which named hostlist holds a node: a scan of the lists for a small plane, a table
    for a large one (196,608 nodes x 8 lists took the fuzzer's mutant 6 s to scan; a
    10,000-node Slurm topology costs a Kubernetes plane of 4 nodes 35 ms to tabulate)."""

    def __init__(self, named: list[tuple[str, Hostlist]], lookups: int):
        tabulate = lookups * sum(len(hl.ranges) for _, hl in named) > \
            sum(len(hl) for _, hl in named)
        self._named = named
        self._table: dict[str, str] | None = None
        if tabulate:
            self._table = {}
            for key, hl in named:
                for name in hl:
                    self._table.setdefault(name, key)

    def get(self, name: str) -> str | None:
        if self._table is not None:
            return self._table.get(name)
        return next((key for key, hl in self._named if name in hl), None)


@lru_cache(maxsize=8)
def _topology(estate: Estate) -> tuple[dict, _Member, _Member]:
    """(child switch -> parent, node -> its switch by nodes:, node -> block), built once."""
    topo = estate.spec.topology
    parent = {child: sw.name for sw in topo.switches for child in sw.switches}
    lookups = sum(len(hl) for g, hl in zip(estate.spec.nodes, estate.group_hosts)
                  if g.plane == PLANE)
    leaf_of = _Member([(sw.name, _members(sw.nodes)) for sw in topo.switches
                       if sw.nodes], lookups)
    block_of = _Member([(b.name, _members(b.nodes)) for b in topo.blocks], lookups)
    return parent, leaf_of, block_of


def _members(expr: str) -> Hostlist:
    """A switch's or block's nodes; none where the list does not parse: that is the
    topology validators' finding at its spec path, not a crash of whatever derives the
    Kubernetes plane (the flow matrix does, for every spec)."""
    try:
        return Hostlist.parse(expr)
    except HostlistError:
        return Hostlist([])


def switch_path(estate: Estate, name: str, group: NodeGroup) -> dict[str, str]:
    """A node's leaf, spine and core switches and its block, as topology.conf has them."""
    parent, leaf_of, block_of = _topology(estate)
    level = group.switch or leaf_of.get(name)
    out: dict[str, str] = {}
    for key in ("leaf", "spine", "core"):
        if level is None:
            break
        out[key] = level
        level = parent.get(level)
    block = block_of.get(name)
    if block:
        out["block"] = block
    return out


def _gpu_labels(estate: Estate, facts: GroupFacts) -> dict[str, str]:
    """The labels a GPU worker of this group carries (the same for each of its nodes)."""
    cls = facts.cls
    gpu = cls.gpu_kinds[0]   # one kind on Kubernetes workers (kubernetes.gpu_kinds)
    config, sharing = sharing_for(estate, cls)
    labels = {
        GPU_PRESENT: "true",
        GPU_PRODUCT: gpu.product,
        GPU_COUNT: str(gpu.count),
        POOL_LABEL: gpu.model,
        GPU_REPLICAS: str(replicas(sharing, cls)),
        DEVICE_PLUGIN_CONFIG_LABEL: config,
    }
    if mig_layout(cls, sharing):
        labels[MIG_CONFIG_LABEL] = cls.name
    return labels


def node_labels(estate: Estate, name: str, facts: GroupFacts, control_plane: bool,
                gpu_labels: dict[str, str] | None = None) -> dict[str, str]:
    labels = {TOPOLOGY_LABELS[k]: v for k, v in switch_path(estate, name, facts.spec).items()}
    if gpu_worker(facts, control_plane):
        labels.update(gpu_labels if gpu_labels is not None else _gpu_labels(estate, facts))
    labels.update(facts.spec.labels)
    return dict(sorted(labels.items()))


def node_taints(facts: GroupFacts, control_plane: bool) -> tuple:
    if control_plane:
        return (CONTROL_PLANE_TAINT,)
    return (gpu_taint(facts.gpu_model),) if gpu_worker(facts, control_plane) else ()


@lru_cache(maxsize=8)
def plane_nodes(estate: Estate) -> tuple[KNode, ...]:
    """Every Kubernetes-plane node, in spec order, control planes first."""
    k8s = estate.spec.kubernetes
    out = []
    control = set(k8s.control_plane)
    for facts in model(estate).groups:
        if facts.plane != PLANE:
            continue
        gpu = _gpu_labels(estate, facts) if gpu_worker(facts, False) else None
        taints = {cp: node_taints(facts, cp) for cp in (False, True)}
        for name in facts.hosts:
            cp = name in control
            addr = estate.address(name, k8s.api_segment)
            out.append(KNode(name, facts, cp, str(addr) if addr else None,
                             node_labels(estate, name, facts, cp, gpu), taints[cp]))
    return tuple(sorted(out, key=lambda n: not n.control_plane))


def control_planes(estate: Estate) -> list[KNode]:
    return list(_control_planes(estate))


@lru_cache(maxsize=8)
def _control_planes(estate: Estate) -> tuple[KNode, ...]:
    """Cached: every kubeadm join file asks for the API endpoint (8,000 workers: 8,000 scans
    of the plane's nodes)."""
    return tuple(n for n in plane_nodes(estate) if n.control_plane)


def hostlist(nodes) -> Hostlist:
    return Hostlist.from_names(n.name for n in nodes)


def api_host(estate: Estate) -> str | None:
    """Where clients and joining nodes reach the API: the spec's VIP (kube-vip moves it to a
    live control plane), else the only control plane's address on the API segment."""
    vip = estate.spec.kubernetes.api_vip
    return str(vip) if vip else control_planes(estate)[0].address


def api_endpoint(estate: Estate) -> str:
    """kubeadm's controlPlaneEndpoint, and every join file's apiServerEndpoint."""
    return f"{api_host(estate)}:{API_PORT}"


# --- an HA control plane: kube-vip, stacked etcd's snapshots, certificate renewal ----------

# kube-vip (https://github.com/kube-vip/kube-vip, tag v1.2.3, commit
# 7ce55caffa2789b4165072bbef7c7d376000995e): a static pod on every control plane, ARP mode,
# leader election on a Lease; the settings are those `kube-vip manifest pod --arp
# --controlplane --leaderElection` writes (pkg/kubevip/config_generator.go at that tag).
KUBE_VIP_VERSION = "v1.2.3"
KUBE_VIP_IMAGE = f"ghcr.io/kube-vip/kube-vip:{KUBE_VIP_VERSION}"
KUBE_VIP_MANIFEST = "/etc/kubernetes/manifests/kube-vip.yaml"
KUBE_VIP_LEASE = "plndr-cp-lock"     # kube-vip's default lease name
# kube-vip's defaults (cmd/kube-vip.go): lease 15 s, renew deadline 10 s, retry 2 s
KUBE_VIP_LEASE_TIMES = {"vip_leaseduration": "15", "vip_renewdeadline": "10",
                        "vip_retryperiod": "2"}
ADMIN_CONF = "/etc/kubernetes/admin.conf"
# Since Kubernetes 1.29 admin.conf is bound to cluster-admin only once kubeadm init has
# created that binding, through the API kube-vip is to provide: during init the first
# control plane's kube-vip uses super-admin.conf (kube-vip issue #684), then admin.conf.
SUPER_ADMIN_CONF = "/etc/kubernetes/super-admin.conf"
KUBE_VIP_PATH = "kubernetes/kube-vip/kube-vip.yaml"
KUBE_VIP_INIT_PATH = "kubernetes/kube-vip/kube-vip-init.yaml"

# Stacked etcd (kubeadm's default): one member per control plane, its certificates under
# /etc/kubernetes/pki/etcd. The snapshot runs etcdctl inside the etcd static pod's own
# container (crictl exec), so the client is the server's release and no package is needed;
# /var/lib/etcd is the pod's host-path data directory, hence where the file appears.
PKI_DIR = "/etc/kubernetes/pki"
ETCD_PKI = f"{PKI_DIR}/etcd"
# The cluster CA: kubeadm init signs with a ca.crt and ca.key it finds here instead of making
# its own ("custom certificates"), and the API server trusts the client certificates it
# signed (--client-ca-file). Further control planes get it through upload-certs.
CLUSTER_CA_CERT = f"{PKI_DIR}/ca.crt"
CLUSTER_CA_KEY = f"{PKI_DIR}/ca.key"
ETCD_DATA = "/var/lib/etcd"
ETCD_SNAPSHOT_DIR = "/var/backups/etcd"
ETCD_SNAPSHOTS_KEPT = 7
ETCD_SNAPSHOT_SCHEDULE = "daily"
# kubeadm's certificates are valid one year (its CA ten); `kubeadm certs renew all` each
# month keeps every certificate at least eleven months from expiry, and a missed run or
# two costs nothing. estate check refuses a renewal schedule sparser than this:
CERT_VALIDITY_DAYS = 365
CERT_RENEW_SCHEDULE = "monthly"
CERT_RENEW_MAX_DAYS = 92
# systemd's calendar shorthands (systemd.time(7)) and the longest gap each leaves
CALENDAR_DAYS = {"daily": 1, "weekly": 7, "monthly": 31, "quarterly": 92,
                 "semiannually": 184, "yearly": 366, "annually": 366}
# The control-plane static pods `kubeadm certs renew` leaves on old certificates until they
# restart (kubeadm's certificate-management page); kube-vip reads admin.conf at start.
STATIC_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
               "kube-vip")
# The kubelet's fileCheckFrequency (20 s): how long a moved-out manifest takes to stop its pod
STATIC_POD_GRACE_S = 20
TIMERS = {"etcd-snapshot": ETCD_SNAPSHOT_SCHEDULE, "cert-renew": CERT_RENEW_SCHEDULE}
# where a tenant is granted the bridge: the approval of the minters' own certificate
# requests (estate.render.kubernetes.approve_script), every five minutes
BRIDGE_APPROVE = "bridge-approve"
SYSTEMD_UNITS = "kubernetes/systemd/"
SBIN = "kubernetes/sbin/"


def timer_unit(name: str) -> str:
    return f"estate-{name}.timer"


def service_unit(name: str) -> str:
    return f"estate-{name}.service"


# --- GPU flavors and tenant quotas -------------------------------------------------

# --- node allocatable: what the scheduler may hand out on a node ----------------------

# The kubelet's default hard-eviction thresholds for the disk signals: setting evictionHard
# replaces the default map, so Estate writes them back next to its memory threshold.
EVICTION_DISK_DEFAULTS = {"nodefs.available": "10%", "nodefs.inodesFree": "5%",
                          "imagefs.available": "15%"}
MEMORY_SIGNAL = "memory.available"


@dataclass(frozen=True)
class Allocatable:
    cpu_millis: int
    memory_mi: int


def _reservation(r) -> dict[str, str]:
    return {"cpu": f"{r.cpu_millicores}m", "memory": f"{r.memory_mb}Mi"}


def kubelet_settings(estate: Estate) -> dict:
    """The KubeletConfiguration fields that set node allocatable (kubeadm hands the one
    KubeletConfiguration to every node), from the spec's kubernetes.kubelet, and
    seccompDefault: every container without a seccomp profile of its own gets the runtime's
    default instead of Unconfined (GA since Kubernetes 1.27), tenants' pods included."""
    kl = estate.spec.kubernetes.kubelet
    return {"kubeReserved": _reservation(kl.kube_reserved),
            "systemReserved": _reservation(kl.system_reserved),
            "evictionHard": {MEMORY_SIGNAL: f"{kl.eviction_memory_mb}Mi",
                             **EVICTION_DISK_DEFAULTS},
            "seccompDefault": True}


def allocatable(estate: Estate, cls: NodeClass) -> Allocatable:
    """The kubelet's node allocatable for a class: capacity - kubeReserved - systemReserved -
    the memory eviction threshold (clamped at zero: kubernetes.reserved_exceeds_capacity
    reports a class the reservations swallow)."""
    kl = estate.spec.kubernetes.kubelet
    cpu = cls.cpus * 1000 - kl.kube_reserved.cpu_millicores - kl.system_reserved.cpu_millicores
    mem = (cls.memory_mb - kl.kube_reserved.memory_mb - kl.system_reserved.memory_mb
           - kl.eviction_memory_mb)
    return Allocatable(max(cpu, 0), max(mem, 0))


def cpu_quantity(millis: int) -> int | str:
    """A CPU amount as Kubernetes writes it: whole cores as an integer, else millicores."""
    return millis // 1000 if millis % 1000 == 0 else f"{millis}m"


# What the pods of Estate's DaemonSets request on every GPU worker (millicores, MiB), each
# pod as the kubelet counts it: the larger of its init containers' requests and its
# containers' sum. Tenants' CPU and memory quotas split only what is left of allocatable
# (flavors), so no quota promises what a DaemonSet already holds. None requests a GPU: the
# plugin serves them and the DCGM exporter reads them through the toolkit's volume-mount
# request. kubernetes.quota_over_daemonsets reads the rendered DaemonSets, so a figure here
# that falls behind a manifest fails the check.
DAEMONSET_REQUESTS = {
    # config-manager 10m/32Mi beside the plugin 50m/64Mi (build_device_plugin's estimate)
    "nvidia-device-plugin": (60, 96),
    "dcgm-exporter": (100, 128),          # upstream's dcgm-exporter.yaml (k8s/dcgm-exporter/)
    "nfd-worker": (5, 64),                # upstream's node-feature-discovery v0.19.0 (k8s/nfd/)
    # estate.render.gpu_addons; one DaemonSet per device-plugin config, one pod per node
    "gpu-feature-discovery": (10, 64),
}


def daemonset_reserve() -> Allocatable:
    """What the DaemonSets take from each GPU worker's allocatable (DAEMONSET_REQUESTS)."""
    return Allocatable(sum(c for c, _ in DAEMONSET_REQUESTS.values()),
                       sum(m for _, m in DAEMONSET_REQUESTS.values()))


@dataclass(frozen=True)
class Flavor:
    """One Kueue ResourceFlavor: the GPU nodes of one model."""
    name: str                 # the GPU model, e.g. l4
    product: str
    nodes: tuple[str, ...]
    gpus: int                 # physical GPUs
    resources: dict           # resource -> units the device plugin advertises (all nodes)
    cpu_millis: int           # allocatable (kubelet reservations deducted) less the DaemonSets'
    memory_mi: int            # requests on every node (daemonset_reserve): the tenants' share
    max_per_node: dict        # resource -> the most units one node advertises

    @property
    def units(self) -> int:
        """nvidia.com/gpu the device plugin advertises (none under MIG's mixed strategy)."""
        return self.resources.get(GPU_RESOURCE, 0)

    @property
    def node_labels(self) -> dict[str, str]:
        return {POOL_LABEL: self.name}


@lru_cache(maxsize=8)
def flavors(estate: Estate) -> tuple[Flavor, ...]:
    """Per GPU model, its workers' totals; summed per group (a group shares one class)."""
    acc: dict[str, dict] = {}
    control = set(estate.spec.kubernetes.control_plane)
    for facts in model(estate).groups:
        if facts.plane != PLANE or not gpu_worker(facts, False):
            continue
        names = [name for name in facts.hosts if name not in control]
        cls, gpu = facts.cls, facts.cls.gpu_kinds[0]   # one kind: kubernetes.gpu_kinds
        per_node = {r: gpu.count * n
                    for r, n in advertised(cls, sharing_for(estate, cls)[1]).items()}
        f = acc.setdefault(gpu.model, {"product": gpu.product, "nodes": [], "gpus": 0,
                                       "units": {}, "cpu": 0, "mem": 0, "max": {}})
        f["nodes"].extend(names)
        f["gpus"] += gpu.count * len(names)
        free, held = allocatable(estate, cls), daemonset_reserve()
        f["cpu"] += max(free.cpu_millis - held.cpu_millis, 0) * len(names)
        f["mem"] += max(free.memory_mi - held.memory_mi, 0) * len(names)
        for r, n in per_node.items() if names else ():
            f["units"][r] = f["units"].get(r, 0) + n * len(names)
            f["max"][r] = max(f["max"].get(r, 0), n)
    return tuple(Flavor(m, f["product"], tuple(f["nodes"]), f["gpus"], dict(sorted(
        f["units"].items())), f["cpu"], f["mem"], f["max"]) for m, f in acc.items())


def apportion(total: int, weights: list[int], whole: int | None = None) -> list[int]:
    """Shares of total for weights out of whole (default: their sum), by largest remainder.

    The shares sum exactly to total * sum(weights) / whole, rounded down, so quotas that
    claim a whole flavor split it exactly; ties go to the earlier weight (deterministic).
    """
    claimed = sum(weights)
    if claimed <= 0:
        return [0] * len(weights)
    whole = max(whole or claimed, claimed)
    target = total * claimed // whole
    # floor of each exact share total*w/whole, then the rest by largest remainder:
    # every share stays within one of its exact value
    shares = [total * w // whole for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in order[: target - sum(shares)]:
        shares[i] += 1
    return shares


@dataclass(frozen=True)
class Quota:
    flavor: str
    gpus: int          # physical GPUs from the spec
    resources: dict    # GPU resource -> nominal quota (nvidia.com/gpu, nvidia.com/mig-*)
    cpu_millis: int    # of the flavor's allocatable
    memory_mi: int

    @property
    def units(self) -> int:
        return self.resources.get(GPU_RESOURCE, 0)


@lru_cache(maxsize=8)
def tenant_quotas(estate: Estate) -> dict[str, tuple[Quota, ...]]:
    """Tenant -> its quota in each flavor it names.

    GPU units, and the CPU and memory of a flavor that its DaemonSets leave (Flavor), are
    split in proportion to the GPUs each tenant is given out of the flavor's GPUs, so a
    tenant's CPU share follows its GPU share, and quotas that claim all of a flavor's GPUs
    add up to what is left of it exactly. GPUs no tenant claims stay out of every queue (estate check warns).
    """
    tenants = estate.spec.kubernetes.tenants
    out: dict[str, list[Quota]] = {t.name: [] for t in tenants}
    for f in flavors(estate):
        named = [t for t in tenants if f.name in t.gpus]
        weights = [t.gpus[f.name] for t in named]
        units = {r: apportion(n, weights, f.gpus) for r, n in f.resources.items()}
        split = zip(named, apportion(f.cpu_millis, weights, f.gpus),
                    apportion(f.memory_mi, weights, f.gpus))
        for i, (t, cpus, mem) in enumerate(split):
            out[t.name].append(Quota(f.name, t.gpus[f.name],
                                     {r: shares[i] for r, shares in units.items()}, cpus, mem))
    return {name: tuple(q) for name, q in out.items()}


def tenant_resources(estate: Estate, tenant: Tenant) -> dict[str, int]:
    """A tenant's share of each GPU resource: its nominal quotas, summed over its flavors,
    nvidia.com/gpu always present (zero where its pools advertise MIG devices only). Its
    ResourceQuota is exactly this, so the tenants' ResourceQuotas add up to the GPUs the
    spec hands out and never to more (each used to allow its whole cohort's quota)."""
    out = {GPU_RESOURCE: 0}
    for q in tenant_quotas(estate)[tenant.name]:
        for r, n in q.resources.items():
            out[r] = out.get(r, 0) + n
    return dict(sorted(out.items()))


def priority_class(tenant: Tenant) -> str:
    return f"tenant-{tenant.name}"


def tolerations_whitelist(estate: Estate, tenant: Tenant) -> list[dict]:
    """The tolerations a tenant's pods may carry: the pools it holds quota in, and the two
    every pod gets. Nothing else, so its pods cannot tolerate another pool's taint."""
    pools = [q.flavor for q in tenant_quotas(estate)[tenant.name]]
    return list(DEFAULT_TOLERATIONS) + [pool_toleration(p) for p in pools]


# --- the identity a tenant's pods run as -------------------------------------------------

# supplementalGroupsPolicy: Strict keeps the groups an image's /etc/group gives its user out
# of a pod's processes. The API server keeps the field from 1.33 (beta, on by default; GA in
# 1.35; before that it drops it, so requiring it would refuse every pod); containerd 2 runs it.
STRICT_GROUPS_SINCE = (1, 33)


@dataclass(frozen=True)
class RunAsIds:
    """What a tenant's run_as grants, as (name, id) pairs in the spec's order."""
    users: tuple[tuple[str, int], ...]
    groups: tuple[tuple[str, int], ...]   # the granted groups, then the users' primary groups


def run_as_ids(estate: Estate, tenant: Tenant) -> RunAsIds | None:
    """None without a grant. Names spec.identity does not define are left out (the identity
    validators report them): a grant of unknown names admits no pod, never any."""
    if tenant.run_as is None:
        return None
    ident = estate.spec.identity
    users = {u.name: u for u in ident.users}
    gids = {g.name: g.gid for g in ident.groups}
    granted = [users[n] for n in dict.fromkeys(tenant.run_as.users) if n in users]
    groups = dict.fromkeys([*tenant.run_as.groups, *(u.group for u in granted)])
    return RunAsIds(tuple((u.name, u.uid) for u in granted),
                    tuple((g, gids[g]) for g in groups if g in gids))


# --- people's tokens: the API server's AuthenticationConfiguration (kubernetes.oidc) --------

AUTH_CONFIG = "kubernetes/kubeadm/authentication-config.yaml"
AUTH_CONFIG_DIR = "/etc/kubernetes/estate"   # mounted read-only into the API server's pod
AUTH_CONFIG_PATH = f"{AUTH_CONFIG_DIR}/authentication-config.yaml"
# apiserver.config.k8s.io's AuthenticationConfiguration: v1beta1 from Kubernetes 1.30
# (KEP-3331 beta, "Structured Authentication Configuration Moves to Beta", kubernetes.io
# blog 2024-04-25), v1 from 1.34 (the feature stable and on by default; the 1.34 docs'
# example names apiserver.config.k8s.io/v1). Estate renders for 1.31 on (MIN_MINOR).
AUTH_API_V1_MINOR = 34


def auth_api(version: str) -> str:
    minor = int(version.split(".")[1])
    return "apiserver.config.k8s.io/" + ("v1" if minor >= AUTH_API_V1_MINOR else "v1beta1")


def authentication_config(oidc, version: str) -> dict:
    """One JWT authenticator for the spec's issuer. Both prefixes are explicitly empty (the
    API requires a prefix with a claim): a token's username is the directory's uid and its
    groups the directory's groups, so a RoleBinding to Group ops binds the directory's ops."""
    return {"apiVersion": auth_api(version), "kind": "AuthenticationConfiguration",
            "jwt": [{"issuer": {"url": oidc.issuer, "audiences": list(oidc.audiences),
                                **({"audienceMatchPolicy": "MatchAny"}
                                   if len(oidc.audiences) > 1 else {})},
                     "claimMappings": {
                         "username": {"claim": oidc.username_claim, "prefix": ""},
                         "groups": {"claim": oidc.groups_claim, "prefix": ""}}}]}


def auth_volume() -> dict:
    return {"name": "estate-authentication", "hostPath": AUTH_CONFIG_DIR,
            "mountPath": AUTH_CONFIG_DIR, "readOnly": True, "pathType": "Directory"}
