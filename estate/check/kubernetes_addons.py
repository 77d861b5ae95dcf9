"""The cluster add-ons Estate renders, read back from the rendered manifests: Kueue's
configuration manages every tenant namespace (so no tenant workload holds GPUs outside
its quota), and every add-on's pods have a node to land on (every node carries a taint:
control planes, GPU pools)."""
from __future__ import annotations

from estate.check.kubernetes_schema import (_config_validator, _dicts, _errors, _first,
                                            plane_artifacts, rendered_nodes)
from estate.check.kubernetes_quota import RESOURCES, amount, rendered_reservations
from estate.check.kubernetes_quota import _capacity as capacity
from estate.check.ownership import HARD_EFFECTS, _name, _tenant_path, rendered, tolerates
from estate.check.registry import ArtifactContext, Problem, Problems, validator
from estate.findings import Severity
from estate.model import kubernetes as k8s
from estate.model.services import MANIFESTS

E = Severity.ERROR
KUEUE_SCHEMA = ("config.kueue.x-k8s.io_v1beta2.yaml", "Configuration")
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")
INIT = "kubernetes/kubeadm/init.yaml"
# namespaces whose pods Kueue must never gate: its own webhook would block its own pods,
# and kube-system holds the cluster's DNS and the device plugin
NEVER_MANAGED = ("kube-system", k8s.KUEUE_NAMESPACE)


# --- Kueue's configuration ----------------------------------------------------------------

def rendered_kueue_config(artifacts) -> tuple[str, dict | None]:
    """(artifact path, parsed controller Configuration) from the rendered install."""
    for a in plane_artifacts(artifacts, MANIFESTS):
        for doc in _dicts(a):
            meta = doc.get("metadata") or {}
            if (doc.get("kind"), meta.get("name")) == ("ConfigMap", k8s.KUEUE_CONFIG_MAP):
                text = (doc.get("data") or {}).get(k8s.KUEUE_CONFIG_KEY)
                return a.path, _first(str(text)) if text is not None else None
    return f"{MANIFESTS}{k8s.KUEUE_CONTROLLER}", None


def selects(selector, labels: dict) -> bool:
    """Kubernetes' LabelSelector match; a missing selector selects nothing here (Kueue then
    defaults to every namespace but kube-system and its own, which is not Estate's scope)."""
    if not isinstance(selector, dict):
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        have, values = e.get("key") in labels, e.get("values") or []
        value = labels.get(e.get("key"))
        ok = {"In": have and value in values, "NotIn": not have or value not in values,
              "Exists": have, "DoesNotExist": not have}.get(e.get("operator"), False)
        if not ok:
            return False
    return True


def _ns(name: str) -> dict:
    return {k8s.NAMESPACE_NAME_LABEL: name}        # the label the API server sets


def _local_queues(artifacts) -> set[tuple[str, str]]:
    return {((d.get("metadata") or {}).get("namespace"), (d.get("metadata") or {}).get("name"))
            for a in plane_artifacts(artifacts, MANIFESTS) for d in _dicts(a)
            if d.get("kind") == "LocalQueue" and d.get("apiVersion") == k8s.KUEUE_API}


@validator("kubernetes.kueue_config_invalid", E, "kubernetes",
           "the rendered Kueue controller configuration is missing or not Kueue's schema",
           stage="artifacts")
def kueue_config_invalid(ctx: ArtifactContext) -> Problems:
    k = ctx.estate.spec.kubernetes
    if not k or not k.tenants:
        return
    path, config = rendered_kueue_config(ctx.artifacts)
    if not isinstance(config, dict):
        yield Problem(path, f"no Kueue controller configuration ({k8s.KUEUE_CONFIG_MAP} "
                      f"ConfigMap, key {k8s.KUEUE_CONFIG_KEY}) in the rendered manifests",
                      "re-render: Estate installs Kueue with its configuration")
        return
    files = [a for a in plane_artifacts(ctx.artifacts, MANIFESTS) if a.path == path]
    if files:
        yield from _kueue_config_problems(path, config)


def _kueue_config_problems(path: str, config: dict):
    for err in _errors(_config_validator(*KUEUE_SCHEMA), config)[:5]:
        yield Problem(path, f"Kueue Configuration: {err}",
                      "fix the renderer: k8s/schemas/config.kueue.x-k8s.io_v1beta2.yaml "
                      "lists what Kueue accepts")


@validator("kubernetes.kueue_tenant_unmanaged", E, "kubernetes",
           "a tenant's Jobs, Pods or Deployments can run without a Kueue admission",
           stage="artifacts")
