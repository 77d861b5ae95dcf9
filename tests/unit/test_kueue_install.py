"""Kueue installed by Estate: the vendored release, its configuration, its placement, and
the artifact checks that catch a rendered install that lets tenants bypass Kueue or that
has no node to run on."""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest
import yaml

from estate.check import kubernetes_addons as addons
from estate.check import kubernetes_schema as kcheck
from estate.model import kubernetes as k8s
from estate.render import kueue_install as kueue
from estate.render.templates import RenderError
from tests.unit.checkutil import ROOT, spec_dict
from tests.unit.test_kubernetes_check import artifact_findings
from tests.unit.test_kubernetes_render import estate_of, rendered

INSTALL = f"kubernetes/manifests/{kueue.OUTPUT}"
CONTROLLER = f"kubernetes/manifests/{kueue.CONTROLLER}"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # 1.7 MB of release: libyaml
OURS = {kueue.NAMESPACE, kueue.CONFIG_MAP, kueue.DEPLOYMENT}


@pytest.fixture(scope="module")
def prod():
    estate = estate_of(spec_dict("prod"))
    return estate, rendered(estate)


def _body(text: str) -> str:
    """A rendered file without its header comment."""
    lines = text.split("\n")
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "\n".join(lines)


def install_docs(arts) -> dict[tuple[str, str], str]:
    """(kind, name) -> the text of each document Estate renders of Kueue (both files)."""
    return {(d["kind"], d["metadata"]["name"]): t
            for path in (INSTALL, CONTROLLER)
            for t in _body(arts[path].content.decode()).split("\n---\n")
            for d in [yaml.load(t, Loader=LOADER)]}


def edited(arts, key, edit):
    """arts with one Kueue document changed by edit(parsed document)."""
    out = type(arts)(arts)
    for path in (INSTALL, CONTROLLER):
        a = arts[path]
        texts = _body(a.content.decode()).split("\n---\n")
        for i, t in enumerate(texts):
            if f"kind: {key[0]}\n" not in t or f"name: {key[1]}\n" not in t:
                continue                   # parse only the candidates: the file is large
            doc = yaml.load(t, Loader=LOADER)
            if (doc["kind"], doc["metadata"]["name"]) == key:
                edit(doc)
                texts[i] = yaml.safe_dump(doc, sort_keys=False)
                out[path] = replace(a, content="\n---\n".join(texts).encode())
    return out


def test_vendored_release_matches_its_checksum():
    data = kueue.MANIFESTS_FILE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == kueue.SUMS_FILE.read_text().split()[0]
    images = {line.split("image:")[1].strip() for line in data.decode().splitlines()
              if line.strip().startswith("image:") and "kueue" in line}
    assert images == {f"registry.k8s.io/kueue/kueue:{k8s.KUEUE_VERSION}"}


def test_a_tampered_vendored_file_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "manifests.yaml"
    bad.write_bytes(kueue.MANIFESTS_FILE.read_bytes().replace(b"replicas: 1", b"replicas: 9"))
    monkeypatch.setattr(kueue, "MANIFESTS_FILE", bad)
    kueue.vendored.cache_clear()
    try:
        with pytest.raises(RenderError, match="sha256"):
            kueue.vendored()
    finally:
        kueue.vendored.cache_clear()


def test_install_is_the_release_but_three_documents(prod):
    _, arts = prod
    docs = install_docs(arts)
    controller = _body(arts[CONTROLLER].content.decode()).split("\n---\n")
    assert [(d["kind"], d["metadata"]["name"]) for d in map(yaml.safe_load, controller)] == \
        [kueue.CONFIG_MAP, kueue.DEPLOYMENT]
    release = {(k, n): t for k, n, t in kueue.vendored()}
    assert set(docs) == set(release)
    changed = {key for key in docs if docs[key].rstrip("\n") != release[key].rstrip("\n")}
    assert changed == OURS


def test_every_document_validates_strictly(prod):
    estate, arts = prod
    version = estate.spec.kubernetes.version
    problems = {(d["kind"], d["metadata"]["name"]): kcheck.validate_object(d, version)
                for path in (INSTALL, CONTROLLER)
                for d in yaml.load_all(arts[path].content, Loader=LOADER)}
    assert {k: p for k, p in problems.items() if p} == {}
    assert len(problems) == 79


