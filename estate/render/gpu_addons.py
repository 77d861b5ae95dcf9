"""Add-ons that run on every GPU worker, from NVIDIA's pinned upstream manifests
(vendored verbatim, checksum-pinned): the DCGM exporter (GPU metrics).

Each is the upstream file with Estate's placement and what its nodes need changed, nothing
else: the kube-system namespace (the device plugin's; tenants' namespaces are fenced), a
nodeSelector on nvidia.com/gpu.present, tolerations for exactly the GPU pools' taints
(estate.model.kubernetes.gpu_addon_tolerations), and the one capability (SYS_ADMIN)
without which the container toolkit would hide the GPUs from it.
"""
from __future__ import annotations

import copy
import hashlib
from functools import lru_cache

import yaml

from estate.model import kubernetes as k8s
from estate.render import hardening
from estate.render.templates import ROOT, RenderError
from estate.spec.resolved import Estate

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=16)   # every vendored file: DCGM, GFD, NFD, kube-state-metrics' five
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
    - every GPU through a volume mount, not NVIDIA_VISIBLE_DEVICES: the container toolkit
      ignores that variable in unprivileged containers (k8s/README.md, GPU isolation) but
      reads /dev/null mounted under /var/run/nvidia-container-devices/ as a device request
      (nvidia-container-toolkit v1.20.0 internal/config/image/cuda_image.go,
      requestsFromMounts; Estate's toolkit config accepts it). So the exporter runs with
      upstream's own security context (every capability dropped but SYS_ADMIN, for the
      profiling metrics), not privileged; tenants cannot copy the trick, since Pod Security
      baseline refuses hostPath volumes in their namespaces;
    - liveness and readiness on /health at the listening port, as upstream's Helm chart
      (deployment/templates/daemonset.yaml, 45 s initial delay); RuntimeDefault seccomp;
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
            hardening.seccomp(pod)
            pod["volumes"].append({"name": "all-gpus", "hostPath": {
                "path": "/dev/null", "type": "CharDevice"}})
            for c in pod["containers"]:
                c["env"] = [e for e in c.get("env", []) if not e["name"].startswith("NVIDIA_")]
                c["env"] += [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]
                c["volumeMounts"].append({"name": "all-gpus", "readOnly": True,
                                          "mountPath": k8s.ALL_GPUS_MOUNT})
                port = next(p["containerPort"] for p in c["ports"])
                probe = {"httpGet": {"path": "/health", "port": port},
                         "initialDelaySeconds": 45, "periodSeconds": 5}
                c["livenessProbe"], c["readinessProbe"] = probe, dict(probe)
        out.append(doc)
    return out


# --- node-feature-discovery and GPU Feature Discovery -------------------------------------

def _to_kube_system(doc: dict) -> None:
    """Into the device plugin's namespace: a Namespace Estate rendered for NFD would be one
    more to fence (PodTolerationRestriction, the ownership proof); kube-system is the
    operators' and holds the other GPU add-ons."""
    if "namespace" in (doc.get("metadata") or {}):
        doc["metadata"]["namespace"] = k8s.DEVICE_PLUGIN_NAMESPACE
    for subject in doc.get("subjects") or []:
        if "namespace" in subject:
            subject["namespace"] = k8s.DEVICE_PLUGIN_NAMESPACE


# ten times upstream's CPU requests (nfd-master 100m, nfd-gc 10m, nfd-worker 5m; the
# worker's rounded up to 100m: it scans the node's PCI, USB and kernel features each minute)
NFD_CPU_LIMITS = {"nfd-master": "1", "nfd-gc": "100m", "nfd-worker": "100m"}


def node_feature_discovery(estate: Estate) -> list[dict]:
    """NFD's release build, changed only where Estate's placement needs it: kube-system; the
    master and the garbage collector placed like every cluster add-on (ADDON_TOLERATIONS,
    preferring the control planes); the worker on the GPU workers only (GFD's labels are
    what Estate needs from it), tolerating exactly the GPU pools."""
    out = []
    for doc in copy.deepcopy(vendored(k8s.NFD_MANIFEST, k8s.NFD_SHA256)):
        if doc.get("kind") == "Namespace":
            continue
        _to_kube_system(doc)
        pod = ((doc.get("spec") or {}).get("template") or {}).get("spec")
        if pod is not None:
            hardening.seccomp(pod)
            for c in pod["containers"]:   # upstream: CPU requests, memory limits only
                hardening.cpu_limit(c, NFD_CPU_LIMITS[doc["metadata"]["name"]])
        if doc.get("kind") == "Deployment":
            pod["tolerations"] = list(k8s.ADDON_TOLERATIONS)
            pod["affinity"] = k8s.addon_affinity()
        elif doc.get("kind") == "DaemonSet":
            pod["nodeSelector"] = {k8s.GPU_PRESENT: "true"}
            pod["tolerations"] = k8s.gpu_addon_tolerations(estate)
        out.append(doc)
    return out