def kueue_tenant_unmanaged(ctx: ArtifactContext) -> Problems:
    k = ctx.estate.spec.kubernetes
    if not k or not k.tenants:
        return
    path, config = rendered_kueue_config(ctx.artifacts)
    if not isinstance(config, dict):
        return                          # kubernetes.kueue_config_invalid reports it
    hint = "re-render: Estate's Kueue configuration manages exactly the tenants' namespaces"
    if config.get("manageJobsWithoutQueueName") is not True:
        yield Problem(path, "Kueue's manageJobsWithoutQueueName is not true: a tenant's Job "
                      "or Deployment without a queue name runs unadmitted, outside its "
                      "ClusterQueue's GPU quota", hint)
    selector = config.get("managedJobsNamespaceSelector")
    frameworks = set((config.get("integrations") or {}).get("frameworks") or [])
    missing = [f for f in k8s.KUEUE_REQUIRED_FRAMEWORKS if f not in frameworks]
    if missing:
        yield Problem(path, f"Kueue's integrations leave out {', '.join(missing)}: such "
                      "objects in a tenant namespace run without an admission", hint)
    queues = _local_queues(ctx.artifacts)
    for t in k.tenants:
        if not selects(selector, _ns(t.name)):
            yield Problem(path, f"Kueue's managedJobsNamespaceSelector does not select tenant "
                          f"namespace '{t.name}': its pods and Deployments bypass Kueue", hint)
        if (t.name, k8s.DEFAULT_LOCAL_QUEUE) not in queues:
            yield Problem(path, f"namespace '{t.name}' has no LocalQueue "
                          f"'{k8s.DEFAULT_LOCAL_QUEUE}': what names no queue is never "
                          "admitted", hint)
    for ns in NEVER_MANAGED:
        if selects(selector, _ns(ns)):
            yield Problem(path, f"Kueue's managedJobsNamespaceSelector selects '{ns}': "
                          "Kueue would gate the pods of the cluster's own add-ons", hint)


# --- add-ons have a node -----------------------------------------------------------------

def scheduling_nodes(artifacts) -> dict[str, dict]:
    """Rendered nodes with the labels and taints a scheduler sees: kubeadm's registration,
    the control-plane label kubeadm's mark-control-plane phase sets, and the well-known
    labels every kubelet sets on its own Node (Estate's nodes are Debian amd64 machines)."""
    nodes = rendered_nodes(artifacts)
    for name, node in nodes.items():
        for key, value in (("kubernetes.io/os", "linux"), ("kubernetes.io/arch", "amd64"),
                           ("kubernetes.io/hostname", name)):
            node["labels"].setdefault(key, value)
    for a in plane_artifacts(artifacts, "kubernetes/kubeadm/"):
        for doc in _dicts(a):
            reg = doc.get("nodeRegistration")
            control = doc.get("kind") == "InitConfiguration" or "controlPlane" in doc
            if isinstance(reg, dict) and control and reg.get("name") in nodes:
                nodes[reg["name"]]["labels"][k8s.CONTROL_PLANE_LABEL] = ""
    return nodes


