"""The Kubernetes plane from the spec: kubeadm, containerd, device plugin, tenants, Kueue, kind.

Everything derived (node labels and taints, device-plugin configs, quotas, the
network policies a tenant gets) is computed here once; the templates in
k8s/templates/ only lay it out. Validators in estate.check.kubernetes import
these facts instead of recomputing them.

The governance mirrors the Slurm side: a node's fabric position (leaf, spine,
core, block) comes from the same spec.topology that topology.conf is written
from, and tenants' GPU quotas must add up to exactly the GPUs the spec gives
the plane.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import yaml

from estate.render.artifacts import Artifact
from estate.render.templates import render_template
from estate.spec.hostlist import Hostlist
from estate.spec.model import GpuSharing, NodeClass, NodeGroup, Tenant
from estate.spec.resolved import Estate

PLANE = "kubernetes"
TEMPLATES = "k8s/templates"

# --- names Kubernetes, NVIDIA and Kueue define ----------------------------------

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
GPU_PRESENT = "nvidia.com/gpu.present"
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_COUNT = "nvidia.com/gpu.count"
GPU_REPLICAS = "nvidia.com/gpu.replicas"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
DEFAULT_SHARING_CONFIG = "default"
# NVIDIA topograph's keys: tree levels and the accelerated (block) domain.
TOPOLOGY_LABELS = {
    "leaf": "network.topology.nvidia.com/leaf",
    "spine": "network.topology.nvidia.com/spine",
    "core": "network.topology.nvidia.com/core",
    "block": "network.topology.nvidia.com/accelerator",
}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"   # set by the API server

RUNTIME_HANDLER = "nvidia"                 # containerd runtime name == RuntimeClass handler
NVIDIA_RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
CRI_SOCKET = "unix:///run/containerd/containerd.sock"
API_PORT = 6443
DNS_DOMAIN = "cluster.local"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"          # the sandbox image kubeadm 1.31 uses
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
DEVICE_PLUGIN_NAMESPACE = "kube-system"
DEVICE_PLUGIN_NAME = "nvidia-device-plugin"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
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
    group: NodeGroup
    cls: NodeClass | None
    control_plane: bool
    address: str | None                 # on spec.kubernetes.api_segment
    labels: dict = field(hash=False)
    taints: tuple = ()

    @property
    def gpus(self) -> int:
        return self.cls.gpu_count if self.cls else 0

    @property
    def is_gpu_worker(self) -> bool:
        """GPUs that tenants' workloads get (control planes keep their taint)."""
        return not self.control_plane and "k8s_worker" in self.group.roles and self.gpus > 0


def sharing_for(estate: Estate, cls: NodeClass) -> tuple[str, GpuSharing]:
    """(device-plugin config name, sharing) for a node class."""
    k8s = estate.spec.kubernetes
    if cls.name in k8s.gpu_sharing_by_class:
        return cls.name, k8s.gpu_sharing_by_class[cls.name]
    return DEFAULT_SHARING_CONFIG, k8s.gpu_sharing


def replicas(sharing: GpuSharing) -> int:
    """nvidia.com/gpu units the device plugin advertises per physical GPU.

    Under MIG the count depends on the MIG layout, which the spec does not
    describe; quotas then count whole GPUs (estate check warns about it).
    """
    return sharing.replicas if sharing.mode == "time-slicing" else 1


@lru_cache(maxsize=8)
def _topology(estate: Estate) -> tuple[dict, list, list]:
    """(child switch -> parent, [(switch, its extra nodes)], [(block, its nodes)]), parsed once."""
    topo = estate.spec.topology
    parent = {child: sw.name for sw in topo.switches for child in sw.switches}
    extra = [(sw.name, Hostlist.parse(sw.nodes)) for sw in topo.switches if sw.nodes]
    blocks = [(b.name, Hostlist.parse(b.nodes)) for b in topo.blocks]
    return parent, extra, blocks


