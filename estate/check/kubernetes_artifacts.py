"""Kubernetes validators of the rendered files: every file against the schema of the tool
that reads it (estate.check.kubernetes_schema), GPU nodes' taints and device-plugin
configs, and that no join secret was written. The rendered quotas against the rendered
nodes are GPU ownership: estate.check.ownership.
"""
from __future__ import annotations

from estate.check.kubernetes_schema import (BOOTSTRAP_TOKEN, _dicts, containerd_problems,
                                            device_plugin_configs, documents, parse_error,
                                            own_texts, plane_artifacts, rendered_nodes,
                                            unvalidated_documents, validate_config,
                                            validate_device_plugin_config, validate_object)
from estate.check.registry import ArtifactContext, Problem, Problems, validator
from estate.findings import Severity
from estate.model import kubernetes as k8s
from estate.model.services import MANIFESTS

E = Severity.ERROR

def _version(ctx) -> str:
    return ctx.estate.spec.kubernetes.version


@validator("kubernetes.manifest_invalid", E, "kubernetes",
           "a rendered manifest fails strict schema validation", stage="artifacts")
def manifest_invalid(ctx: ArtifactContext) -> Problems:
    if not ctx.estate.spec.kubernetes:
        return
    version = _version(ctx)
    for a in plane_artifacts(ctx.artifacts, MANIFESTS):
        yield from _manifest_problems(a, version)


def _manifest_problems(a, version: str):
    if err := parse_error(a):
        yield Problem(a.path, f"the rendered file is not valid YAML: {err}",
                      "a spec value broke out of its place in the template: quote it, or "
                      "remove newlines and quotes from it")
    for i, doc in enumerate(unvalidated_documents(a, version)):
        for err in validate_object(doc, version):
            yield Problem(a.path, f"document {i} ({_kind(doc)}): {err}",
                          "fix the renderer or template that wrote it")


def _kind(doc) -> str:
    if isinstance(doc, dict):
        return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name', '?')}"
    return type(doc).__name__


@validator("kubernetes.config_invalid", E, "kubernetes",
           "a rendered kubeadm, kubelet, kind, device-plugin or containerd config is invalid",
           stage="artifacts")
def config_invalid(ctx: ArtifactContext) -> Problems:
    for a in plane_artifacts(ctx.artifacts):
        yield from _config_problems(a)


def _config_problems(a):
    if a.path.startswith("kubernetes/kubeadm/") or a.path == "kubernetes/kind-config.yaml":
        if err := parse_error(a):
            yield Problem(a.path, f"the rendered file is not valid YAML: {err}",
                          "a spec value broke out of its place in the template")
        for i, doc in enumerate(documents(a)):
            for err in validate_config(doc):
                yield Problem(a.path, f"document {i} ({_kind(doc)}): {err}")
    elif a.path.startswith("kubernetes/containerd/") and a.path.endswith(".toml"):
        for err in containerd_problems(a.content.decode(), gpu="gpu" in a.path):
            yield Problem(a.path, err)
    for name, config in device_plugin_configs(a).items():
        for err in validate_device_plugin_config(config):
            yield Problem(a.path, f"device plugin config '{name}': {err}")


@validator("kubernetes.secret_rendered", E, "kubernetes",
           "a join secret written into a rendered file", stage="artifacts")
def secret_rendered(ctx: ArtifactContext) -> Problems:
    for a in plane_artifacts(ctx.artifacts):
        if any(map(_has_token, own_texts(a))):
            yield Problem(a.path, "contains a kubeadm bootstrap token",
                          "leave the token placeholder; roles fill it at join time")
        for doc in _dicts(a) if a.path.startswith("kubernetes/kubeadm/") else ():
            for key, value in _secret_fields(doc):
                if value not in k8s.PLACEHOLDERS:
                    yield Problem(a.path, f"{key} holds a value, not a placeholder",
                                  f"write one of {', '.join(k8s.PLACEHOLDERS)}")


def _has_token(content: bytes) -> bool:
    return bool(BOOTSTRAP_TOKEN.search(content.decode(errors="replace")))


