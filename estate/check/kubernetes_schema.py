"""The Kubernetes schema library: strict validation of rendered objects and configs, and
reading rendered artifacts back. Validators (estate.check.kubernetes for the spec,
estate.check.kubernetes_artifacts for the rendered files) and the tests use it.

Kubernetes objects are validated strictly with kubernetes-validate for the pinned minor
version, Kueue objects against their CRDs (k8s/crds/), kubeadm/kubelet/kind/device-plugin
configs against closed schemas transcribed from upstream types (k8s/schemas/), and
containerd's config as TOML.

jsonschema, referencing and kubernetes_validate are imported where they are used: when
estate.cache holds a validator's result for the same files, a run never needs them (0.1 s
of imports).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from contextlib import contextmanager
from functools import lru_cache, partial
from pathlib import Path

import yaml

from estate import cache, paths
from estate.kubernetes_releases import CONTAINERD_CONFIG_VERSION, CONTAINERD_MAJOR
from estate.model import kubernetes as k8s
from estate.model.services import MANIFESTS
from estate.spec.types import DNS_LABEL, DNS_SUBDOMAIN, label_key_problems, label_value_problems

CRD_DIR = paths.K8S / "crds"
SCHEMA_DIR = paths.K8S / "schemas"

# Kubernetes' own name and label syntax (apimachinery validation) is the spec types'.
# Labels a kubelet may set on its own Node (NodeRestriction); other kubernetes.io and
# k8s.io keys make the kubelet refuse to start.
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
    return want if want in shipped_versions() else None


@lru_cache(maxsize=1)
def shipped_versions() -> tuple[str, ...]:
    """The schema sets kubernetes-validate ships, as its utils.all_versions() lists them
    (its directories v<version>-local*), read without importing it (85 ms, jsonschema's
    import included); a unit test holds the two to the same answer."""
    root = Path(importlib.util.find_spec("kubernetes_validate").origin).parent
    names = {p.name.split("-", 1)[0][1:] for p in (root / "kubernetes-json-schema").iterdir()
             if p.name.startswith("v")}
    return tuple(sorted(names, key=lambda v: tuple(int(x) for x in v.split("."))))


def label_problems(key: str, value: str) -> list[str]:
    return label_key_problems(key) + label_value_problems(value)


@lru_cache(maxsize=None)
def _builtin_validator(version: str, api_version: str, kind: str):
    """A strict Draft 2020-12 validator from kubernetes-validate's shipped schemas."""
    import jsonschema
    import kubernetes_validate
    from referencing import Registry, Resource
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
def _definitions(version: str):
    """The shared _definitions.json of a schema set (about 0.3 MB of JSON): read once per
    process, not once per kind."""
    import kubernetes_validate
    from referencing import Resource
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
    import jsonschema
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
    import jsonschema
    defs = yaml.load((SCHEMA_DIR / filename).read_text(), Loader=_LOADER)["$defs"]
    return jsonschema.Draft202012Validator({**_inlined({"$ref": f"#/$defs/{kind}"}, defs),
                                            "$defs": defs})


