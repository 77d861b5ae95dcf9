"""The pod network, checked on the rendered files: the Calico Installation against kubeadm's
podSubnet, the API segment's MTU and CIDR and the flow matrix, and the operator manifest
against its pinned upstream file (Estate's hardening of its Deployment aside). Facts:
estate.model.cni. The Installation's schema is checked with every manifest
(kubernetes.manifest_invalid, against k8s/crds/)."""
from __future__ import annotations

import copy
from bisect import bisect_right
from functools import lru_cache

import yaml

from estate.check._common import problem
from estate import paths
from estate.check.kubernetes_schema import _dicts
from estate.check.registry import ArtifactContext, Problem, Problems, validator
from estate.findings import Severity
from estate.model import cni
from estate.model.flows import designed_port, matrix
from estate.model.services import MANIFESTS
from estate.spec.hostlist import compress
from estate.spec.resolved import Estate

E = Severity.ERROR
INSTALLATION = MANIFESTS + cni.INSTALLATION_PATH
OPERATOR = MANIFESTS + cni.OPERATOR_PATH
INIT = "kubernetes/kubeadm/init.yaml"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when present
RERENDER = "re-render (estate render) and fix the renderer or template that wrote it"


def _installation(ctx) -> dict | None:
    a = ctx.artifacts.get(INSTALLATION)
    docs = [d for d in _dicts(a) if d.get("kind") == "Installation"] if a else []
    return docs[0] if docs else None


def _network(doc: dict) -> dict:
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    net = spec.get("calicoNetwork")
    return net if isinstance(net, dict) else {}


def _pools(doc: dict) -> list[dict]:
    return [p for p in _network(doc).get("ipPools") or [] if isinstance(p, dict)]


def _planned(ctx) -> bool:
    """A Kubernetes plane is rendered (render_kubernetes renders nothing without one)."""
    return ctx.estate.spec.kubernetes is not None and INIT in ctx.artifacts


@validator("cni.missing", E, "cni", "a Kubernetes plane is rendered without its pod network "
           "(the CNI operator and its Installation)", stage="artifacts")
def missing(ctx: ArtifactContext) -> Problems:
    if not _planned(ctx):
        return
    for path in (OPERATOR, INSTALLATION):
        if path not in ctx.artifacts:
            yield Problem(path, "not rendered: without a CNI the nodes stay NotReady and "
                          "NetworkPolicies are not enforced", RERENDER)
    if INSTALLATION in ctx.artifacts and _installation(ctx) is None:
        yield Problem(INSTALLATION, "holds no Installation object", RERENDER)


@validator("cni.operator_not_pinned", E, "cni", "the rendered CNI operator manifest is not "
           "the pinned upstream file with Estate's hardening of its Deployment, and nothing "
           "else", stage="artifacts")
def operator_not_pinned(ctx: ArtifactContext) -> Problems:
    a = ctx.artifacts.get(OPERATOR)
    if a is None:
        return
    docs = copy.deepcopy(_dicts(a))
    for what, have, want in _unharden(docs):
        if have != want:
            yield Problem(OPERATOR, f"the operator Deployment's {what} is {have!r}, not "
                          f"Estate's {want!r} (estate.model.cni.OPERATOR_*)", RERENDER)
    if docs != list(_upstream_operator()):
        yield Problem(OPERATOR, f"differs from Calico {cni.CALICO_VERSION}'s "
                      "tigera-operator.yaml beyond the operator Deployment's securityContext "
                      "and resources", f"restore {cni.OPERATOR_MANIFEST} from upstream and "
                      "re-render; to upgrade, change the pin in estate/model/cni.py")


def _unharden(docs: list[dict]):
    """Takes Estate's hardening out of the operator Deployment in docs, in place: (field,
    rendered value, Estate's value) for each, so that what is left is upstream's."""
    for doc in docs:
        if doc.get("kind") != "Deployment":
            continue
        pod = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        containers = pod.get("containers") or [{}]
        yield ("pod securityContext", pod.pop("securityContext", None),
               cni.OPERATOR_POD_SECURITY)
        yield ("container securityContext", containers[0].pop("securityContext", None),
               cni.OPERATOR_CONTAINER_SECURITY)
        yield "resources", containers[0].pop("resources", None), cni.OPERATOR_RESOURCES


