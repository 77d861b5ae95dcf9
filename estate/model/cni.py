"""The pod network: Calico, installed by the Tigera operator, configured by one Installation.

Why Calico: it enforces the tenants' NetworkPolicies (default deny, DNS, allow_from) with
the upstream API, routes with or without encapsulation (VXLAN across routed segments, plain
BGP routes on one L2), and its operator route is two small files: the pinned operator
manifest (vendored, k8s/cni/, about 20 KB; operator v1.42 installs its own CRDs) and an
Installation object Estate renders from the spec. Cilium would need its Helm chart's
rendered output (a much larger, version-specific manifest) to be vendored instead.

One place for the facts the renderer, the flow matrix, the validators and the control
plane role share: the pinned version, the encapsulation's overhead and port, the MTU.
"""
from __future__ import annotations

from dataclasses import dataclass

from estate.spec.resolved import Estate

CALICO_VERSION = "v3.32.1"              # projectcalico/calico release tag
OPERATOR_MANIFEST = "k8s/cni/tigera-operator.yaml"   # vendored, verbatim (see its README)
OPERATOR_SHA256 = "f18e073794207d372606bc3ea6f8fd73972f86d6828f4ba666dfe0d4aa8ab07f"
OPERATOR_IMAGE = "quay.io/tigera/operator:v1.42.3"
INSTALLATION_API = "operator.tigera.io/v1"
# What Estate adds to the vendored operator Deployment (estate.render.cni.operator_documents),
# and nothing else: the file sets no securityContext and no resources. The operator's image
# runs as 10001:10001 (tigera/operator v1.42.3 build/Dockerfile `USER 10001:10001`), the UID
# the operator gives its own non-root components (pkg/render/common/securitycontext,
# NewNonRootPodContext); the binary writes no file (no write outside tests in cmd/, pkg/,
# internal/ at v1.42.3; it only reads /var/lib/calico/mtu, mounted read-only upstream) and
# serves no webhook (it registers none), so a read-only root and no capability suffice.
OPERATOR_POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                         "seccompProfile": {"type": "RuntimeDefault"}}
OPERATOR_CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "privileged": False,
                               "readOnlyRootFilesystem": True,
                               "capabilities": {"drop": ["ALL"]}}
# Upstream names no size (Calico's Helm chart values.yaml `resources: {}`): Estate's estimate
# for one controller-runtime manager watching Calico's objects and the nodes, not measured
# here; the limits leave it room at start, when it ensures every CRD at once.
OPERATOR_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"cpu": "1", "memory": "512Mi"}}
# The operator creates its CRDs when it starts (-manage-crds=true): the Installation can be
# applied only once this one is Established (roles/k8s_control_plane waits for it).
INSTALLATION_CRD = "installations.operator.tigera.io"
# Namespaces the operator owns (its own, and those it creates for Calico's components): the
# cluster operators', like kube-system: no tenant may take one, and they are outside the
# GPU-ownership proof (calico-node runs on every node, GPU nodes included, by design).
NAMESPACES = ("tigera-operator", "calico-system", "calico-apiserver")
POOL_NAME = "default-ipv4-ippool"
BLOCK_SIZE = 26                         # Calico's default IPAM block: 64 addresses per node

# Rendered manifests, applied before every other manifest: pods (CoreDNS, the device
# plugin) get no network until the CNI is up.
OPERATOR_PATH = "01-cni-operator.yaml"
INSTALLATION_PATH = "02-cni.yaml"
# The control plane's role applies these itself, under `estate apply` and under Pulumi alike
# (like kubeadm init): the Installation can only be created once the operator has made its
# CRD, which a command on the node can wait for and a Pulumi ConfigGroup cannot (it retries
# an unknown kind a few times, then fails); and the ConfigGroup's DaemonSets only become
# ready on a pod network.
ROLE_MANIFESTS = (OPERATOR_PATH, INSTALLATION_PATH)


def role_applied(path: str) -> bool:
    """A rendered manifest that k8s_control_plane applies in every path (ROLE_MANIFESTS)."""
    return path.rsplit("/", 1)[-1] in ROLE_MANIFESTS


@dataclass(frozen=True)
class Encapsulation:
    calico: str         # the Installation's ipPools[].encapsulation
    overhead: int       # bytes of outer headers per packet (IPv4)
    flow: str           # the flow (estate.model.flows) that carries it between nodes
    bgp: bool           # calico-node's BGP speaker is needed to learn routes


# Overheads from Calico's MTU guide (IPv4): VXLAN 50 bytes (outer IP 20, UDP 8, VXLAN 8,
# inner Ethernet 14), no encapsulation 0.
ENCAPSULATIONS = {
    "vxlan": Encapsulation("VXLAN", 50, "calico-vxlan", bgp=False),
    "none": Encapsulation("None", 0, "calico-bgp", bgp=True),
}
BY_CALICO = {e.calico: e for e in ENCAPSULATIONS.values()}
# Felix on every node connects to Typha (which the operator runs on some nodes, hostNetwork).
TYPHA_FLOW = "calico-typha"


def encapsulation(estate: Estate) -> Encapsulation:
    return ENCAPSULATIONS[estate.spec.kubernetes.cni.encapsulation]


def segment_mtu(estate: Estate) -> int | None:
    """The MTU of the API segment, which carries the pod network between nodes."""
    name = estate.spec.kubernetes.api_segment
    seg = next((s for s in estate.spec.segments if s.name == name), None)
    return seg.mtu if seg else None


def pod_mtu(estate: Estate) -> int | None:
    """The pods' MTU: the segment's less the encapsulation's outer headers, so an encapsulated
    full-size pod packet still fits the segment without fragmentation."""
    mtu = segment_mtu(estate)
    return None if mtu is None else mtu - encapsulation(estate).overhead


def api_cidr(estate: Estate) -> str | None:
    """calico-node picks each node's address in this CIDR: the address the flows admit."""
    name = estate.spec.kubernetes.api_segment
    seg = next((s for s in estate.spec.segments if s.name == name), None)
    return str(seg.cidr) if seg else None


def required_flows(encap: Encapsulation) -> tuple[str, ...]:
    """Flows every Kubernetes-plane node must accept from every other one."""
    return (TYPHA_FLOW, encap.flow)