def test_configuration_manages_exactly_the_tenants(prod):
    estate, arts = prod
    _, config = addons.rendered_kueue_config(arts)
    tenants = [t.name for t in estate.spec.kubernetes.tenants]
    assert len(tenants) >= 2
    assert config["manageJobsWithoutQueueName"] is True
    for name in tenants:
        assert addons.selects(config["managedJobsNamespaceSelector"], {k8s.NAMESPACE_NAME_LABEL: name})
    for name in ("kube-system", "kueue-system", "default"):
        assert not addons.selects(config["managedJobsNamespaceSelector"],
                                  {k8s.NAMESPACE_NAME_LABEL: name})
    assert set(kueue.REQUIRED_FRAMEWORKS) <= set(config["integrations"]["frameworks"])
    assert kcheck._errors(kcheck._config_validator(*addons.KUEUE_SCHEMA), config) == []


def test_the_config_schema_is_closed():
    v = kcheck._config_validator(*addons.KUEUE_SCHEMA)
    base = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
    assert kcheck._errors(v, base) == []
    assert kcheck._errors(v, base | {"manageJobsWithoutQueueNames": True})
    assert kcheck._errors(v, base | {"integrations": {"frameworks": ["batch/jobs"]}})


def test_controller_is_placed_on_control_planes_and_never_on_gpu_pools(prod):
    _, arts = prod
    dep = yaml.safe_load(install_docs(arts)[kueue.DEPLOYMENT])
    pod = dep["spec"]["template"]["spec"]
    nodes = addons.scheduling_nodes(arts)
    fits = {name for name, n in nodes.items() if addons.lands_on(pod, n)}
    control = {name for name, n in nodes.items() if k8s.CONTROL_PLANE_LABEL in n["labels"]}
    gpu = {name for name, n in nodes.items() if n["labels"].get(k8s.GPU_PRESENT) == "true"}
    assert control and fits >= control and not fits & gpu


def test_kueue_system_namespace_may_not_tolerate_a_gpu_pool(prod):
    _, arts = prod
    ns = yaml.safe_load(install_docs(arts)[kueue.NAMESPACE])
    allowed = yaml.safe_load(ns["metadata"]["annotations"][k8s.TOLERATIONS_WHITELIST])
    assert all(t["key"] != k8s.GPU_RESOURCE for t in allowed)


def test_crd_validation_data_is_the_installed_release():
    for plural in kueue.VALIDATED_KINDS:
        kept = yaml.safe_load((kueue.CRD_DIR / f"kueue.x-k8s.io_{plural}.yaml").read_text())
        assert kept == kueue.trimmed_crd(plural), plural


def test_no_tenants_no_kueue():
    data = spec_dict("lab")
    data["kubernetes"]["tenants"] = []
    arts = rendered(estate_of(data))
    assert INSTALL not in arts and CONTROLLER not in arts


def test_the_release_file_is_the_same_for_every_spec(prod):
    """So a process checking many specs (the fuzz tier) parses 1.7 MB once, not per spec."""
    lab = rendered(estate_of(spec_dict("lab")))
    assert lab[INSTALL].content == prod[1][INSTALL].content
    assert lab[CONTROLLER].content != prod[1][CONTROLLER].content


def test_clean_render_has_no_addon_findings(prod):
    found = artifact_findings(*prod)
    assert not {k for k in found if k.startswith(("kubernetes.kueue", "kubernetes.addon"))}


def _set_config(key, value):
    def edit(cm):
        config = yaml.safe_load(cm["data"][kueue.CONFIG_KEY])
        config[key] = value
        cm["data"][kueue.CONFIG_KEY] = yaml.safe_dump(config)
    return edit


def _drop_lq(arts):
    out = type(arts)(arts)
    a = arts["kubernetes/manifests/50-kueue.yaml"]
    docs = [d for d in yaml.safe_load_all(a.content)
            if not (d["kind"] == "LocalQueue" and d["metadata"]["name"] == "default"
                    and d["metadata"]["namespace"] == "inference")]
    out[a.path] = replace(a, content=yaml.safe_dump_all(docs).encode())
    return out


def _no_tolerations(dep):
    dep["spec"]["template"]["spec"].pop("tolerations")