def switch_path(estate: Estate, name: str, group: NodeGroup) -> dict[str, str]:
    """A node's leaf, spine and core switches and its block, as topology.conf has them."""
    parent, extra, blocks = _topology(estate)
    leaf = group.switch or next((sw for sw, hosts in extra if name in hosts), None)
    out: dict[str, str] = {}
    level = leaf
    for key in ("leaf", "spine", "core"):
        if level is None:
            break
        out[key] = level
        level = parent.get(level)
    block = next((b for b, hosts in blocks if name in hosts), None)
    if block:
        out["block"] = block
    return out


def node_labels(estate: Estate, name: str, group: NodeGroup, cls: NodeClass | None,
                control_plane: bool) -> dict[str, str]:
    labels = {TOPOLOGY_LABELS[k]: v for k, v in switch_path(estate, name, group).items()}
    if cls and cls.gpus and not control_plane and "k8s_worker" in group.roles:
        config, sharing = sharing_for(estate, cls)
        labels.update({
            GPU_PRESENT: "true",
            GPU_PRODUCT: cls.gpus.product,
            GPU_COUNT: str(cls.gpus.count),
            GPU_REPLICAS: str(replicas(sharing)),
            DEVICE_PLUGIN_CONFIG_LABEL: config,
        })
    labels.update(group.labels)
    return dict(sorted(labels.items()))


def node_taints(group: NodeGroup, cls: NodeClass | None, control_plane: bool) -> tuple:
    if control_plane:
        return (CONTROL_PLANE_TAINT,)
    return (GPU_TAINT,) if cls and cls.gpus and "k8s_worker" in group.roles else ()


@lru_cache(maxsize=8)
def plane_nodes(estate: Estate) -> tuple[KNode, ...]:
    """Every Kubernetes-plane node, in spec order, control planes first."""
    k8s = estate.spec.kubernetes
    out = []
    for group, hosts in zip(estate.spec.nodes, estate.group_hosts):
        if group.plane != PLANE:
            continue
        cls = estate.node_class(group)
        for name in hosts:
            cp = name in k8s.control_plane
            addr = estate.address(name, k8s.api_segment)
            out.append(KNode(name, group, cls, cp, str(addr) if addr else None,
                             node_labels(estate, name, group, cls, cp),
                             node_taints(group, cls, cp)))
    return tuple(sorted(out, key=lambda n: not n.control_plane))


def control_planes(estate: Estate) -> list[KNode]:
    return [n for n in plane_nodes(estate) if n.control_plane]


def hostlist(nodes) -> Hostlist:
    return Hostlist.from_names(n.name for n in nodes)


def api_endpoint(estate: Estate) -> str:
    """The first control plane's API address: the spec has no load-balanced VIP."""
    first = control_planes(estate)[0]
    return f"{first.address}:{API_PORT}"


# --- GPU flavors and tenant quotas -------------------------------------------------

@dataclass(frozen=True)
class Flavor:
    """One Kueue ResourceFlavor: the GPU nodes of one model."""
    name: str                 # the GPU model, e.g. l4
    product: str
    nodes: tuple[str, ...]
    gpus: int                 # physical GPUs
    units: int                # nvidia.com/gpu the device plugin advertises
    cpus: int
    memory_mi: int
    max_units_per_node: int

    @property
    def node_labels(self) -> dict[str, str]:
        return {GPU_PRODUCT: self.product}


@lru_cache(maxsize=8)
def flavors(estate: Estate) -> tuple[Flavor, ...]:
    acc: dict[str, dict] = {}
    for n in plane_nodes(estate):
        if not n.is_gpu_worker:
            continue
        gpu = n.cls.gpus
        units = gpu.count * replicas(sharing_for(estate, n.cls)[1])
        f = acc.setdefault(gpu.model, {"product": gpu.product, "nodes": [], "gpus": 0,
                                       "units": 0, "cpus": 0, "mem": 0, "max": 0})
        f["nodes"].append(n.name)
        f["gpus"] += gpu.count
        f["units"] += units
        f["cpus"] += n.cls.cpus
        f["mem"] += n.cls.memory_mb
        f["max"] = max(f["max"], units)
    return tuple(Flavor(m, f["product"], tuple(f["nodes"]), f["gpus"], f["units"], f["cpus"],
                        f["mem"], f["max"]) for m, f in acc.items())


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
    units: int         # nvidia.com/gpu nominal quota
    cpus: int
    memory_mi: int


