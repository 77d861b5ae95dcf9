"""Add-ons that run on every GPU worker, from NVIDIA's pinned upstream manifests
(vendored verbatim, checksum-pinned): the DCGM exporter (GPU metrics).

Each is the upstream file with Estate's placement and what its nodes need changed, nothing
else: the kube-system namespace (the device plugin's; tenants' namespaces are fenced), a
nodeSelector on nvidia.com/gpu.present, tolerations for exactly the GPU pools' taints
(estate.model.kubernetes.gpu_addon_tolerations), and privileges where the container
toolkit would otherwise hide the GPUs from it.
"""
from __future__ import annotations

import copy
import hashlib
from functools import lru_cache

import yaml

from estate.model import kubernetes as k8s
from estate.render.templates import ROOT, RenderError
from estate.spec.resolved import Estate

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=4)
def vendored(path: str, sha256: str) -> tuple[dict, ...]:
    """The documents of a vendored upstream manifest, refused if it is not the pinned file."""
    data = (ROOT / path).read_bytes()
    have = hashlib.sha256(data).hexdigest()
    if have != sha256:
        raise RenderError(f"{path}: sha256 {have}, pinned {sha256}; restore the upstream "
                          "file (its README names the source)")
    return tuple(d for d in yaml.load_all(data, Loader=_Loader) if isinstance(d, dict))


def _on_gpu_workers(estate: Estate, pod: dict) -> None:
    """Estate's placement rule for a GPU-node add-on (kubernetes.addon_unschedulable checks
    the result): only GPU workers, every pool's taint tolerated, nothing else."""
    pod["nodeSelector"] = {k8s.GPU_PRESENT: "true"}
    pod["tolerations"] = k8s.gpu_addon_tolerations(estate)
    pod["priorityClassName"] = "system-node-critical"   # as the device plugin: node-level
    pod["runtimeClassName"] = k8s.RUNTIME_HANDLER


def dcgm_exporter(estate: Estate) -> list[dict]:
    """The exporter's DaemonSet and Service, in kube-system, on the GPU workers.

    Changed from upstream, and why:
    - privileged instead of SYS_ADMIN alone: the container toolkit ignores
      NVIDIA_VISIBLE_DEVICES from unprivileged containers (k8s/README.md, GPU isolation), so
      unprivileged it would see no GPU;
    - hostNetwork: the monitoring hosts (firewall.monitoring) scrape it on the node's address,
      port 9400, which the node's firewall admits from them only (the `dcgm-exporter` flow);
      in the pod network it would be reachable past the node's input chain.
    """
    out = []
    for doc in copy.deepcopy(vendored(k8s.DCGM_MANIFEST, k8s.DCGM_SHA256)):
        doc.setdefault("metadata", {})["namespace"] = k8s.DEVICE_PLUGIN_NAMESPACE
        if doc.get("kind") == "DaemonSet":
            pod = doc["spec"]["template"]["spec"]
            _on_gpu_workers(estate, pod)
            pod["hostNetwork"] = True
            pod["dnsPolicy"] = "ClusterFirstWithHostNet"
            for c in pod["containers"]:
                c["env"] = [e for e in c.get("env", []) if not e["name"].startswith("NVIDIA_")]
                c["env"] += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                             {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]
                c["securityContext"] = {"privileged": True}
        out.append(doc)
    return out
