"""Kueue itself: the vendored release manifests (k8s/kueue/manifests.yaml, checksummed in
k8s/kueue/SHA256SUMS), rendered with Estate's configuration and placement.

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
from pathlib import Path

import yaml

from estate.model import kubernetes as k8s
from estate.render.artifacts import Artifact
from estate.render.templates import RenderError, line_value
from estate.spec.resolved import Estate

KUEUE_DIR = Path(__file__).resolve().parents[2] / "k8s" / "kueue"
MANIFESTS_FILE = KUEUE_DIR / "manifests.yaml"
SUMS_FILE = KUEUE_DIR / "SHA256SUMS"
CONFIG_MAP = ("ConfigMap", "kueue-manager-config")
CONFIG_KEY = "controller_manager_config.yaml"
DEPLOYMENT = ("Deployment", "kueue-controller-manager")
NAMESPACE = ("Namespace", "kueue-system")
OUTPUT = "40-kueue-install.yaml"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# The integrations whose objects could hold GPUs in a tenant namespace without a Kueue
# admission if Kueue did not manage them (built-in kinds; the others need their CRDs).
REQUIRED_FRAMEWORKS = ("batch/job", "pod", "deployment", "statefulset")


@lru_cache(maxsize=1)
def vendored() -> tuple[tuple[str, str, str], ...]:
    """(kind, name, text) of each document of the release, after checking its checksum."""
    data = MANIFESTS_FILE.read_bytes()
    want = SUMS_FILE.read_text().split()[0]
    have = hashlib.sha256(data).hexdigest()
    if have != want:
        raise RenderError(f"{MANIFESTS_FILE}: sha256 {have}, SHA256SUMS says {want}; "
                          "re-vendor it with scripts/kueue-vendor.sh")
    out = []
    for text in data.decode().split("\n---\n"):
        doc = yaml.load(text, Loader=_LOADER)
        out.append((doc["kind"], doc["metadata"]["name"], text.rstrip("\n") + "\n"))
    return tuple(out)


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
    return to_yaml(dep) + "\n"


def _namespace(to_yaml) -> str:
    """kueue-system, fenced like a tenant namespace: PodTolerationRestriction lets its pods
    carry only the add-on tolerations, never a GPU pool's (ownership.tenant_pool_access
    proves it for every rendered Namespace)."""
    ns = vendored_doc(*NAMESPACE)
    allowed = list(k8s.DEFAULT_TOLERATIONS) + list(k8s.ADDON_TOLERATIONS)
    ns["metadata"].setdefault("annotations", {})[k8s.TOLERATIONS_WHITELIST] = json.dumps(
        allowed, separators=(",", ":"))
    return to_yaml(ns) + "\n"


def build_kueue_install(estate: Estate, source: str, to_yaml, consumers) -> list[Artifact]:
    """The release manifests with Estate's two documents; nothing without tenants."""
    if not estate.spec.kubernetes.tenants:
        return []
    ours = {NAMESPACE: _namespace(to_yaml), CONFIG_MAP: _config_map(estate, to_yaml),
            DEPLOYMENT: _deployment(to_yaml)}
    head = (f"# Kueue {k8s.KUEUE_VERSION} for {estate.spec.name}, generated by Estate from "
            f"{line_value(source or 'the spec', OUTPUT)}. Do not edit.\n"
            "# The release's manifests.yaml (k8s/kueue/, vendored and checksummed) with "
            "Estate's\n# kueue-system Namespace, controller configuration and placement. "
            "Apply with\n# kubectl apply --server-side (the CRDs are too large for the "
            "client-side\n# last-applied annotation), and before 50-kueue.yaml.\n")
    body = "---\n".join(ours.get((kind, name), text) for kind, name, text in vendored())
    return [Artifact(f"kubernetes/manifests/{OUTPUT}", (head + body).encode(), consumers,
                     k8s.PLANE)]


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