@lru_cache(maxsize=8)
def tenant_quotas(estate: Estate) -> dict[str, tuple[Quota, ...]]:
    """Tenant -> its quota in each flavor it names.

    GPU units, CPUs and memory of a flavor are split in proportion to the GPUs
    each tenant is given out of the flavor's GPUs, so a tenant's CPU share follows
    its GPU share, and quotas that claim all of a flavor's GPUs add up to it
    exactly. GPUs no tenant claims stay out of every queue (estate check warns).
    """
    tenants = estate.spec.kubernetes.tenants
    out: dict[str, list[Quota]] = {t.name: [] for t in tenants}
    for f in flavors(estate):
        named = [t for t in tenants if f.name in t.gpus]
        weights = [t.gpus[f.name] for t in named]
        split = zip(named, apportion(f.units, weights, f.gpus),
                    apportion(f.cpus, weights, f.gpus), apportion(f.memory_mi, weights, f.gpus))
        for t, units, cpus, mem in split:
            out[t.name].append(Quota(f.name, t.gpus[f.name], units, cpus, mem))
    return {name: tuple(q) for name, q in out.items()}


def borrowable_units(estate: Estate, tenant: Tenant) -> int:
    """The most nvidia.com/gpu Kueue can admit for a tenant: its cohort's quota in its flavors."""
    quotas = tenant_quotas(estate)
    mine = {q.flavor for q in quotas[tenant.name]}
    return sum(q.units for t in estate.spec.kubernetes.tenants if t.cohort == tenant.cohort
               for q in quotas[t.name] if q.flavor in mine)


def priority_class(tenant: Tenant) -> str:
    return f"tenant-{tenant.name}"


# --- layout helpers ----------------------------------------------------------------