# GFD at v0.20.0 defaults `use-node-feature-api` to true (k8s-device-plugin
# cmd/gpu-feature-discovery/main.go); with it on, internal/lm/output.go NewOutputer wants
# NODE_NAME and a NodeFeature client, and upstream's static DaemonSet passes neither, so GFD
# stops at start ("required flag node-name not set"). Estate turns the API off: GFD then
# writes the file below (main.go's `output-file` default), on the features.d hostPath that
# nfd-worker reads (k8s/nfd/), the path k8s/gfd/README.md documents. An environment variable
# is set on the command line as far as urfave/cli is concerned (c.IsSet), so it wins over a
# `flags.useNodeFeatureAPI` in the device plugin's config file (api/config/v1/flags.go
# updateFromCLIFlag). No service account, no RBAC to write NodeFeatures.
GFD_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
GFD_OUTPUT_ENV = ({"name": "USE_NODE_FEATURE_API", "value": "false"},
                  {"name": "GFD_OUTPUT_FILE", "value": f"{GFD_FEATURES_DIR}/gfd"})


def gpu_feature_discovery(estate: Estate, configs: dict[str, dict],
                          config_map: str) -> list[dict]:
    """One GFD DaemonSet per device-plugin config, on the nodes that select it, reading that
    config (from the plugin's ConfigMap): GFD labels what the plugin advertises (replicas,
    MIG strategy) only if it knows the same sharing. Changed from upstream: kube-system;
    a nodeSelector (gpu.present and the config) instead of the NFD-label affinity; the GPU
    pools' tolerations; MIG_STRATEGY from the config (upstream's `none` would override the
    file), NVIDIA_MIG_MONITOR_DEVICES under MIG (as upstream's MIG variants); the nvidia
    runtime and NVIDIA_VISIBLE_DEVICES, as the plugin; SYS_ADMIN instead of privileged."""
    [base] = [d for d in vendored(k8s.GFD_MANIFEST, k8s.GFD_SHA256) if d["kind"] == "DaemonSet"]
    used = sorted({n.labels.get(k8s.DEVICE_PLUGIN_CONFIG_LABEL) for n in
                   k8s.plane_nodes(estate) if n.is_gpu_worker} - {None})
    out = []
    for name in used:
        doc = copy.deepcopy(base)
        strategy = str(configs[name]["flags"]["migStrategy"])
        doc["metadata"]["name"] = f"{k8s.GFD_NAME}-{name}"
        doc["metadata"]["namespace"] = k8s.DEVICE_PLUGIN_NAMESPACE
        # the selector and pod labels name the config: two DaemonSets never share pods
        for labels in (doc["spec"]["selector"]["matchLabels"],
                       doc["spec"]["template"]["metadata"]["labels"]):
            labels[k8s.DEVICE_PLUGIN_CONFIG_LABEL] = name
        pod = doc["spec"]["template"]["spec"]
        pod.pop("affinity", None)
        _on_gpu_workers(estate, pod)
        pod["nodeSelector"][k8s.DEVICE_PLUGIN_CONFIG_LABEL] = name
        [c] = pod["containers"]
        env = [e for e in c.get("env", []) if e["name"] != "MIG_STRATEGY"]
        env += [{"name": "MIG_STRATEGY", "value": strategy},
                {"name": "CONFIG_FILE", "value": "/config/config.yaml"},
                *GFD_OUTPUT_ENV,
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]
        if strategy != "none":
            env.append({"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"})
        c["env"] = env
        c["volumeMounts"].append({"name": "config", "mountPath": "/config", "readOnly": True})
        # no API access since the NodeFeature API is off; upstream's chart sizes it not at
        # all (values.yaml `resources: {}`): GFD labels once a minute and sleeps between
        pod["automountServiceAccountToken"] = False
        hardening.seccomp(pod)
        # not privileged (upstream's static DaemonSet is): SYS_ADMIN alone makes the toolkit
        # hand it every GPU by NVIDIA_VISIBLE_DEVICES, as for the plugin (k8s.TOOLKIT_PRIVILEGE;
        # upstream's chart gives GFD the same), and covers NVIDIA_MIG_MONITOR_DEVICES, which
        # the toolkit grants only with CAP_SYS_ADMIN (cmd/nvidia-container-runtime/README.md,
        # v1.20.0). GFD itself would run on a read-only root (its renameio, internal/lm/
        # output.go at v0.20.0, falls back to the features.d hostPath for its temporary
        # file), but the toolkit's hooks write into it (k8s.TOOLKIT_READ_ONLY_ROOT).
        hardening.unprivileged(c, add=(k8s.TOOLKIT_PRIVILEGE,),
                               read_only=k8s.TOOLKIT_READ_ONLY_ROOT)
        hardening.sized(c, "10m", "64Mi", "100m", "128Mi")
        pod["volumes"].append({"name": "config", "configMap": {
            "name": config_map, "items": [{"key": name, "path": "config.yaml"}]}})
        out.append(doc)
    return out