@lru_cache(maxsize=1)
def _upstream_operator() -> tuple[dict, ...]:
    """The vendored file's documents (the renderer refuses it unless it is the pinned one)."""
    data = (paths.TREE / cni.OPERATOR_MANIFEST).read_bytes()
    return tuple(d for d in yaml.load_all(data, Loader=_LOADER) if isinstance(d, dict))


def _pod_subnet(ctx) -> str | None:
    for doc in _dicts(ctx.artifacts[INIT]):
        if doc.get("kind") == "ClusterConfiguration":
            return str((doc.get("networking") or {}).get("podSubnet"))
    return None


@validator("cni.pod_cidr_mismatch", E, "cni", "the CNI's IP pool is not kubeadm's podSubnet",
           stage="artifacts")
def pod_cidr_mismatch(ctx: ArtifactContext) -> Problems:
    doc = _installation(ctx) if _planned(ctx) else None
    if doc is None:
        return
    subnet, cidrs = _pod_subnet(ctx), [str(p.get("cidr")) for p in _pools(doc)]
    if cidrs != [subnet]:
        yield Problem(INSTALLATION, f"IP pools {cidrs} are not kubeadm's podSubnet {subnet} "
                      f"({INIT}): pods would get addresses the node CIDRs, the firewall's "
                      "forward rules and kube-proxy do not expect", RERENDER)


@validator("cni.mtu", E, "cni", "the pod MTU plus the encapsulation's overhead does not fit "
           "the API segment's MTU", stage="artifacts")
def mtu(ctx: ArtifactContext) -> Problems:
    doc = _installation(ctx) if _planned(ctx) else None
    seg_mtu = cni.segment_mtu(ctx.estate) if doc is not None else None
    if seg_mtu is None:
        return
    pod_mtu, encaps = _network(doc).get("mtu"), {p.get("encapsulation") for p in _pools(doc)}
    overhead = max((cni.BY_CALICO[e].overhead for e in encaps if e in cni.BY_CALICO), default=0)
    if not isinstance(pod_mtu, int):
        yield Problem(INSTALLATION, "sets no MTU: Calico would guess it from whichever "
                      "interface it finds first", RERENDER)
    elif pod_mtu + overhead > seg_mtu:
        yield Problem(INSTALLATION, f"pod MTU {pod_mtu} + {overhead} bytes of encapsulation "
                      f"exceed the {ctx.estate.spec.kubernetes.api_segment} segment's MTU "
                      f"{seg_mtu}: full-size pod packets would be fragmented or dropped",
                      f"the pod MTU is at most {seg_mtu - overhead}; {RERENDER}")


@validator("cni.node_address", E, "cni", "calico-node would pick node addresses outside the "
           "API segment, which the flows do not admit", stage="artifacts")
def node_address(ctx: ArtifactContext) -> Problems:
    doc = _installation(ctx) if _planned(ctx) else None
    want = cni.api_cidr(ctx.estate) if doc is not None else None
    if want is None:
        return
    got = (_network(doc).get("nodeAddressAutodetectionV4") or {}).get("cidrs")
    if got != [want]:
        yield Problem(INSTALLATION, f"node address autodetection is {got!r}, not the API "
                      f"segment's CIDR [{want}]: the overlay would run between addresses the "
                      "firewall does not admit", RERENDER)


@validator("cni.port_not_in_flows", E, "cni", "the flow matrix does not admit the CNI's "
           "ports between every pair of Kubernetes-plane nodes", stage="artifacts")
def port_not_in_flows(ctx: ArtifactContext) -> Problems:
    doc = _installation(ctx) if _planned(ctx) else None
    if doc is None:
        return
    names = ["calico-typha"]
    for e in sorted({str(p.get("encapsulation")) for p in _pools(doc)}):
        if e not in cni.BY_CALICO:
            yield Problem(INSTALLATION, f"encapsulation {e} has no flow in the matrix: the "
                          "firewall would drop it", f"use one of {sorted(cni.BY_CALICO)}")
        else:
            names.append(cni.BY_CALICO[e].flow)
    for name in dict.fromkeys(names):
        yield from _unadmitted(ctx.estate, name)