def _secret_fields(doc):
    token = (doc.get("discovery") or {}).get("bootstrapToken") or {}
    if "token" in token:
        yield "discovery.bootstrapToken.token", token["token"]
    for h in token.get("caCertHashes", []):
        yield "discovery.bootstrapToken.caCertHashes", h
    for where in (doc, doc.get("controlPlane") or {}):
        if "certificateKey" in where:
            yield "certificateKey", where["certificateKey"]
    if doc.get("bootstrapTokens"):
        yield "bootstrapTokens", "<inline tokens>"


@validator("kubernetes.gpu_node_scheduling", E, "kubernetes",
           "a rendered GPU node without the GPU taint or a device-plugin config",
           stage="artifacts")
def gpu_node_scheduling(ctx: ArtifactContext) -> Problems:
    configs = {}
    for a in plane_artifacts(ctx.artifacts, MANIFESTS):
        configs.update(device_plugin_configs(a))
    for name, node in rendered_nodes(ctx.artifacts).items():
        labels = node["labels"]
        if labels.get(k8s.GPU_PRESENT) != "true":
            continue
        if not any(t.get("key") == k8s.GPU_TAINT["key"] and t.get("effect") ==
                   k8s.GPU_TAINT["effect"] for t in node["taints"]):
            yield Problem(f"kubernetes/kubeadm ({name})", f"GPU node {name} is registered "
                          f"without the {k8s.GPU_TAINT['key']} taint: any pod may land on it")
        config = labels.get(k8s.DEVICE_PLUGIN_CONFIG_LABEL)
        if config not in configs:
            yield Problem(f"kubernetes/kubeadm ({name})", f"GPU node {name} selects device "
                          f"plugin config '{config}', which the ConfigMap does not have")


# --- tenancy fences --------------------------------------------------------------------------

POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
FENCED_LEVELS = ("baseline", "restricted")   # privileged lets a pod bypass both fences below


@validator("kubernetes.tenant_unfenced", E, "kubernetes",
           "a rendered tenant namespace lacks Pod Security enforcement or the quota that "
           "keeps other tenants' PriorityClasses out", stage="artifacts")
def tenant_unfenced(ctx: ArtifactContext) -> Problems:
    k8s_spec = ctx.estate.spec.kubernetes
    if not k8s_spec or not k8s_spec.tenants:
        return
    docs = [(a.path, d) for a in plane_artifacts(ctx.artifacts, MANIFESTS) for d in _dicts(a)]
    classes = {(d.get("metadata") or {}).get("name") for _, d in docs
               if d.get("kind") == "PriorityClass"} | set(k8s.SYSTEM_PRIORITY_CLASSES)
    for ti, tenant in enumerate(k8s_spec.tenants):
        where = f"kubernetes.tenants[{ti}].name"
        ns = next((d for _, d in docs if d.get("kind") == "Namespace"
                   and (d.get("metadata") or {}).get("name") == tenant.name), None)
        if ns is None:
            continue   # kubernetes.manifest checks report a missing namespace
        level = ((ns.get("metadata") or {}).get("labels") or {}).get(POD_SECURITY_ENFORCE)
        if level not in FENCED_LEVELS:
            yield Problem(where, f"namespace '{tenant.name}' enforces Pod Security level "
                          f"{level!r}: a privileged or hostNetwork pod bypasses its "
                          "NetworkPolicies and GPU fences", "fix the renderer: enforce "
                          "baseline or restricted on every tenant namespace")
        own = k8s.priority_class(tenant)
        barred = set().union(*(_barred_classes(d) for _, d in docs
                               if d.get("kind") == "ResourceQuota"
                               and (d.get("metadata") or {}).get("namespace") == tenant.name))
        open_ = sorted(c for c in classes - {own} - barred if c)
        if open_:
            yield Problem(where, f"pods in namespace '{tenant.name}' may name PriorityClasses "
                          f"{', '.join(open_)} of other tenants or the system: no ResourceQuota there "
                          "allows zero pods in that PriorityClass scope",
                          "fix the renderer: a foreign-priority ResourceQuota per tenant")