TAMPER = [
    (lambda a: edited(a, kueue.CONFIG_MAP, _set_config("manageJobsWithoutQueueName", False)),
     "kubernetes.kueue_tenant_unmanaged", "manageJobsWithoutQueueName is not true"),
    (lambda a: edited(a, kueue.CONFIG_MAP, _set_config("managedJobsNamespaceSelector", {
        "matchExpressions": [{"key": k8s.NAMESPACE_NAME_LABEL, "operator": "In",
                              "values": ["batch-embed"]}]})),
     "kubernetes.kueue_tenant_unmanaged", "does not select tenant namespace 'inference'"),
    (lambda a: edited(a, kueue.CONFIG_MAP, _set_config("managedJobsNamespaceSelector", {
        "matchExpressions": [{"key": k8s.NAMESPACE_NAME_LABEL, "operator": "NotIn",
                              "values": ["kube-system"]}]})),
     "kubernetes.kueue_tenant_unmanaged", "selects 'kueue-system'"),
    (lambda a: edited(a, kueue.CONFIG_MAP, _set_config("integrations",
                                                       {"frameworks": ["batch/job"]})),
     "kubernetes.kueue_tenant_unmanaged", "leave out pod, deployment, statefulset"),
    (_drop_lq, "kubernetes.kueue_tenant_unmanaged", "no LocalQueue 'default'"),
    (lambda a: edited(a, kueue.CONFIG_MAP, _set_config("manageJobWithoutQueueName", True)),
     "kubernetes.kueue_config_invalid", "manageJobWithoutQueueName"),
    (lambda a: edited(a, kueue.CONFIG_MAP, lambda cm: cm.pop("data")),
     "kubernetes.kueue_config_invalid", "no Kueue controller configuration"),
    (lambda a: edited(a, kueue.DEPLOYMENT, _no_tolerations),
     "kubernetes.addon_unschedulable", "kueue-system/kueue-controller-manager has no node"),
    (lambda a: edited(a, kueue.DEPLOYMENT, lambda d: d["spec"]["template"]["spec"].update(
        nodeSelector={"nvidia.com/gpu.present": "true"})),
     "kubernetes.addon_unschedulable", "has no node"),
    # placed right, but asking more memory than a control plane has left
    (lambda a: edited(a, kueue.DEPLOYMENT, lambda d: d["spec"]["template"]["spec"]
                      ["containers"][0]["resources"]["requests"].update(memory="4Ti")),
     "kubernetes.addon_unschedulable", "more than the allocatable of every node"),
]


@pytest.mark.parametrize("tamper,vid,text", TAMPER, ids=[f"{t[1]}:{t[2]}" for t in TAMPER])
def test_tampered_install_is_caught(prod, tamper, vid, text):
    estate, arts = prod
    found = artifact_findings(estate, tamper(arts))
    assert vid in found, sorted(found)
    assert any(text in f.message for f in found[vid]), [f.message for f in found[vid]]


def test_the_vendored_release_is_indexed():
    """Validated and indexed once, when vendored (scripts/kueue-vendor.sh)."""
    assert kueue.INDEX_FILE in kcheck.VENDORED_INDEXES   # test_kubernetes_check validates it
    assert json.loads(kueue.INDEX_FILE.read_text())["sha256"] == \
        hashlib.sha256(kueue.MANIFESTS_FILE.read_bytes()).hexdigest()


def test_the_index_reads_kind_and_name_as_a_yaml_parse_does():
    docs = [d for d in yaml.load_all(kueue.MANIFESTS_FILE.read_text(), Loader=LOADER) if d]
    assert [(k, n) for k, n, _ in kueue.vendored()] == \
        [(d["kind"], d["metadata"]["name"]) for d in docs]


def test_an_index_of_another_file_is_refused(tmp_path, monkeypatch):
    index = json.loads(kueue.INDEX_FILE.read_text())
    index["sha256"] = "0" * 64
    bad = tmp_path / "manifests.index.json"
    bad.write_text(json.dumps(index))
    monkeypatch.setattr(kueue, "INDEX_FILE", bad)
    kueue.vendored.cache_clear()
    try:
        with pytest.raises(RenderError, match="indexes another file"):
            kueue.vendored()
    finally:
        kueue.vendored.cache_clear()


def test_check_parses_and_validates_only_estates_own_documents_of_the_install(prod, monkeypatch):
    """The release's documents, verbatim in the rendered install, are read from the index:
    only the Namespace Estate fences is parsed and validated."""
    estate, arts = prod
    from estate.check import kubernetes_artifacts as ka
    parsed, validated = [], []
    real_parse, real_validate = kcheck._parse_now, kcheck.validate_object
    monkeypatch.setattr(kcheck, "_parse_now", lambda text, line=0: parsed.append(text) or
                        real_parse(text, line))
    monkeypatch.setattr(ka, "validate_object", lambda doc, v: validated.append(
        (doc["kind"], doc["metadata"]["name"])) or real_validate(doc, v))
    for cached in (kcheck._pieces, kcheck._parse, kcheck._light, kcheck._parse_text):
        cached.cache_clear()
    install = {INSTALL: arts[INSTALL]}
    ctx = type("Ctx", (), {"estate": estate, "artifacts": install})
    assert list(ka.manifest_invalid(ctx)) == []
    assert validated == [kueue.NAMESPACE]
    assert len(parsed) == 1 and b"kind: Namespace" in parsed[0]
    assert len(kcheck._dicts(arts[INSTALL])) == len(kueue.vendored()) - 2   # but the controller
    assert not list(ka.secret_rendered(ctx))