class _Dumper(yaml.SafeDumper):
    """Multi-line strings (embedded YAML, configs) as literal blocks, for readable diffs."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar(
    "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def to_yaml(data, indent: int = 0) -> str:
    """Block YAML for nested data, indented to sit under a template key."""
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=1000)
    pad = " " * indent
    return "\n".join(pad + line if line else line for line in text.rstrip("\n").split("\n"))


def _render(template: str, estate: Estate, source: str, **ctx) -> bytes:
    return render_template(f"{TEMPLATES}/{template}", {
        "spec": estate.spec, "k8s": estate.spec.kubernetes, "source": source or estate.spec.name,
        "y": to_yaml, **ctx})


def kubelet_args(node: KNode) -> list[dict]:
    args = []
    if node.address:
        args.append({"name": "node-ip", "value": node.address})
    if node.labels:
        args.append({"name": "node-labels",
                     "value": ",".join(f"{k}={v}" for k, v in node.labels.items())})
    return args


def node_registration(node: KNode) -> dict:
    return {"name": node.name, "criSocket": CRI_SOCKET, "taints": list(node.taints),
            "kubeletExtraArgs": kubelet_args(node)}


# --- builders: one per component -----------------------------------------------------

def build_kubeadm(estate: Estate, source: str) -> list[Artifact]:
    """init.yaml for the first control plane; a JoinConfiguration for every other node."""
    cps = control_planes(estate)
    first = cps[0]
    init = _render("kubeadm-init.yaml.j2", estate, source, node=first,
                   registration=node_registration(first), endpoint=api_endpoint(estate),
                   api_port=API_PORT, kubeadm_api=KUBEADM_API, dns_domain=DNS_DOMAIN,
                   cert_sans=[n.address for n in cps if n.address],
                   cert_key=CERT_KEY_PLACEHOLDER if len(cps) > 1 else None,
                   version=f"v{estate.spec.kubernetes.version}")
    out = [Artifact("kubernetes/kubeadm/init.yaml", init, hostlist([first]), PLANE)]
    for node in plane_nodes(estate):
        if node is first:
            continue
        text = _render("kubeadm-join.yaml.j2", estate, source, node=node,
                       registration=node_registration(node), endpoint=api_endpoint(estate),
                       api_port=API_PORT, kubeadm_api=KUBEADM_API, token=TOKEN_PLACEHOLDER,
                       ca_hash=CA_HASH_PLACEHOLDER,
                       cert_key=CERT_KEY_PLACEHOLDER if node.control_plane else None)
        out.append(Artifact(f"kubernetes/kubeadm/join/{node.name}.yaml", text,
                            hostlist([node]), PLANE))
    return out


def build_containerd(estate: Estate, source: str) -> list[Artifact]:
    """systemd cgroups everywhere; GPU nodes also get the NVIDIA runtime, as default."""
    nodes = plane_nodes(estate)
    out = []
    for gpu, path in ((False, "config.toml"), (True, "config-gpu.toml")):
        consumers = [n for n in nodes if (n.gpus > 0) == gpu]
        if not consumers:
            continue
        text = _render("containerd-config.toml.j2", estate, source, gpu=gpu,
                       pause_image=PAUSE_IMAGE, handler=RUNTIME_HANDLER,
                       nvidia_binary=NVIDIA_RUNTIME_BINARY)
        out.append(Artifact(f"kubernetes/containerd/{path}", text, hostlist(consumers), PLANE))
    return out


def device_plugin_configs(estate: Estate) -> dict[str, dict]:
    """Config name -> the device plugin's config (api/config/v1) for the plane's GPU classes."""
    k8s = estate.spec.kubernetes
    used = {DEFAULT_SHARING_CONFIG: k8s.gpu_sharing}
    for n in plane_nodes(estate):
        if n.is_gpu_worker:
            name, sharing = sharing_for(estate, n.cls)
            used[name] = sharing
    return {name: _plugin_config(s) for name, s in sorted(used.items())}


def _plugin_config(sharing: GpuSharing) -> dict:
    mig = sharing.mig_strategy if sharing.mode == "mig" else "none"
    config = {"version": "v1", "flags": {"migStrategy": mig, "failOnInitError": True}}
    if sharing.mode == "time-slicing":
        config["sharing"] = {"timeSlicing": {"resources": [
            {"name": GPU_RESOURCE, "replicas": sharing.replicas}]}}
    return config


def build_device_plugin(estate: Estate, source: str) -> list[Artifact]:
    if not any(n.is_gpu_worker for n in plane_nodes(estate)):
        return []
    configs = device_plugin_configs(estate)
    # MIG needs SYS_ADMIN in the plugin (as NVIDIA's chart grants); otherwise drop all.
    mig = any(c["flags"]["migStrategy"] != "none" for c in configs.values())
    text = _render("device-plugin.yaml.j2", estate, source, name=DEVICE_PLUGIN_NAME,
                   namespace=DEVICE_PLUGIN_NAMESPACE, image=DEVICE_PLUGIN_IMAGE,
                   configs={k: to_yaml(v) + "\n" for k, v in configs.items()},
                   default_config=DEFAULT_SHARING_CONFIG, config_label=DEVICE_PLUGIN_CONFIG_LABEL,
                   handler=RUNTIME_HANDLER, node_selector={GPU_PRESENT: "true"},
                   tolerations=[{"key": GPU_RESOURCE, "operator": "Exists",
                                 "effect": "NoSchedule"},
                                {"key": "CriticalAddonsOnly", "operator": "Exists"}],
                   security=({"capabilities": {"add": ["SYS_ADMIN"]}} if mig else
                             {"allowPrivilegeEscalation": False,
                              "capabilities": {"drop": ["ALL"]}}))
    return [_manifest("20-device-plugin.yaml", text, estate)]


def gpu_toleration() -> dict:
    return {"key": GPU_TAINT["key"], "operator": "Equal", "value": GPU_TAINT["value"],
            "effect": GPU_TAINT["effect"]}


def build_cluster_objects(estate: Estate, source: str) -> list[Artifact]:
    """RuntimeClass nvidia, the tenants' PriorityClasses and Namespaces."""
    k8s = estate.spec.kubernetes
    out = []
    if any(n.is_gpu_worker for n in plane_nodes(estate)):
        text = _render("runtimeclass.yaml.j2", estate, source, handler=RUNTIME_HANDLER,
                       node_selector={GPU_PRESENT: "true"}, tolerations=[gpu_toleration()])
        out.append(_manifest("10-runtimeclass.yaml", text, estate))
    if k8s.tenants:
        text = _render("tenants-cluster.yaml.j2", estate, source, tenants=[
            {"name": t.name, "priority_class": priority_class(t), "priority": t.priority}
            for t in k8s.tenants])
        out.append(_manifest("00-tenants.yaml", text, estate))
    return out


