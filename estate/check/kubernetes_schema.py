"""The Kubernetes schema library: strict validation of rendered objects and configs, and
reading rendered artifacts back. Validators (estate.check.kubernetes for the spec,
estate.check.kubernetes_artifacts for the rendered files) and the tests use it.

Kubernetes objects are validated strictly with kubernetes-validate for the pinned minor
version, Kueue objects against their CRDs (k8s/crds/), kubeadm/kubelet/kind/device-plugin
configs against closed schemas transcribed from upstream types (k8s/schemas/), and
containerd's config as TOML.

Vendored upstream documents (Kueue's release, k8s/kueue/; Calico's operator, k8s/cni/) are
validated once, when they are vendored: their index (VENDORED_INDEXES, written by
`python -m estate.check.kubernetes_schema`; tests/unit/test_kubernetes_check.py validates
the vendored files again and holds the indexes to them) lists each document's sha256, the schema
sets it passed, and its fields without a CRD's schema. A rendered file that carries such a
document verbatim is read from the index for it, not parsed and validated again.

jsonschema, referencing and kubernetes_validate are imported where they are used (0.1 s
of imports, only for a Kubernetes plane).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import yaml

from estate import paths
from estate.kubernetes_releases import CONTAINERD_CONFIG_VERSION, CONTAINERD_MAJOR
from estate.model import kubernetes as k8s
from estate.model.services import MANIFESTS
from estate.spec.types import DNS_LABEL, DNS_SUBDOMAIN, label_key_problems, label_value_problems

CRD_DIR = paths.K8S / "crds"
SCHEMA_DIR = paths.K8S / "schemas"
VENDORED_INDEXES = (paths.K8S / "kueue" / "manifests.index.json",
                    paths.K8S / "cni" / "tigera-operator.index.json")

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
    # the API server's AuthenticationConfiguration (kubernetes.oidc), both versions Estate
    # renders (estate.model.kubernetes.auth_api)
    "apiserver.config.k8s.io/v1beta1": "apiserver.config.k8s.io_authentication.yaml",
    "apiserver.config.k8s.io/v1": "apiserver.config.k8s.io_authentication.yaml",
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

def document_key(text: bytes) -> str:
    """A document's key in a vendored index: the sha256 of its text without the comment
    lines before it and the newlines around it."""
    text = text.strip(b"\n")
    while text.startswith(b"#"):
        text = text.partition(b"\n")[2].lstrip(b"\n")
    return hashlib.sha256(text.rstrip(b"\n")).hexdigest()


@lru_cache(maxsize=1)
def vendored_index() -> dict[str, dict]:
    """document_key -> {"validated": the schema sets it passed, "light": its fields without
    a CRD's schema}, for every vendored document."""
    out = {}
    for path in VENDORED_INDEXES:
        index = json.loads(path.read_text())
        for doc in index["documents"]:
            out[doc["key"]] = {"validated": index["validated"], "light": doc["light"]}
    return out


class Piece(NamedTuple):
    line: int            # the first line of its text in the file (0-based)
    text: bytes
    vendored: dict | None   # its vendored_index() entry; None: Estate's own


@lru_cache(maxsize=32768)
def _pieces(content: bytes) -> tuple[Piece, ...] | None:
    """The file's documents, split at the `---` lines, where some of them are vendored
    documents verbatim; None where none is (the file is parsed whole)."""
    if b"\n---\n" not in content:
        return None
    index, out, line = vendored_index(), [], 0
    for text in content.split(b"\n---\n"):
        out.append(Piece(line, text, index.get(document_key(text))))
        line += text.count(b"\n") + 2
    return tuple(out) if any(p.vendored for p in out) else None


@lru_cache(maxsize=32768)
def _parse(content: bytes) -> tuple[tuple, str]:
    """The documents of a rendered YAML file and the parse error ('' when none): parsed
    once, however many validators read the file (8,000 kubeadm join files, five readers)."""
    pieces = _pieces(content)
    if pieces is None:
        return _parse_now(content)
    docs: list = []
    for p in pieces:
        found, err = _parse_piece(p)
        if err:
            return tuple(docs), err
        docs += found
    return tuple(docs), ""


def own_texts(artifact) -> list[bytes]:
    """The file's text but its vendored documents (which carry no bootstrap token either:
    tests/unit/test_kueue_install.py)."""
    pieces = _pieces(artifact.content)
    return [artifact.content] if pieces is None else [p.text for p in pieces if not p.vendored]


def unvalidated_documents(artifact, version: str) -> list:
    """The parsed documents of a rendered file but those vendored verbatim and validated
    when vendored against this version's schema set."""
    pieces = _pieces(artifact.content)
    if pieces is None:
        return documents(artifact)
    schemas = schema_version(version)
    out: list = []
    for p in pieces:
        if not (p.vendored and schemas in p.vendored["validated"]):
            out += _parse_piece(p)[0]
    return out


def _parse_piece(piece: Piece) -> tuple[tuple, str]:
    return _parse_text(piece.text, piece.line)


@lru_cache(maxsize=1024)
def _parse_text(text: bytes, first_line: int) -> tuple[tuple, str]:
    return _parse_now(text, first_line)


def _parse_now(content: bytes, first_line: int = 0) -> tuple[tuple, str]:
    try:
        return tuple(d for d in yaml.load_all(content, Loader=_LOADER) if d is not None), ""
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {first_line + mark.line + 1}, column {mark.column + 1}" if mark else ""
        return (), f"{getattr(exc, 'problem', None) or type(exc).__name__}{at}"
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return (), f"{type(exc).__name__}: {exc}"


def documents(artifact) -> list:
    """Parsed documents; none when the file does not parse (parse_error says why)."""
    return list(_parse(artifact.content)[0])


def parse_error(artifact) -> str:
    """Why the file does not parse ('' when it does); its vendored documents are YAML that
    parsed when they were vendored."""
    pieces = _pieces(artifact.content)
    if pieces is None:
        return _parse(artifact.content)[1]
    return next((err for p in pieces if not p.vendored for err in [_parse_piece(p)[1]] if err),
                "")


def _first(text: str):
    docs = _parse(text.encode())[0]
    return docs[0] if docs else None


def _dicts(artifact) -> list[dict]:
    """The file's mapping documents, each CustomResourceDefinition without its spec: the
    readers of this list look for other kinds, and a CRD's spec is its OpenAPI schema
    (805 of the 862 KB Kueue's release parses to). A vendored document comes from its
    index, unparsed. documents() gives them whole."""
    return list(_light(artifact.content))


@lru_cache(maxsize=32768)
def _light(content: bytes) -> tuple[dict, ...]:
    pieces = _pieces(content)
    if pieces is None:
        return _without_crd_specs(_parse(content)[0])
    out: list = []
    for p in pieces:
        out += [p.vendored["light"]] if p.vendored else _without_crd_specs(_parse_piece(p)[0])
    return tuple(out)


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
    flavors: list = []
    queues: list = []
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


# --- the index of a vendored file, written when it is vendored ---------------------------

def validated_sets() -> list[str]:
    """The schema sets a vendored document is validated against: every one
    kubernetes-validate ships from 1.MIN_MINOR on."""
    return [v for v in shipped_versions() if int(v.split(".")[1]) >= MIN_MINOR]


def index_of(path: Path) -> dict:
    """The index of a vendored manifest file (VENDORED_INDEXES): each document's kind,
    name, document_key and fields without a CRD's schema, after validating every document
    against validated_sets(); ValueError listing what fails (nothing is indexed then)."""
    data = path.read_bytes()
    sets, docs, problems = validated_sets(), [], []
    for text in data.split(b"\n---\n"):
        parsed, err = _parse_now(text)
        if err or len(parsed) != 1 or not isinstance(parsed[0], dict):
            problems.append(f"a document that is not one mapping: {err or len(parsed)}")
            continue
        doc = parsed[0]
        problems += [f"{_kind_name(doc)}: {e}" for v in sets for e in validate_object(doc, v)]
        if BOOTSTRAP_TOKEN.search(text.decode(errors="replace")):
            problems.append(f"{_kind_name(doc)}: holds a kubeadm bootstrap token")
        docs.append({"kind": doc["kind"], "name": doc["metadata"]["name"],
                     "key": document_key(text), "light": _without_crd_specs((doc,))[0]})
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems[:20]))
    return {"source": path.relative_to(paths.TREE).as_posix(),
            "sha256": hashlib.sha256(data).hexdigest(), "validated": sets, "documents": docs}


def _kind_name(doc: dict) -> str:
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name', '?')}"


def index_path(manifest: Path) -> Path:
    return manifest.with_name(manifest.name.removesuffix(".yaml") + ".index.json")


def write_indexes() -> None:
    """Validate and index every vendored file (scripts/kueue-vendor.sh runs it)."""
    for index in VENDORED_INDEXES:
        manifest = index.with_name(index.name.removesuffix(".index.json") + ".yaml")
        index.write_text(json.dumps(index_of(manifest), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_indexes()
