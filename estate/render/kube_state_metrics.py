"""kube-state-metrics, the telemetry plane's `kube-state-metrics` scrape job, from upstream's
standard manifests (vendored verbatim, each checksum-pinned: k8s/kube-state-metrics/).

Changed from upstream only where Estate's firewall and placement need it: on the control
planes' host network, so the node firewall's `kube-state-metrics` flow (estate.model.flows)
decides who scrapes it, listening on that flow's port.
"""
from __future__ import annotations

import copy

from estate.model import kubernetes as k8s
from estate.model.flows import flow
from estate.render.gpu_addons import vendored
from estate.spec.resolved import Estate


def upstream() -> list[dict]:
    """Upstream's objects in its kustomization's order, each file refused unless pinned."""
    return [doc for name, sha in k8s.KSM_SHA256.items()
            for doc in copy.deepcopy(vendored(f"{k8s.KSM_DIR}/{name}", sha))]


def _on_control_planes(pod: dict, port: int) -> None:
    """hostNetwork on the control planes, listening on the flow's port: in the pod network
    it would be reachable past the nodes' input chains. The telemetry port (8081) stays as
    upstream: no flow opens it, so the firewall drops it, and upstream's readiness probe,
    which kubelet sends to the node's address, keeps working (k8s/kube-state-metrics/README.md)."""
    pod["hostNetwork"] = True
    pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    pod["nodeSelector"] = {**pod.get("nodeSelector", {}), k8s.CONTROL_PLANE_LABEL: ""}
    pod["tolerations"] = list(k8s.ADDON_TOLERATIONS)
    [c] = pod["containers"]
    c["args"] = [*c.get("args", []), f"--port={port}"]
    for p in c["ports"]:
        if p["name"] == "http-metrics":
            p["containerPort"] = port


def kube_state_metrics(estate: Estate) -> list[dict]:
    """The objects to apply; none without spec.monitoring (nothing would scrape it) or
    without the flow that admits the scraper."""
    f = flow(estate, k8s.KSM_NAME)
    if estate.spec.monitoring is None or f is None:
        return []
    port = f.ports[0]     # the scrape targets' port (estate.model.monitoring.targets)
    out = upstream()
    for doc in out:
        if doc["kind"] == "Deployment":
            # a host port: a surge pod would find it taken on a single control plane
            doc["spec"]["strategy"] = {"type": "Recreate"}
            _on_control_planes(doc["spec"]["template"]["spec"], port)
        elif doc["kind"] == "Service":
            for p in doc["spec"]["ports"]:
                if p["name"] == "http-metrics":
                    p["port"] = port
    return out
