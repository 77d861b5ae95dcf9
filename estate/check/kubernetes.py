"""Kubernetes validators: the spec's Kubernetes plane, then the rendered files themselves.

Spec checks catch what would make the render wrong or unusable (names that cannot be
Kubernetes names, labels the kubelet refuses, sharing settings for GPUs that cannot do
them). Artifact checks validate every rendered file against the schema of the tool that
reads it: Kubernetes objects strictly with kubernetes-validate for the pinned minor
version, Kueue objects against their CRDs (k8s/crds/), kubeadm/kubelet/kind/device-plugin
configs against closed schemas transcribed from upstream types (k8s/schemas/), and
containerd's config as TOML. They also cross-check the rendered quotas against the
rendered nodes, and that no join secret was written.
"""
from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml
from referencing import Registry, Resource

from estate.check._common import HostSet, group_of, hosts_where, parse_hosts, problem
from estate.check.findings import Severity
from estate.check.registry import Problem, validator
from estate.model import kubernetes as k8s
from estate.model.services import MANIFESTS
from estate.spec.types import (DNS_LABEL, DNS_SUBDOMAIN, LABEL_VALUE, label_key_problems,
                               label_value_problems)

E, W = Severity.ERROR, Severity.WARNING
ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "k8s" / "crds"
SCHEMA_DIR = ROOT / "k8s" / "schemas"

# Kubernetes' own name and label syntax (apimachinery validation) is the spec types'.
# Labels a kubelet may set on its own Node (NodeRestriction); other kubernetes.io and
# k8s.io keys make the kubelet refuse to start.
KUBELET_ALLOWED = {"kubernetes.io/hostname", "kubernetes.io/instance-type", "kubernetes.io/os",
                   "kubernetes.io/arch", "beta.kubernetes.io/instance-type",
                   "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
                   "failure-domain.beta.kubernetes.io/zone",
                   "failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/zone",
                   "topology.kubernetes.io/region", "node.kubernetes.io/instance-type"}
KUBELET_ALLOWED_PREFIXES = ("kubelet.kubernetes.io/", "node.kubernetes.io/")
RESERVED_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}
MIN_MINOR = 31          # kubeadm.k8s.io/v1beta4 needs kubeadm 1.31
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when present
BOOTSTRAP_TOKEN = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b")
CONFIG_SCHEMAS = {      # apiVersion -> closed schema file under k8s/schemas/
    k8s.KUBEADM_API: "kubeadm.k8s.io_v1beta4.yaml",
    "kubelet.config.k8s.io/v1beta1": "kubelet.config.k8s.io_v1beta1.yaml",
    k8s.KIND_API: "kind.x-k8s.io_v1alpha4.yaml",
}
DEVICE_PLUGIN_SCHEMA = ("device-plugin-config_v1.yaml", "Config")


# --- schema validation, shared with the tests -------------------------------------------

def schema_version(version: str) -> str | None:
    """The kubernetes-validate schema set for a Kubernetes version's minor, if shipped."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.\d+", version)
    if not m:
        return None
    want = f"{m.group(1)}.{m.group(2)}.0"
    return want if want in kubernetes_validate.utils.all_versions() else None


def label_problems(key: str, value: str) -> list[str]:
    return label_key_problems(key) + label_value_problems(value)


@lru_cache(maxsize=None)
def _builtin_validator(version: str, api_version: str, kind: str):
    """A strict Draft 2020-12 validator from kubernetes-validate's shipped schemas."""
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    base = f"kubernetes-json-schema/v{version}-local-strict"
    try:
        schema = kubernetes_validate.utils.schema_contents(
            f"{base}/{kind.lower()}-{group}.json", version)
    except FileNotFoundError:
        return None
    registry = _definitions(version) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


@lru_cache(maxsize=None)
def _definitions(version: str) -> Resource:
    """The shared _definitions.json of a schema set (about 0.3 MB of JSON): read once per
    process, not once per kind."""
    return Resource.from_contents(kubernetes_validate.utils.schema_contents(
        f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version))


