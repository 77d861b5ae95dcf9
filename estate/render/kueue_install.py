"""Kueue itself: the vendored release manifests (k8s/kueue/manifests.yaml, checksummed in
k8s/kueue/SHA256SUMS, validated and indexed in k8s/kueue/manifests.index.json when
vendored: estate.check.kubernetes_schema.index_of), rendered with Estate's configuration and placement: the release as
40-kueue-install.yaml, the controller's ConfigMap and Deployment as 41-kueue-controller.yaml.

Three documents of the release are Estate's: the kueue-system Namespace (fenced off the GPU
pools like a tenant's), the controller's Configuration (ConfigMap
kueue-manager-config), which makes Kueue manage every Job, Pod, Deployment and StatefulSet
in the tenants' namespaces (queue name or not), and the controller's Deployment, which is
given the add-on placement (estate.model.kubernetes.ADDON_TOLERATIONS) so it has a node to
run on. Every other document is the release's text, byte for byte.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache

import yaml

from estate import paths
from estate.model import kubernetes as k8s
from estate.model.services import MANIFESTS
from estate.render.artifacts import Artifact
from estate.render.templates import RenderError, line_value
from estate.spec.resolved import Estate

KUEUE_DIR = paths.K8S / "kueue"
MANIFESTS_FILE = KUEUE_DIR / "manifests.yaml"
SUMS_FILE = KUEUE_DIR / "SHA256SUMS"
INDEX_FILE = KUEUE_DIR / "manifests.index.json"
CONFIG_MAP = ("ConfigMap", k8s.KUEUE_CONFIG_MAP)
CONFIG_KEY = k8s.KUEUE_CONFIG_KEY
DEPLOYMENT = ("Deployment", k8s.KUEUE_DEPLOYMENT)
NAMESPACE = ("Namespace", k8s.KUEUE_NAMESPACE)
OUTPUT = k8s.KUEUE_INSTALL
CONTROLLER = k8s.KUEUE_CONTROLLER
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
REQUIRED_FRAMEWORKS = k8s.KUEUE_REQUIRED_FRAMEWORKS


@lru_cache(maxsize=1)
def vendored() -> tuple[tuple[str, str, str], ...]:
    """(kind, name, text) of each document of the release, after checking its checksum."""
    data = MANIFESTS_FILE.read_bytes()
    want = SUMS_FILE.read_text().split()[0]
    have = hashlib.sha256(data).hexdigest()
    if have != want:
        raise RenderError(f"{MANIFESTS_FILE}: sha256 {have}, SHA256SUMS says {want}; "
                          "re-vendor it with scripts/kueue-vendor.sh")
    texts = data.decode().split("\n---\n")
    index = json.loads(INDEX_FILE.read_text())
    if index["sha256"] != have:
        raise RenderError(f"{INDEX_FILE} indexes another file than {MANIFESTS_FILE} (sha256 "
                          f"{index['sha256']}); re-vendor it with scripts/kueue-vendor.sh")
    return tuple((d["kind"], d["name"], text.rstrip("\n") + "\n")
                 for d, text in zip(index["documents"], texts, strict=True))


def vendored_doc(kind: str, name: str) -> dict:
    return next(yaml.load(t, Loader=_LOADER) for k, n, t in vendored() if (k, n) == (kind, name))


def kueue_configuration(estate: Estate) -> dict:
    """The release's controller Configuration with Estate's management scope: every Job,
    Pod, Deployment and StatefulSet of a tenant namespace is Kueue's, queue name or not
    (an unlabelled one gets the namespace's LocalQueue 'default'), so no tenant workload
    holds GPUs outside its ClusterQueue's quota; nothing outside the tenants' namespaces is
    managed (kube-system, kueue-system and the operators' namespaces stay Kueue-free)."""
    cm = vendored_doc(*CONFIG_MAP)
    config = yaml.load(cm["data"][CONFIG_KEY], Loader=_LOADER)
    tenants = [t.name for t in estate.spec.kubernetes.tenants]
    config["manageJobsWithoutQueueName"] = True
    config["managedJobsNamespaceSelector"] = {"matchExpressions": [
        {"key": k8s.NAMESPACE_NAME_LABEL, "operator": "In", "values": tenants}]}
    frameworks = config.setdefault("integrations", {}).setdefault("frameworks", [])
    frameworks += [f for f in REQUIRED_FRAMEWORKS if f not in frameworks]
    return config


def _config_map(estate: Estate, to_yaml) -> str:
    cm = vendored_doc(*CONFIG_MAP)
    cm["data"] = {CONFIG_KEY: to_yaml(kueue_configuration(estate)) + "\n"}
    return to_yaml(cm) + "\n"


def _deployment(to_yaml) -> str:
    """The controller, placed where the add-ons Estate renders may run."""
    dep = vendored_doc(*DEPLOYMENT)
    pod = dep["spec"]["template"]["spec"]
    pod["tolerations"] = [dict(t) for t in k8s.ADDON_TOLERATIONS]
    pod["affinity"] = k8s.addon_affinity()
    # the image's own user (Dockerfile at v0.19.2: distroless `nonroot`, USER 65532:65532),
    # named so that a check can see it is no host UID
    pod["securityContext"].update({"runAsUser": KUEUE_UID, "runAsGroup": KUEUE_UID})
    return to_yaml(dep) + "\n"


KUEUE_UID = 65532
# Kueue's controller passes Pod Security `restricted` (non-root, no privilege escalation,
# every capability dropped, RuntimeDefault seccomp): enforce it, rather than fall back to
# the API server's default (privileged).
POD_SECURITY = {"pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest"}


def _namespace(to_yaml) -> str:
    """kueue-system, fenced like a tenant namespace: PodTolerationRestriction lets its pods
    carry only the add-on tolerations, never a GPU pool's (ownership.tenant_pool_access
    proves it for every rendered Namespace)."""
    ns = vendored_doc(*NAMESPACE)
    ns["metadata"].setdefault("labels", {}).update(POD_SECURITY)
    allowed = list(k8s.DEFAULT_TOLERATIONS) + list(k8s.ADDON_TOLERATIONS)
    ns["metadata"].setdefault("annotations", {})[k8s.TOLERATIONS_WHITELIST] = json.dumps(
        allowed, separators=(",", ":"))
    return to_yaml(ns) + "\n"


@lru_cache(maxsize=1)
def _install(to_yaml) -> bytes:
    """The release without the controller's two documents, the Namespace fenced: the same
    bytes for every spec, so a process checking many specs parses and validates it once."""
    head = (f"# Kueue {k8s.KUEUE_VERSION}, generated by Estate. Do not edit. The release's "
            "manifests.yaml\n# (k8s/kueue/, vendored and checksummed) with the kueue-system "
            "Namespace fenced;\n# the controller's configuration and Deployment are in "
            f"{CONTROLLER}. Apply with\n# kubectl apply --server-side (the CRDs are too "
            "large for a client-side apply).\n")
    body = "---\n".join(_namespace(to_yaml) if (kind, name) == NAMESPACE else text
                        for kind, name, text in vendored()
                        if (kind, name) not in (CONFIG_MAP, DEPLOYMENT))
    return (head + body).encode()


def build_kueue_install(estate: Estate, source: str, to_yaml, consumers) -> list[Artifact]:
    """Kueue (the release, then Estate's controller configuration and placement); nothing
    without tenants."""
    if not estate.spec.kubernetes.tenants:
        return []
    head = (f"# Kueue {k8s.KUEUE_VERSION}'s controller for {estate.spec.name}, generated by "
            f"Estate from {line_value(source or 'the spec', CONTROLLER)}.\n# Do not edit. "
            f"The release's {CONFIG_MAP[1]} and {DEPLOYMENT[1]} with Estate's\n"
            "# configuration (the tenants' namespaces are Kueue's) and placement (the "
            "control planes).\n")
    body = _config_map(estate, to_yaml) + "---\n" + _deployment(to_yaml)
    return [Artifact(f"{MANIFESTS}{OUTPUT}", _install(to_yaml), consumers, k8s.PLANE),
            Artifact(f"{MANIFESTS}{CONTROLLER}", (head + body).encode(), consumers, k8s.PLANE)]


# --- validation data derived from the release (k8s/crds/) -------------------------------

CRD_DIR = KUEUE_DIR.parent / "crds"
VALIDATED_KINDS = ("resourceflavors", "clusterqueues", "localqueues")   # what Estate renders


def _strip(schema):
    """A schema without description texts and without the status subtree."""
    if isinstance(schema, dict):
        return {k: _strip(v) for k, v in schema.items()
                if k != "description" and not (k == "status" and isinstance(v, dict)
                                               and "type" in v)}
    if isinstance(schema, list):
        return [_strip(v) for v in schema]
    return schema


def trimmed_crd(plural: str, version: str = "v1beta2") -> dict:
    """The release's CRD of a Kueue kind as k8s/crds keeps it for validation: only the
    version Estate writes, descriptions and the status schema removed, every other schema
    keyword as upstream wrote it."""
    crd = vendored_doc("CustomResourceDefinition", f"{plural}.kueue.x-k8s.io")
    spec = crd["spec"]
    [v] = [dict(v) for v in spec["versions"] if v["name"] == version]
    v.pop("additionalPrinterColumns", None)
    v["schema"] = _strip(v["schema"])
    return {"apiVersion": crd["apiVersion"], "kind": crd["kind"],
            "metadata": {"annotations": crd["metadata"]["annotations"],
                         "name": crd["metadata"]["name"]},
            "spec": {k: spec[k] for k in ("group", "names", "scope")} | {"versions": [v]}}


def write_crds() -> None:
    """Regenerate k8s/crds/ from the vendored release (after scripts/kueue-vendor.sh)."""
    for plural in VALIDATED_KINDS:
        head = (f"# Trimmed from Kueue {k8s.KUEUE_VERSION}'s release manifests "
                "(k8s/kueue/manifests.yaml) by\n# estate.render.kueue_install.write_crds: "
                "only the v1beta2 version, descriptions and the\n# status schema (never "
                "rendered) removed. See README.md.\n")
        text = yaml.safe_dump(trimmed_crd(plural), sort_keys=False, width=1000)
        (CRD_DIR / f"kueue.x-k8s.io_{plural}.yaml").write_text(head + text)


if __name__ == "__main__":
    write_crds()