def _barred_classes(quota: dict) -> set[str]:
    """PriorityClasses a ResourceQuota allows zero pods of."""
    spec = quota.get("spec") or {}
    if str((spec.get("hard") or {}).get("pods")) != "0":
        return set()
    out = set()
    for expr in (spec.get("scopeSelector") or {}).get("matchExpressions") or []:
        if expr.get("scopeName") == "PriorityClass" and expr.get("operator") == "In":
            out |= set(expr.get("values") or [])
    return out


# --- a pod sees only the GPUs it was allocated -----------------------------------------------

ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
VOLUME_KEY = "accept-nvidia-visible-devices-as-volume-mounts"


@validator("kubernetes.gpu_isolation", E, "kubernetes",
           "the rendered device plugin and container toolkit settings let a pod see GPUs it "
           "was not allocated, or break allocation", stage="artifacts")
def gpu_isolation(ctx: ArtifactContext) -> Problems:
    configs = [(a.path, name, c) for a in plane_artifacts(ctx.artifacts, MANIFESTS)
               for name, c in device_plugin_configs(a).items()]
    if not configs:
        return
    toolkit = ctx.artifacts.get(k8s.TOOLKIT_CONFIG)
    settings = _toml(toolkit.content) if toolkit else {}
    envvar_ok = settings.get(ENVVAR_KEY, True)      # the toolkit's default accepts it
    volumes_ok = settings.get(VOLUME_KEY, False)
    if envvar_ok:
        yield Problem(k8s.TOOLKIT_CONFIG, f"the container toolkit takes NVIDIA_VISIBLE_DEVICES "
                      f"from unprivileged containers ({ENVVAR_KEY} is not false): a pod "
                      "setting it to 'all' sees every GPU of its node",
                      "fix the renderer: set it false and pass devices as volume mounts")
    if not envvar_ok:
        for path, container in _plugin_containers(ctx):
            if not _toolkit_privileged(container.get("securityContext") or {}):
                yield Problem(path, f"device plugin container '{container.get('name')}' has "
                              f"no {k8s.TOOLKIT_PRIVILEGE}, and the toolkit gives a container "
                              "without it no GPU by NVIDIA_VISIBLE_DEVICES: the plugin finds "
                              "no GPU and fails to start",
                              f"fix the renderer: add {k8s.TOOLKIT_PRIVILEGE} to the plugin")
    for path, name, config in configs:
        strategy = ((config.get("flags") or {}).get("plugin") or {}).get("deviceListStrategy")
        strategies = [strategy] if isinstance(strategy, str) else list(strategy or ["envvar"])
        if "volume-mounts" in strategies and not volumes_ok:
            yield Problem(path, f"device plugin config '{name}' passes GPUs as volume mounts "
                          f"but the toolkit does not read them ({VOLUME_KEY} is not true): "
                          "pods get no GPU", "fix the renderer: render both halves")
        if strategies == ["envvar"] and not envvar_ok:
            yield Problem(path, f"device plugin config '{name}' passes GPUs only through "
                          "NVIDIA_VISIBLE_DEVICES, which the toolkit ignores from "
                          "unprivileged containers: pods get no GPU",
                          "fix the renderer: deviceListStrategy volume-mounts")


def _toolkit_privileged(sc: dict) -> bool:
    """Privileged in the container toolkit's sense: CAP_SYS_ADMIN in the bounding set, which
    `privileged` or an added SYS_ADMIN gives (k8s.TOOLKIT_PRIVILEGE)."""
    added = {str(c).upper().removeprefix("CAP_") for c in
             ((sc.get("capabilities") or {}).get("add") or [])}
    return sc.get("privileged") is True or k8s.TOOLKIT_PRIVILEGE in added


def _plugin_containers(ctx):
    """(artifact path, container) for every container running the device plugin binary."""
    for a in plane_artifacts(ctx.artifacts, MANIFESTS):
        for doc in _dicts(a):
            if doc.get("kind") != "DaemonSet":
                continue
            pod = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
            for c in pod.get("containers") or []:
                if isinstance(c, dict) and "nvidia-device-plugin" in (c.get("command") or []):
                    yield a.path, c


def _toml(content: bytes) -> dict:
    import tomllib   # only for a Kubernetes plane: not on every command's start
    try:
        return tomllib.loads(content.decode(errors="replace"))
    except tomllib.TOMLDecodeError:
        return {}