def _closed(schema):
    """An OpenAPI schema with every object that lists properties closed to unknown fields."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@lru_cache(maxsize=None)
def _crd_validators() -> dict:
    """(apiVersion, kind) -> validator, for every CRD version under k8s/crds/."""
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=_LOADER)
        spec = crd["spec"]
        for v in spec["versions"]:
            schema = _closed(v["schema"]["openAPIV3Schema"])
            out[(f"{spec['group']}/{v['name']}", spec["names"]["kind"])] = \
                jsonschema.Draft202012Validator(schema)
    return out


@lru_cache(maxsize=None)
def _config_validator(filename: str, kind: str):
    doc = yaml.load((SCHEMA_DIR / filename).read_text(), Loader=_LOADER)
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{kind}", "$defs": doc["$defs"]})


def _errors(v, doc) -> list[str]:
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in sorted(v.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


def validate_object(doc: dict, version: str) -> list[str]:
    """Problems with one Kubernetes API object (built-in or Kueue), empty if valid."""
    if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
        return ["<root>: not a Kubernetes object (apiVersion and kind are required)"]
    api, kind = doc["apiVersion"], doc["kind"]
    crd = _crd_validators().get((api, kind))
    if crd is not None:
        return _errors(crd, doc) + _name_problems(doc)
    schemas = schema_version(version)
    if schemas is None:
        return [f"<root>: kubernetes-validate ships no schema for Kubernetes {version}"]
    v = _builtin_validator(schemas, api, kind)
    if v is None:
        return [f"<root>: no schema for {kind} {api} in Kubernetes {schemas} or k8s/crds/"]
    return _errors(v, doc) + _name_problems(doc)


def _name_problems(doc: dict) -> list[str]:
    """Object and namespace names, which the JSON schemas leave as plain strings."""
    meta = doc.get("metadata") or {}
    out = []
    name = meta.get("name", "")
    pattern = DNS_LABEL if doc["kind"] == "Namespace" else DNS_SUBDOMAIN
    if not pattern.fullmatch(str(name)) or len(str(name)) > 253:
        out.append(f"metadata.name: '{name}' is not a valid {doc['kind']} name")
    ns = meta.get("namespace")
    if ns is not None and not DNS_LABEL.fullmatch(ns):
        out.append(f"metadata.namespace: '{ns}' is not a valid namespace name")
    for key, value in (meta.get("labels") or {}).items():
        out += [f"metadata.labels: {p}" for p in label_problems(key, value)]
    return out


def validate_config(doc: dict) -> list[str]:
    """Problems with a kubeadm, kubelet or kind config document."""
    if not isinstance(doc, dict):
        return [f"<root>: a {type(doc).__name__}, not a mapping"]
    filename = CONFIG_SCHEMAS.get(doc.get("apiVersion"))
    if filename is None:
        return [f"<root>: no schema for apiVersion {doc.get('apiVersion')!r}"]
    return _errors(_config_validator(filename, doc.get("kind", "")), doc)


def validate_device_plugin_config(doc) -> list[str]:
    return _errors(_config_validator(*DEVICE_PLUGIN_SCHEMA), doc)


def containerd_problems(text: str, gpu: bool) -> list[str]:
    """TOML syntax and the settings Estate relies on (containerd ignores unknown keys)."""
    try:
        cfg = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [f"not valid TOML: {exc}"]
    cri = cfg.get("plugins", {}).get("io.containerd.grpc.v1.cri", {}).get("containerd", {})
    runtimes = cri.get("runtimes", {})
    out = []
    want = [("runc", None)] + ([(k8s.RUNTIME_HANDLER, k8s.NVIDIA_RUNTIME_BINARY)] if gpu else [])
    for name, binary in want:
        opts = runtimes.get(name, {}).get("options", {})
        if opts.get("SystemdCgroup") is not True:
            out.append(f"runtime '{name}' does not set SystemdCgroup = true")
        if binary and opts.get("BinaryName") != binary:
            out.append(f"runtime '{name}' does not run {binary}")
    default = k8s.RUNTIME_HANDLER if gpu else "runc"
    if cri.get("default_runtime_name") != default:
        out.append(f"default_runtime_name is not '{default}'")
    return out


# --- reading rendered artifacts ----------------------------------------------------------

@lru_cache(maxsize=32768)
def _parse(content: bytes) -> tuple[tuple, str]:
    """The documents of a rendered YAML file and the parse error ('' when none): parsed
    once, however many validators read the file (8,000 kubeadm join files, five readers)."""
    try:
        return tuple(d for d in yaml.load_all(content, Loader=_LOADER) if d is not None), ""
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return (), f"{getattr(exc, 'problem', None) or type(exc).__name__}{at}"
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return (), f"{type(exc).__name__}: {exc}"


def documents(artifact) -> list:
    """Parsed documents; none when the file does not parse (parse_error says why)."""
    return list(_parse(artifact.content)[0])


def parse_error(artifact) -> str:
    return _parse(artifact.content)[1]


def _first(text: str):
    docs = _parse(text.encode())[0]
    return docs[0] if docs else None


def _dicts(artifact) -> list[dict]:
    return [d for d in documents(artifact) if isinstance(d, dict)]


def plane_artifacts(artifacts, prefix: str = "kubernetes/"):
    return [a for path, a in sorted(artifacts.items()) if path.startswith(prefix)]


def rendered_nodes(artifacts) -> dict[str, dict]:
    """Node name -> {labels, taints} as the rendered kubeadm configs register it."""
    out = {}
    for a in plane_artifacts(artifacts, "kubernetes/kubeadm/"):
        for doc in _dicts(a):
            reg = doc.get("nodeRegistration")
            if not isinstance(reg, dict):
                continue
            if reg is None:
                continue
            args = {x["name"]: x["value"] for x in reg.get("kubeletExtraArgs", [])}
            labels = dict(kv.split("=", 1) for kv in args.get("node-labels", "").split(",")
                          if kv)
            out[reg.get("name", a.path)] = {"labels": labels, "taints": reg.get("taints") or []}
    return out


# --- spec validators ----------------------------------------------------------------------

def _plane(estate):
    return estate.spec.kubernetes


@validator("kubernetes.version", E, "kubernetes",
           "a Kubernetes version Estate cannot render or validate")
def version(estate):
    if not _plane(estate):
        return
    v = _plane(estate).version
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", v)
    if not m:
        yield problem(("kubernetes", "version"), f"'{v}' is not a version like 1.31.4",
                      "write MAJOR.MINOR.PATCH without a leading v")
    elif (int(m.group(1)), int(m.group(2))) < (1, MIN_MINOR):
        yield problem(("kubernetes", "version"), f"Kubernetes {v} predates kubeadm's "
                      f"{k8s.KUBEADM_API} API, which Estate writes",
                      f"use 1.{MIN_MINOR} or newer")
    elif schema_version(v) is None:
        shipped = ", ".join(kubernetes_validate.utils.all_versions())
        yield problem(("kubernetes", "version"), f"no API schema for Kubernetes {v} to "
                      f"validate the manifests against (have {shipped})",
                      "pick a version whose minor has a schema, or upgrade kubernetes-validate")


@validator("kubernetes.control_plane", E, "kubernetes",
           "a control plane that is not a defined host with the k8s_control_plane role")
def control_plane(estate):
    if not _plane(estate):
        return
    for i, name in enumerate(_plane(estate).control_plane):
        group = group_of(estate, name)
        if group is None:
            yield problem(("kubernetes", "control_plane", i), f"'{name}' is not a defined host",
                          "name a host from nodes[].hosts")
        elif "k8s_control_plane" not in group.roles:
            yield problem(("kubernetes", "control_plane", i), f"'{name}' lacks the "
                          "k8s_control_plane role, so nothing installs the API server there",
                          "add k8s_control_plane to its group's roles")


@validator("kubernetes.control_plane_not_listed", W, "kubernetes",
           "a k8s_control_plane node missing from kubernetes.control_plane")
def control_plane_not_listed(estate):
    if not _plane(estate):
        return
    listed = set(_plane(estate).control_plane)
    for gi, (group, hosts) in enumerate(zip(estate.spec.nodes, estate.group_hosts)):
        if "k8s_control_plane" in group.roles:
            missing = [h for h in hosts if h not in listed]
            if missing:
                yield problem(("nodes", gi, "roles"), f"{', '.join(missing[:5])} have the "
                              "k8s_control_plane role but are not in kubernetes.control_plane; "
                              "they join as workers", "list them in kubernetes.control_plane")


@validator("kubernetes.single_api_endpoint", W, "kubernetes",
           "several control planes but one API endpoint (the spec has no VIP)")
def single_api_endpoint(estate):
    if _plane(estate) and len(_plane(estate).control_plane) > 1:
        first = _plane(estate).control_plane[0]
        yield problem(("kubernetes", "control_plane"), f"nodes join and clients connect "
                      f"through {first}'s API address: if {first} is down, the other control "
                      "planes serve only clients that name them",
                      "front the control planes with a load balancer or VIP")


@validator("kubernetes.api_address", E, "kubernetes",
           "a Kubernetes node without an address on the API segment")
def api_address(estate):
    plane = _plane(estate)
    if not plane or plane.api_segment not in {s.name for s in estate.spec.segments}:
        return
    for gi, group in enumerate(estate.spec.nodes):
        if group.plane == k8s.PLANE and plane.api_segment not in group.addresses:
            yield problem(("nodes", gi, "addresses"), f"nodes {group.hosts} have no address "
                          f"on '{plane.api_segment}' (kubernetes.api_segment): the kubelet's "
                          "node IP and the API endpoint come from it",
                          f"add '{plane.api_segment}: auto' to their addresses")


@validator("kubernetes.tenant_name", E, "kubernetes",
           "a tenant name that cannot be a namespace, or is used twice")
def tenant_name(estate):
    if not _plane(estate):
        return
    seen = set()
    for i, t in enumerate(_plane(estate).tenants):
        loc = ("kubernetes", "tenants", i, "name")
        if not DNS_LABEL.fullmatch(t.name):
            yield problem(loc, f"tenant '{t.name}' becomes a namespace, which must be lower "
                          "case letters, digits and '-'", f"rename it, e.g. "
                          f"'{re.sub(r'[^a-z0-9-]', '-', t.name.lower()).strip('-')}'")
        elif t.name in RESERVED_NAMESPACES or t.name.startswith("kube-"):
            yield problem(loc, f"'{t.name}' is a namespace Kubernetes reserves",
                          "give the tenant its own name")
        if t.name in seen:
            yield problem(loc, f"tenant '{t.name}' is defined twice", "merge or rename one")
        seen.add(t.name)
        if not DNS_SUBDOMAIN.fullmatch(t.cohort):
            yield problem(("kubernetes", "tenants", i, "cohort"), f"cohort '{t.cohort}' must "
                          "be lower case letters, digits, '-' and '.'", "rename the cohort")


@validator("kubernetes.allow_from_unknown", E, "kubernetes",
           "a tenant allows traffic from a tenant that does not exist")
def allow_from_unknown(estate):
    if not _plane(estate):
        return
    names = {t.name for t in _plane(estate).tenants}
    for i, t in enumerate(_plane(estate).tenants):
        for j, other in enumerate(t.allow_from):
            if other not in names:
                yield problem(("kubernetes", "tenants", i, "allow_from", j), f"unknown "
                              f"tenant '{other}'", f"use one of: {', '.join(sorted(names))}")


def _plane_gpu_classes(estate):
    """(group index, class) of Kubernetes workers with GPUs."""
    for gi, group in enumerate(estate.spec.nodes):
        cls = estate.node_class(group)
        if group.plane == k8s.PLANE and "k8s_worker" in group.roles and cls and cls.gpus:
            yield gi, cls


@validator("kubernetes.gpu_model", E, "kubernetes",
           "a Kubernetes GPU model that cannot name a Kueue flavor, or has two products")
def gpu_model(estate):
    if not _plane(estate):
        return
    products: dict[str, str] = {}
    for gi, cls in _plane_gpu_classes(estate):
        loc = ("node_classes", estate.spec.node_classes.index(cls), "gpus")
        model, product = cls.gpus.model, cls.gpus.product
        if not DNS_LABEL.fullmatch(model):
            yield problem(loc + ("model",), f"GPU model '{model}' names a Kueue ResourceFlavor, "
                          "which must be lower case letters, digits and '-'",
                          f"use e.g. '{model.lower().replace('_', '-')}'")
        for p in label_problems(k8s.GPU_PRODUCT, product):
            yield problem(loc + ("product",), p, "write the product as the driver reports it, "
                          "e.g. NVIDIA-H100-80GB-HBM3")
        if products.setdefault(model, product) != product:
            yield problem(loc + ("product",), f"model '{model}' is both '{products[model]}' and "
                          f"'{product}'; one Kueue flavor selects nodes by one product",
                          "give the second product its own model name")


@validator("kubernetes.gpu_sharing", E, "kubernetes",
           "GPU sharing for an unknown class, or MIG on GPUs without MIG")
def gpu_sharing(estate):
    plane = _plane(estate)
    if not plane:
        return
    for name in plane.gpu_sharing_by_class:
        cls = estate.classes.get(name)
        if cls is None or not cls.gpus:
            why = "is not a node class" if cls is None else "has no GPUs"
            yield problem(("kubernetes", "gpu_sharing_by_class", name), f"'{name}' {why}",
                          "key gpu_sharing_by_class by a GPU node class's name")
    for gi, cls in _plane_gpu_classes(estate):
        config, sharing = k8s.sharing_for(estate, cls)
        if sharing.mode == "mig" and not cls.gpus.mig:
            loc = ("kubernetes", "gpu_sharing") if config == k8s.DEFAULT_SHARING_CONFIG \
                else ("kubernetes", "gpu_sharing_by_class", cls.name)
            yield problem(loc, f"MIG sharing for class '{cls.name}', whose {cls.gpus.model} GPUs "
                          "are not MIG-capable (gpus.mig is false)",
                          "use time-slicing or none for this class")


@validator("kubernetes.mig_quota_units", W, "kubernetes",
           "MIG GPUs under Kueue quotas that count whole GPUs")
def mig_quota_units(estate):
    if not _plane(estate):
        return
    for gi, cls in _plane_gpu_classes(estate):
        _, sharing = k8s.sharing_for(estate, cls)
        if sharing.mode == "mig":
            yield problem(("nodes", gi, "class"), f"class '{cls.name}' runs MIG "
                          f"({sharing.mig_strategy}): the device plugin advertises MIG "
                          f"devices, not whole GPUs, but quotas for '{cls.gpus.model}' count "
                          "whole GPUs because the spec has no MIG layout",
                          "use time-slicing or none on the Kubernetes plane for exact quotas")


@validator("kubernetes.node_labels", E, "kubernetes",
           "node labels the kubelet refuses, or that clash with labels Estate derives")
def node_labels(estate):
    if not _plane(estate):
        return
    derived = {k8s.GPU_PRESENT, k8s.GPU_PRODUCT, k8s.GPU_COUNT, k8s.GPU_REPLICAS,
               k8s.DEVICE_PLUGIN_CONFIG_LABEL, *k8s.TOPOLOGY_LABELS.values()}
    for gi, group in enumerate(estate.spec.nodes):
        if group.plane != k8s.PLANE:
            continue
        for key, value in group.labels.items():
            loc = ("nodes", gi, "labels", key)
            for p in label_problems(key, value):
                yield problem(loc, p, "fix the label")
            prefix = key.rpartition("/")[0]
            restricted = prefix.endswith("kubernetes.io") or prefix.endswith("k8s.io")
            if restricted and key not in KUBELET_ALLOWED \
                    and not key.startswith(KUBELET_ALLOWED_PREFIXES):
                yield problem(loc, f"the kubelet may not set '{key}' on its own node "
                              "(NodeRestriction) and refuses to start",
                              "use your own prefix, e.g. example.com/pool")
            if key in derived:
                yield problem(loc, f"'{key}' is derived from the spec (GPUs, sharing, "
                              "topology); setting it here would contradict it", "remove it")


@validator("kubernetes.topology_label", E, "kubernetes",
           "a switch or block name that cannot be a topology label value")
def topology_label(estate):
    if not _plane(estate):
        return
    topo = estate.spec.topology
    named = [(("topology", "switches", i, "name"), s.name) for i, s in enumerate(topo.switches)]
    named += [(("topology", "blocks", i, "name"), b.name) for i, b in enumerate(topo.blocks)]
    for loc, name in named:
        if not LABEL_VALUE.fullmatch(name) or len(name) > 63:
            yield problem(loc, f"'{name}' becomes a {k8s.TOPOLOGY_LABELS['leaf'].split('/')[0]}"
                          " label value, which must start and end with a letter or digit",
                          "rename it")


@validator("kubernetes.export_name", E, "kubernetes",
           "an export Kubernetes mounts whose name cannot name a PersistentVolume")
def export_name(estate):
    if not _plane(estate):
        return
    plane = hosts_where(estate, lambda g: g.plane == k8s.PLANE)
    mounted = {m.export for m in estate.spec.storage.mounts
               if (hosts := parse_hosts(m.clients)) and HostSet.of(hosts) & plane}
    for i, e in enumerate(estate.spec.storage.exports):
        if e.name in mounted and not DNS_LABEL.fullmatch(e.name):
            yield problem(("storage", "exports", i, "name"), f"export '{e.name}' names "
                          "PersistentVolumes and claims, which must be lower case letters, "
                          "digits and '-'", "rename the export")


# YAML 1.1 (PyYAML, and go-yaml v2 behind kubectl and kubeadm) reads these plain words as
# booleans or null: printed as a name they would not be a string any more.
YAML_WORD = re.compile(r"(?i)y|yes|n|no|true|false|on|off|null|~")


def _strings(value, loc: tuple = ()):
    """(location, text) of every string in a dumped spec, dict keys included."""
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield loc + (key,), key
            yield from _strings(item, loc + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, loc + (i,))


@validator("kubernetes.yaml_word", E, "kubernetes",
           "a name YAML reads as a boolean or null (yes, no, on, off, true, null, ...)")
def yaml_word(estate):
    if not _plane(estate):
        return
    data = estate.spec.model_dump(by_alias=True, mode="json", exclude_defaults=True)
    for loc, text in _strings(data):
        if YAML_WORD.fullmatch(text):
            yield problem(loc, f"'{text}' reads as a boolean or null in the Kubernetes "
                          "manifests and configs (YAML 1.1), not as a name",
                          "rename it, e.g. with a letter or digit added")


# --- artifact validators ------------------------------------------------------------------

def _version(ctx) -> str:
    return ctx.estate.spec.kubernetes.version


@validator("kubernetes.manifest_invalid", E, "kubernetes",
           "a rendered manifest fails strict schema validation", stage="artifacts")
def manifest_invalid(ctx):
    if not ctx.estate.spec.kubernetes:
        return
    for a in plane_artifacts(ctx.artifacts, MANIFESTS):
        if err := parse_error(a):
            yield Problem(a.path, f"the rendered file is not valid YAML: {err}",
                          "a spec value broke out of its place in the template: quote it, or "
                          "remove newlines and quotes from it")
        for i, doc in enumerate(documents(a)):
            for err in validate_object(doc, _version(ctx)):
                yield Problem(a.path, f"document {i} ({_kind(doc)}): {err}",
                              "fix the renderer or template that wrote it")


def _kind(doc) -> str:
    if isinstance(doc, dict):
        return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name', '?')}"
    return type(doc).__name__


@validator("kubernetes.config_invalid", E, "kubernetes",
           "a rendered kubeadm, kubelet, kind, device-plugin or containerd config is invalid",
           stage="artifacts")
def config_invalid(ctx):
    for a in plane_artifacts(ctx.artifacts):
        if a.path.startswith("kubernetes/kubeadm/") or a.path == "kubernetes/kind-config.yaml":
            if err := parse_error(a):
                yield Problem(a.path, f"the rendered file is not valid YAML: {err}",
                              "a spec value broke out of its place in the template")
            for i, doc in enumerate(documents(a)):
                for err in validate_config(doc):
                    yield Problem(a.path, f"document {i} ({_kind(doc)}): {err}")
        elif a.path.startswith("kubernetes/containerd/"):
            for err in containerd_problems(a.content.decode(), gpu="gpu" in a.path):
                yield Problem(a.path, err)
        for name, config in device_plugin_configs(a).items():
            for err in validate_device_plugin_config(config):
                yield Problem(a.path, f"device plugin config '{name}': {err}")


def device_plugin_configs(artifact) -> dict:
    """Config name -> parsed config, from a rendered device-plugin ConfigMap."""
    out = {}
    if artifact.path.startswith(MANIFESTS):
        for doc in _dicts(artifact):
            if doc.get("kind") == "ConfigMap" and \
                    (doc.get("metadata") or {}).get("name") == \
                    f"{k8s.DEVICE_PLUGIN_NAME}-configs":
                out.update({k: _first(str(v)) for k, v in (doc.get("data") or {}).items()})
    return out


@validator("kubernetes.secret_rendered", E, "kubernetes",
           "a join secret written into a rendered file", stage="artifacts")
def secret_rendered(ctx):
    for a in plane_artifacts(ctx.artifacts):
        text = a.content.decode(errors="replace")
        if BOOTSTRAP_TOKEN.search(text):
            yield Problem(a.path, "contains a kubeadm bootstrap token",
                          "leave the token placeholder; roles fill it at join time")
        for doc in _dicts(a) if a.path.startswith("kubernetes/kubeadm/") else ():
            for key, value in _secret_fields(doc):
                if value not in k8s.PLACEHOLDERS:
                    yield Problem(a.path, f"{key} holds a value, not a placeholder",
                                  f"write one of {', '.join(k8s.PLACEHOLDERS)}")


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


def rendered_queues(artifacts) -> tuple[list, list]:
    """(ResourceFlavors, ClusterQueues) from the rendered manifests."""
    flavors, queues = [], []
    for a in plane_artifacts(artifacts, MANIFESTS):
        for doc in _dicts(a):
            if doc.get("apiVersion") == k8s.KUEUE_API:
                {"ResourceFlavor": flavors, "ClusterQueue": queues}.get(doc["kind"], []) \
                    .append(doc)
    return flavors, queues


def flavor_capacity(flavor: dict, nodes: dict[str, dict]) -> int:
    """nvidia.com/gpu units the rendered nodes matching a flavor's labels advertise."""
    want = flavor["spec"].get("nodeLabels", {})
    total = 0
    for node in nodes.values():
        labels = node["labels"]
        if all(labels.get(k) == v for k, v in want.items()):
            total += int(labels.get(k8s.GPU_COUNT, 0)) * int(labels.get(k8s.GPU_REPLICAS, 1))
    return total