def network_policy_peers(estate: Estate, tenant: Tenant) -> tuple[list[str], list[str]]:
    """(tenants whose pods may reach this tenant, tenants this tenant's pods may reach)."""
    tenants = estate.spec.kubernetes.tenants
    ingress = [name for name in tenant.allow_from if name != tenant.name]
    egress = [t.name for t in tenants if tenant.name in t.allow_from and t.name != tenant.name]
    return ingress, egress


def tenant_context(estate: Estate, tenant: Tenant) -> dict:
    quotas = tenant_quotas(estate)[tenant.name]
    by_flavor = {f.name: f for f in flavors(estate)}
    ingress, egress = network_policy_peers(estate, tenant)
    return {
        "name": tenant.name,
        "gpu_ceiling": borrowable_units(estate, tenant),
        "gpu_max_per_container": max((by_flavor[q.flavor].max_units_per_node for q in quotas),
                                     default=0),
        "ingress_from": ingress, "egress_to": egress,
        "claims": [c for c in nfs_claims(estate) if c["namespace"] == tenant.name],
    }


def build_tenants(estate: Estate, source: str) -> list[Artifact]:
    out = []
    for t in estate.spec.kubernetes.tenants:
        text = _render("tenant.yaml.j2", estate, source, t=tenant_context(estate, t),
                       capacity=NFS_NOMINAL_CAPACITY,
                       gpu_resource=GPU_RESOURCE, ns_label=NAMESPACE_NAME_LABEL)
        out.append(_manifest(f"30-tenant-{t.name}.yaml", text, estate))
    return out


def build_kueue(estate: Estate, source: str) -> list[Artifact]:
    k8s = estate.spec.kubernetes
    if not k8s.tenants:
        return []
    quotas = tenant_quotas(estate)
    queues = [{"name": t.name, "cohort": t.cohort, "namespace": t.name,
               "quotas": [q for q in quotas[t.name]]} for t in k8s.tenants]
    text = _render("kueue.yaml.j2", estate, source, api=KUEUE_API, flavors=flavors(estate),
                   tolerations=[gpu_toleration()], queues=queues, gpu_resource=GPU_RESOURCE,
                   ns_label=NAMESPACE_NAME_LABEL)
    return [_manifest("50-kueue.yaml", text, estate)]


def nfs_volumes(estate: Estate) -> list[dict]:
    """Exports some Kubernetes node mounts, with the server's address on the export segment."""
    exports = {e.name: e for e in estate.spec.storage.exports}
    plane = {n.name for n in plane_nodes(estate)}
    out: dict[str, dict] = {}
    for m in estate.spec.storage.mounts:
        export = exports.get(m.export)
        clients = [c for c in Hostlist.parse(m.clients) if c in plane]
        if not export or not clients or export.name in out:
            continue
        server = estate.address(export.server, export.segment)
        out[export.name] = {
            "export": export.name, "server": str(server), "path": export.path,
            "mount_path": m.path, "clients": clients,
            "options": [o for o in m.options.split(",") if o and o not in FSTAB_ONLY_OPTIONS],
            "all_nodes": len(clients) == len(plane),
        }
    return list(out.values())


def nfs_claims(estate: Estate) -> list[dict]:
    """One PersistentVolume per (export, tenant), pre-bound to a claim in the tenant's namespace.

    A PersistentVolume binds one claim, so tenants sharing an export each get their own
    volume on the same NFS path. Without tenants the volumes are left unbound.
    """
    tenants = [t.name for t in estate.spec.kubernetes.tenants] or [None]
    return [{**v, "pv": f"{v['export']}-{t}" if t else v["export"], "namespace": t,
             "claim": v["export"]} for v in nfs_volumes(estate) for t in tenants]