def _inlined(schema, defs: dict, within: tuple[str, ...] = ()):
    """The schema with each plain {"$ref": "#/$defs/X"} replaced by X, except a recursive
    one (left to "$defs"): jsonschema resolves a $ref again at every document it descends,
    a third of the time of validating 8,000 kubeadm join configs."""
    if isinstance(schema, list):
        return [_inlined(v, defs, within) for v in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if len(schema) == 1 and isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in defs and name not in within:
            return _inlined(defs[name], defs, within + (name,))
    return {k: _inlined(v, defs, within) for k, v in schema.items()}


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
    import tomllib   # only for a Kubernetes plane: not on every command's start
    try:
        cfg = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [f"not valid TOML: {exc}"]
    if cfg.get("version") != CONTAINERD_CONFIG_VERSION:
        return [f"version is {cfg.get('version')!r}, not {CONTAINERD_CONFIG_VERSION} (containerd "
                f"{CONTAINERD_MAJOR}'s config schema)"]
    plugins = cfg.get("plugins", {})
    cri = plugins.get("io.containerd.cri.v1.runtime", {}).get("containerd", {})
    runtimes = cri.get("runtimes", {})
    out = []
    sandbox = plugins.get("io.containerd.cri.v1.images", {}).get("pinned_images", {})
    if not sandbox.get("sandbox"):
        out.append("no sandbox (pause) image pinned")
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
    once, however many validators read the file (8,000 kubeadm join files, five readers),
    and a large file once per machine (estate.cache: the Kueue release is the same bytes
    in every tree)."""
    if len(content) < cache.MIN_BYTES:
        return _parse_now(content) if _SMALL is None else _SMALL.get(
            content_digest(content), lambda: _parse_now(content))
    return cache.remembered("yaml", (content_digest(content), yaml.__version__,
                                     _LOADER.__name__), lambda: _parse_now(content))


# Files under cache.MIN_BYTES, one lookup each, cost more than they save; all of a tree's
# in one entry (estate.cache.Memo) cost one read: a 10,000-node check parsed 17 small
# manifests in 0.015 s of its Kubernetes half, 8,000 workers parse 8,000 join files. One
# entry per spec file: a small spec does not read a large one's 8,000 parses, and
# checking two in turn does not make each drop the other's.
_SMALL: cache.Memo | None = None


@contextmanager
def small_parses_kept(source: str = ""):
    """While the artifact checks of the spec at source run: the small files' parses kept
    between processes."""
    global _SMALL
    _SMALL = cache.Memo("yaml-small", (yaml.__version__, _LOADER.__name__,
                                       os.path.abspath(source) if source else ""))
    try:
        yield
        _SMALL.save()
    finally:
        _SMALL = None


@lru_cache(maxsize=65536)
def content_digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


@lru_cache(maxsize=1)
def validation_fingerprint() -> tuple[str, ...]:
    """What a validator's result depends on besides the files' bytes and the Kubernetes
    version: the libraries, Estate's closed schemas and CRDs, and Estate's code (all of
    it: 130 files, 1 MB, hash in 3 ms, and no list of the modules a rule reads can go
    stale). Listed with os.walk, not pathlib's glob (2.4 ms of the 8 it took)."""
    files = (_files(SCHEMA_DIR, "") + _files(CRD_DIR, "")
             + _files(paths.PACKAGE, ".py"))
    return (*_installed("kubernetes_validate", "jsonschema", "referencing", "yaml"),
            *(hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files))


def _files(top: Path, suffix: str) -> list[str]:
    """Regular files under top whose names end in suffix, sorted (no __pycache__)."""
    out = []
    for root, dirs, names in os.walk(top):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out += [os.path.join(root, n) for n in names if n.endswith(suffix)]
    return sorted(out)


def _installed(*modules: str) -> list[str]:
    """The libraries' dist-info directory names (name and version), found without importing
    them; importlib.metadata would scan every installed distribution (20 ms)."""
    out = []
    for m in modules:
        site = Path(importlib.util.find_spec(m).origin).resolve().parents[1]
        out += sorted(n for n in _dist_infos(site)
                      if m.lower() in n.lower().replace("-", "_"))
    return out


@lru_cache(maxsize=4)
def _dist_infos(site: Path) -> tuple[str, ...]:
    return tuple(n for n in os.listdir(site) if n.endswith(".dist-info"))


def remembered_problems(name: str, version: str, artifacts, problems) -> list:
    """A schema validator's problems with these rendered files at this Kubernetes version,
    file by file: problems(artifact) (those of one file, from its bytes alone), or what the
    same validation of the same bytes found in an earlier process (estate.cache; the key
    names the version and validation_fingerprint, and each file's path and sha256).
    Problems are (path, message, hint) tuples."""
    items = {f"{a.path}\0{content_digest(a.content)}": partial(_kept, problems, a)
             for a in artifacts}
    found = cache.remembered_each(name, (version, *validation_fingerprint()), items)
    return [p for one in found.values() for p in one]


def _kept(problems, artifact) -> tuple:
    return tuple(tuple(p[:3]) for p in problems(artifact))


def _parse_now(content: bytes) -> tuple[tuple, str]:
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
    """The file's mapping documents, each CustomResourceDefinition without its spec: the
    readers of this list look for other kinds, and a CRD's spec is its OpenAPI schema
    (805 of the 862 KB Kueue's release parses to, 8 ms of every check's Kubernetes half
    to read back from estate.cache). documents() gives them whole."""
    return list(_light(artifact.content))


@lru_cache(maxsize=32768)
def _light(content: bytes) -> tuple[dict, ...]:
    if len(content) < cache.MIN_BYTES:
        return _without_crd_specs(_parse(content)[0])
    return cache.remembered("yaml-light", (content_digest(content), yaml.__version__,
                                           _LOADER.__name__),
                            lambda: _without_crd_specs(_parse(content)[0]))


def _without_crd_specs(docs: tuple) -> tuple[dict, ...]:
    return tuple({k: v for k, v in d.items() if k != "spec"}
                 if d.get("kind") == "CustomResourceDefinition" else d
                 for d in docs if isinstance(d, dict))


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
            args = {x["name"]: x["value"] for x in reg.get("kubeletExtraArgs", [])}
            labels = dict(kv.split("=", 1) for kv in args.get("node-labels", "").split(",")
                          if kv)
            out[reg.get("name", a.path)] = {"labels": labels, "taints": reg.get("taints") or []}
    return out


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