def nominal_gpus(queues: list) -> dict[str, int]:
    """Flavor -> sum of the ClusterQueues' nominal nvidia.com/gpu quota."""
    out: dict[str, int] = {}
    for q in queues:
        for group in q["spec"].get("resourceGroups", []):
            for f in group["flavors"]:
                for r in f["resources"]:
                    if r["name"] == k8s.GPU_RESOURCE:
                        out[f["name"]] = out.get(f["name"], 0) + int(r["nominalQuota"])
    return out


@validator("kubernetes.quota_exceeds_nodes", E, "kubernetes",
           "Kueue quotas promise more GPUs than the rendered nodes advertise", stage="artifacts")
def quota_exceeds_nodes(ctx):
    nodes = rendered_nodes(ctx.artifacts)
    flavors, queues = rendered_queues(ctx.artifacts)
    nominal = nominal_gpus(queues)
    for f in flavors:
        name, have = f["metadata"]["name"], flavor_capacity(f, nodes)
        if have == 0:
            yield Problem(MANIFESTS.rstrip("/"), f"ResourceFlavor '{name}' matches no rendered "
                          f"node (nodeLabels {f['spec'].get('nodeLabels')})")
        elif nominal.get(name, 0) > have:
            yield Problem(MANIFESTS.rstrip("/"), f"ClusterQueues give {nominal[name]} "
                          f"{k8s.GPU_RESOURCE} in flavor '{name}'; its nodes advertise {have}")


@validator("kubernetes.gpu_node_scheduling", E, "kubernetes",
           "a rendered GPU node without the GPU taint or a device-plugin config",
           stage="artifacts")
def gpu_node_scheduling(ctx):
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