def build_storage(estate: Estate, source: str) -> list[Artifact]:
    claims = nfs_claims(estate)
    if not claims:
        return []
    text = _render("storage.yaml.j2", estate, source, claims=claims,
                   capacity=NFS_NOMINAL_CAPACITY)
    return [_manifest("25-storage.yaml", text, estate)]


def kind_nodes(estate: Estate) -> list[dict]:
    mounts = nfs_volumes(estate)
    out = []
    for n in plane_nodes(estate):
        node = {"role": "control-plane" if n.control_plane else "worker",
                "image": KIND_IMAGE.format(version=estate.spec.kubernetes.version)}
        if n.labels:
            node["labels"] = n.labels
        extra = [{"hostPath": v["mount_path"], "containerPath": v["mount_path"]}
                 for v in mounts if n.name in v["clients"]]
        if extra:
            node["extraMounts"] = extra
        # kind taints its control planes itself; workers get theirs through kubeadm.
        if n.taints and not n.control_plane:
            node["kubeadmConfigPatches"] = [to_yaml({"kind": "JoinConfiguration",
                                                     "nodeRegistration": {
                                                         "taints": list(n.taints)}}) + "\n"]
        out.append(node)
    return out


def build_kind(estate: Estate, source: str) -> list[Artifact]:
    """A kind cluster shaped like the plane, for trying the manifests on a workstation."""
    text = _render("kind-config.yaml.j2", estate, source, api=KIND_API,
                   nodes=kind_nodes(estate))
    return [Artifact("kubernetes/kind-config.yaml", text, Hostlist(), PLANE)]


def _manifest(name: str, content: bytes, estate: Estate) -> Artifact:
    # Applied from a control plane (kubectl apply -f kubernetes/manifests/, in name order).
    return Artifact(f"kubernetes/manifests/{name}", content, hostlist(control_planes(estate)),
                    PLANE)


# What every plane node needs from the kernel and where its packages come from.
KERNEL_MODULES = ("overlay", "br_netfilter")
SYSCTLS = {"net.bridge.bridge-nf-call-iptables": 1, "net.bridge.bridge-nf-call-ip6tables": 1,
           "net.ipv4.ip_forward": 1}
PACKAGES = ("kubelet", "kubeadm", "kubectl")
KEYRING = "/etc/apt/keyrings/kubernetes-apt-keyring.gpg"


def package_repository(estate: Estate) -> str:
    """'URL SUITE' of the apt repository: the spec's, or pkgs.k8s.io for the minor."""
    k = estate.spec.kubernetes
    minor = ".".join(k.version.split(".")[:2])
    return k.package_repository or f"https://pkgs.k8s.io/core:/stable:/v{minor}/deb/ /"


def build_node(estate: Estate, source: str) -> list[Artifact]:
    """Kernel modules, sysctls and the pinned package source, for every plane node."""
    nodes = hostlist(plane_nodes(estate))
    head = f"# Rendered by estate from {source or 'the spec'}; do not edit.\n"
    url, _, suite = package_repository(estate).partition(" ")
    texts = {
        "node/modules.conf": "".join(f"{m}\n" for m in KERNEL_MODULES),
        "node/sysctl.conf": "".join(f"{k} = {v}\n" for k, v in SYSCTLS.items()),
        "apt/kubernetes.list": f"deb [signed-by={KEYRING}] {url} {suite or '/'}\n",
        # The Release.key next to the repository signs it (pkgs.k8s.io and its mirrors).
        "apt/kubernetes.pref": (f"Package: {' '.join(PACKAGES)}\n"
                                f"Pin: version {estate.spec.kubernetes.version}-*\n"
                                "Pin-Priority: 1001\n"),
    }
    return [Artifact(f"kubernetes/{p}", (head + t).encode(), nodes, PLANE)
            for p, t in texts.items()]


BUILDERS = (build_kubeadm, build_containerd, build_node, build_cluster_objects, build_device_plugin,
            build_storage, build_tenants, build_kueue, build_kind)


def render_kubernetes(estate: Estate, source: str = "") -> list[Artifact]:
    """Every Kubernetes-plane artifact; nothing when the spec has no Kubernetes plane."""
    if estate.spec.kubernetes is None or not control_planes(estate):
        return []
    return [a for build in BUILDERS for a in build(estate, source)]