def _unadmitted(estate, name: str):
    """A problem if some plane node does not accept name's port from every plane node."""
    proto, (lo, hi) = designed_port(name)
    seg, nodes = estate.spec.kubernetes.api_segment, estate.plane_hosts("kubernetes")
    addrs = sorted(int(a) for n in nodes if (a := estate.address(n, seg)) is not None)
    covered: set[str] = set()
    for f in matrix(estate).flows:
        if f.segment == seg and f.has_port(proto, lo) and f.has_port(proto, hi) and \
                _covers(matrix(estate).source_ranges(f), addrs):
            covered |= f.to
    lacking = [n for n in nodes if n not in covered]
    if lacking:
        port = str(lo) if lo == hi else f"{lo}-{hi}"
        yield Problem(_where(estate, name), f"Kubernetes nodes {compress(lacking)} do "
                      f"not accept {port}/{proto} ({name}) from every Kubernetes node "
                      f"on segment {seg}: the pod network breaks there",
                      f"keep the default flow {name}, or give firewall.flows a flow "
                      f"{name} on {port}/{proto} from and to every Kubernetes node")


def _where(estate, name: str) -> str:
    """The spec flow that replaced the default, else where the plane's addresses come from."""
    flows = estate.spec.firewall.flows
    i = next((i for i, f in enumerate(flows) if f.name == name), None)
    return f"firewall.flows[{i}]" if i is not None else "kubernetes.api_segment"


def _covers(ranges: list[tuple[int, int]], addrs: list[int]) -> bool:
    """Every address falls in one of the (sorted, merged) ranges."""
    starts = [lo for lo, _ in ranges]
    for a in addrs:
        i = bisect_right(starts, a) - 1
        if i < 0 or a > ranges[i][1]:
            return False
    return True


# --- the spec ----------------------------------------------------------------------------

W = Severity.WARNING
# Calico's BGP guide: the default node-to-node full mesh suits clusters of up to about 100
# nodes; beyond that it wants route reflectors, which Estate does not render.
MESH_NODES = 100


@validator("cni.pod_cidr_too_small", E, "cni", "the pod CIDR is smaller than one of Calico's "
           "IPAM blocks")
def pod_cidr_too_small(estate: Estate) -> Problems:
    k8s = estate.spec.kubernetes
    if k8s is not None and k8s.pod_cidr.prefixlen > cni.BLOCK_SIZE:
        yield problem(("kubernetes", "pod_cidr"), f"pod_cidr {k8s.pod_cidr} is smaller than "
                      f"one /{cni.BLOCK_SIZE} block: Calico refuses an IP pool smaller than "
                      "its block size", f"use a /{cni.BLOCK_SIZE} or larger, e.g. a /16")


@validator("cni.pod_cidr_blocks", W, "cni", "the pod CIDR holds fewer IPAM blocks than the "
           "plane has nodes")
def pod_cidr_blocks(estate: Estate) -> Problems:
    k8s = estate.spec.kubernetes
    if k8s is None or k8s.pod_cidr.prefixlen > cni.BLOCK_SIZE:
        return
    blocks = 2 ** (cni.BLOCK_SIZE - k8s.pod_cidr.prefixlen)
    nodes = len(estate.plane_hosts("kubernetes"))
    if nodes > blocks:
        yield problem(("kubernetes", "pod_cidr"), f"pod_cidr {k8s.pod_cidr} holds {blocks} "
                      f"/{cni.BLOCK_SIZE} blocks for {nodes} Kubernetes nodes: the nodes "
                      "beyond borrow single addresses from others' blocks (a /32 route per "
                      "pod)", f"give at least a /{cni.BLOCK_SIZE - (nodes - 1).bit_length()}")


@validator("cni.bgp_mesh", W, "cni", "no encapsulation (BGP full mesh) on a plane too large "
           "for it")
def bgp_mesh(estate: Estate) -> Problems:
    k8s = estate.spec.kubernetes
    if k8s is None or not cni.encapsulation(estate).bgp:
        return
    nodes = len(estate.plane_hosts("kubernetes"))
    if nodes > MESH_NODES:
        yield problem(("kubernetes", "cni", "encapsulation"), f"encapsulation 'none' peers "
                      f"every pair of the {nodes} Kubernetes nodes over BGP (Calico's "
                      f"node-to-node mesh, meant for up to about {MESH_NODES} nodes)",
                      "use vxlan, or peer with route reflectors (not rendered by Estate)")
