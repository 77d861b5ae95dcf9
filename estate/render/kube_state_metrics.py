"""kube-state-metrics, the telemetry plane's `kube-state-metrics` scrape job, from upstream's
standard manifests (vendored verbatim, each checksum-pinned: k8s/kube-state-metrics/).

Changed from upstream only where Estate's firewall and placement need it: on the control
planes' host network, so the node firewall's `kube-state-metrics` flow (estate.model.flows)
decides who scrapes it, listening on that flow's port.
"""
from __future__ import annotations

import copy
import math

from estate.model import kubernetes as k8s
from estate.model.flows import flow
from estate.render.gpu_addons import vendored
from estate.spec.resolved import Estate


# kube-state-metrics v2.20.0's default resources (pkg/options/resource.go, DefaultResources)
# less `secrets`: Estate uses no Secret metric, and the grant to list and watch Secrets in
# every namespace made every tenant's bridge token readable by a pod on the control planes'
# host network. Passed as --resources (pkg/options/options.go), so kube-state-metrics starts
# no Secret reflector that the narrowed ClusterRole would refuse.
UNUSED = ("secrets",)
DEFAULT_RESOURCES = (
    "certificatesigningrequests", "configmaps", "cronjobs", "daemonsets", "deployments",
    "endpointslices", "horizontalpodautoscalers", "ingresses", "jobs", "leases",
    "limitranges", "mutatingadmissionpolicies", "mutatingadmissionpolicybindings",
    "mutatingwebhookconfigurations", "namespaces", "networkpolicies", "nodes",
    "persistentvolumes", "persistentvolumeclaims", "poddisruptionbudgets", "pods",
    "replicasets", "replicationcontrollers", "resourcequotas", "secrets", "services",
    "statefulsets", "storageclasses", "validatingadmissionpolicies",
    "validatingadmissionpolicybindings", "validatingwebhookconfigurations",
    "volumeattachments")
# README.md "Resource recommendation" (v2.20.0): 250 MiB and 0.1 core, for a cluster of about
# 100 nodes (its scaling test); the objects grow with the nodes. Limits at twice that: the
# README warns that a low CPU limit lets the queues, and so memory, grow.
PER_100_NODES = {"cpu": 100, "memory": 250}     # millicores, MiB


def resources(nodes: int) -> dict:
    """Requests and limits for a plane of that many nodes (per started 100 nodes)."""
    n = max(1, math.ceil(nodes / 100))
    cpu, mem = PER_100_NODES["cpu"] * n, PER_100_NODES["memory"] * n
    return {"requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"},
            "limits": {"cpu": f"{2 * cpu}m", "memory": f"{2 * mem}Mi"}}


def _without_unused(role: dict) -> None:
    for rule in role.get("rules") or []:
        rule["resources"] = [r for r in rule.get("resources") or [] if r not in UNUSED]
    role["rules"] = [r for r in role.get("rules") or [] if r["resources"]]


def upstream() -> list[dict]:
    """Upstream's objects in its kustomization's order, each file refused unless pinned."""
    return [doc for name, sha in k8s.KSM_SHA256.items()
            for doc in copy.deepcopy(vendored(f"{k8s.KSM_DIR}/{name}", sha))]


def _on_control_planes(pod: dict, port: int, nodes: int) -> None:
    """hostNetwork on the control planes, listening on the flow's port: in the pod network
    it would be reachable past the nodes' input chains. The telemetry port (8081) stays as
    upstream: no flow opens it, so the firewall drops it, and upstream's readiness probe,
    which kubelet sends to the node's address, keeps working (k8s/kube-state-metrics/README.md)."""
    pod["hostNetwork"] = True
    pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    pod["nodeSelector"] = {**pod.get("nodeSelector", {}), k8s.CONTROL_PLANE_LABEL: ""}
    pod["tolerations"] = list(k8s.ADDON_TOLERATIONS)
    # the container's own settings (upstream's) said for the whole pod too
    pod["securityContext"] = {"runAsNonRoot": True, "runAsUser": 65534,
                              "seccompProfile": {"type": "RuntimeDefault"}}
    [c] = pod["containers"]
    used = ",".join(r for r in DEFAULT_RESOURCES if r not in UNUSED)
    c["args"] = [*c.get("args", []), f"--port={port}", f"--resources={used}"]
    c["resources"] = resources(nodes)
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
            _on_control_planes(doc["spec"]["template"]["spec"], port,
                               len(k8s.plane_nodes(estate)))
        elif doc["kind"] == "ClusterRole":
            _without_unused(doc)
        elif doc["kind"] == "Service":
            for p in doc["spec"]["ports"]:
                if p["name"] == "http-metrics":
                    p["port"] = port
    return out