def _required_terms(pod: dict) -> list:
    affinity = ((pod.get("affinity") or {}).get("nodeAffinity") or {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return required.get("nodeSelectorTerms") or []


def lands_on(pod: dict, node: dict) -> bool:
    """Whether the scheduler may put the pod template on the node: nodeSelector, required
    node affinity (any term), and a toleration for every hard taint."""
    labels = node["labels"]
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    terms = _required_terms(pod)
    if terms and not any(selects({"matchExpressions": t.get("matchExpressions")}, labels)
                         for t in terms):
        return False
    tolerations = pod.get("tolerations") or []
    return all(any(tolerates(t, taint) for t in tolerations)
               for taint in node["taints"] if taint.get("effect") in HARD_EFFECTS)


def pod_requests(pod: dict, resources=RESOURCES) -> dict[str, float]:
    """{'cpu': millicores, 'memory': MiB, ...} the pod requests as the scheduler counts it:
    its containers' sum, or its largest init container's where that is more."""
    def each(containers) -> list[dict[str, float]]:
        return [{res: amount((((c.get("resources") or {}).get("requests")) or {}).get(res, 0),
                             unit) for res, (unit, _) in resources.items()}
                for c in containers or [] if isinstance(c, dict)]
    run, init = each(pod.get("containers")), each(pod.get("initContainers"))
    return {res: max(sum(c[res] for c in run), max((c[res] for c in init), default=0.0))
            for res in resources}


def _landing(pod: dict, nodes: dict, classes: dict, kept: dict) -> tuple[bool, list]:
    """(whether some node takes the pod, the nodes it may run on but has no room on);
    stops at the first node that takes it (a plane may have thousands)."""
    want, crowded = pod_requests(pod), list[str]()
    for name, node in nodes.items():
        if not lands_on(pod, node):
            continue
        cls = classes.get(name)
        if cls is None or all(want[r] <= capacity(cls, r) - kept[r] for r in RESOURCES):
            return True, crowded
        crowded.append(name)
    return False, crowded


@validator("kubernetes.addon_unschedulable", E, "kubernetes",
           "a rendered add-on (Deployment, DaemonSet, StatefulSet) has no node it can run on",
           stage="artifacts")
def addon_unschedulable(ctx: ArtifactContext) -> Problems:
    if not ctx.estate.spec.kubernetes:
        return
    nodes, kept = scheduling_nodes(ctx.artifacts), rendered_reservations(ctx.artifacts)
    classes = {n.name: n.cls for n in k8s.plane_nodes(ctx.estate) if n.cls is not None}
    for a in plane_artifacts(ctx.artifacts, MANIFESTS):
        for doc in _dicts(a):
            if doc.get("kind") not in WORKLOADS:
                continue
            pod = (((doc.get("spec") or {}).get("template") or {}).get("spec")) or {}
            lands, crowded = _landing(pod, nodes, classes, kept)
            if lands:
                continue
            meta = doc.get("metadata") or {}
            what = f"{doc['kind']} {meta.get('namespace')}/{meta.get('name')}"
            if crowded:
                want = pod_requests(pod)
                asks = ", ".join(f"{want[r]:.0f} {RESOURCES[r][1]} of {r}" for r in RESOURCES)
                yield Problem(a.path, f"{what} requests {asks}, more than the allocatable of "
                              f"every node it may run on ({', '.join(crowded[:5])})",
                              "give those nodes more capacity or lower kubernetes.kubelet's "
                              "reservations")
                continue
            yield Problem(a.path, f"{what} has no node to run on: none of the {len(nodes)} "
                          "rendered nodes matches its nodeSelector and node affinity with "
                          "every hard taint tolerated (control planes and GPU pools are "
                          "tainted)",
                          "re-render: Estate places its add-ons on the control planes "
                          "(estate.model.kubernetes.ADDON_TOLERATIONS)")


# --- quotas leave room for the DaemonSets -------------------------------------------------

def _daemonsets(artifacts) -> list[tuple[str, dict]]:
    return [(_name(d), (((d.get("spec") or {}).get("template") or {}).get("spec")) or {})
            for a in plane_artifacts(artifacts, MANIFESTS) for d in _dicts(a)
            if d.get("kind") == "DaemonSet"]


def _queue_quota(queues, flavor: str, res: str, unit: float) -> list[tuple[str, float]]:
    """[(ClusterQueue, its nominal quota of res in flavor)], in units of unit."""
    return [(_name(q), amount(r.get("nominalQuota", 0), unit))
            for q in queues for g in (q.get("spec") or {}).get("resourceGroups") or []
            for f in g.get("flavors") or [] if f.get("name") == flavor
            for r in f.get("resources") or [] if r.get("name") == res]


@validator("kubernetes.quota_over_daemonsets", E, "kubernetes",
           "the tenants' quotas in a GPU pool, with what the rendered DaemonSets request on "
           "its nodes, add up to more than the nodes hand out", stage="artifacts")
def quota_over_daemonsets(ctx: ArtifactContext) -> Problems:
    """A ClusterQueue's CPU and memory (and GPU units) are what Kueue admits on the pool: a
    DaemonSet's pod lands on every node first, so quotas that split the whole allocatable
    admit workloads that then find no room (estate.model.kubernetes.DAEMONSET_REQUESTS)."""
    if not ctx.estate.spec.kubernetes:
        return
    r, nodes = rendered(ctx), scheduling_nodes(ctx.artifacts)
    kept = rendered_reservations(ctx.artifacts)
    classes = {n.name: n.cls for n in k8s.plane_nodes(ctx.estate) if n.cls is not None}
    daemonsets = _daemonsets(ctx.artifacts)
    gpu_res = {res for _, pod in daemonsets for c in pod.get("containers") or []
               for res in (((c.get("resources") or {}).get("requests")) or {})
               if str(res).startswith("nvidia.com/")}
    resources = {**RESOURCES, **{res: (1, "units") for res in sorted(gpu_res)}}
    for flavor in (_name(f) for f in r.flavors):
        pool = [n for n in r.pool_nodes(flavor) if n.name in classes and n.name in nodes]
        held: dict[str, dict[str, float]] = {}      # DaemonSet -> resource -> on the pool
        for name, pod in daemonsets:
            want = pod_requests(pod, resources)
            for n in pool:
                if lands_on(pod, nodes[n.name]):
                    for res, v in want.items():
                        held.setdefault(name, dict.fromkeys(resources, 0.0))[res] += v
        for res, (unit, word) in resources.items():
            claims = _queue_quota(r.queues, flavor, res, unit)
            taken = {name: v[res] for name, v in held.items() if v[res]}
            have = (sum(max(capacity(classes[n.name], res) - kept[res], 0) for n in pool)
                    if res in RESOURCES else sum(n.advertised.get(res, 0) for n in pool))
            total = sum(q for _, q in claims)
            if not claims or not taken or total + sum(taken.values()) <= have + 1e-6:
                continue
            yield Problem(
                _tenant_path(ctx.estate, claims[-1][0], f"{MANIFESTS}50-kueue.yaml",
                             "gpus", flavor),
                f"ClusterQueues give {total:.0f} {word} of {res} in flavor '{flavor}' "
                f"({', '.join(f'{q} {n:.0f}' for q, n in claims)}) and the DaemonSets on its "
                f"{len(pool)} nodes request {sum(taken.values()):.0f} "
                f"({', '.join(f'{d} {v:.0f}' for d, v in sorted(taken.items()))}): more "
                f"than the {have:.0f} the nodes hand out",
                "re-render: quotas split what the DaemonSets leave "
                "(estate.model.kubernetes.DAEMONSET_REQUESTS); a DaemonSet whose requests "
                "grew needs its figure there")
