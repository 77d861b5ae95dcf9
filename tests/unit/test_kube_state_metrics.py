"""kube-state-metrics: upstream's pinned standard manifests, on the control planes' host
network, listening on the flow matrix's port, strictly valid at the spec's Kubernetes
version, scraped at exactly the nodes it runs on, and rendered only with spec.monitoring."""
from __future__ import annotations

import hashlib
import shutil

import pytest
import yaml

from estate.check import kubernetes_schema as kcheck
from estate.check.kubernetes_addons import lands_on, scheduling_nodes
from estate.model import kubernetes as k8s
from estate.model.flows import matrix
from estate.render import gpu_addons, render_all
from estate.render.kube_state_metrics import kube_state_metrics
from estate.render.templates import RenderError
from tests.unit.checkutil import ROOT, spec_dict
from tests.unit.test_kubernetes_check import artifact_findings, lab, tampered  # noqa: F401
from tests.unit.test_ownership import estate_of

KSM = f"kubernetes/manifests/{k8s.KSM_MANIFEST}"
PROMETHEUS = "monitoring/prometheus.yml"
README = ROOT / k8s.KSM_DIR / "README.md"


def docs(arts) -> list[dict]:
    return [d for d in yaml.safe_load_all(arts[KSM].content) if d]


def kind(objects: list[dict], name: str) -> dict:
    [doc] = [d for d in objects if d["kind"] == name]
    return doc


def upstream_docs() -> list[dict]:
    return [yaml.safe_load((ROOT / k8s.KSM_DIR / n).read_bytes()) for n in k8s.KSM_SHA256]


def ksm_flow(estate):
    [f] = [f for f in matrix(estate).flows if f.name == "kube-state-metrics"]
    return f


def http_port(pod: dict) -> int:
    [c] = pod["containers"]
    [port] = [p["containerPort"] for p in c["ports"] if p["name"] == "http-metrics"]
    return port


def scraped(arts) -> set[str]:
    config = yaml.safe_load(arts[PROMETHEUS].content)
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "kube-state-metrics"]
    return {t for sc in job["static_configs"] for t in sc["targets"]}


# --- the vendored files ---------------------------------------------------------------------

def test_the_vendored_files_are_the_pinned_upstream_files():
    sums = (ROOT / k8s.KSM_DIR / "SHA256SUMS").read_text()
    readme = README.read_text()
    assert len(sums.splitlines()) == len(k8s.KSM_SHA256) == 5
    for name, sha in k8s.KSM_SHA256.items():
        data = (ROOT / k8s.KSM_DIR / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha, name
        assert f"{sha}  {name}" in sums and sha in readme and f"{len(data):,}" in readme
    assert k8s.KSM_VERSION in readme
    # the image is the pinned release, and upstream listens on the port the flow opens
    pod = kind(upstream_docs(), "Deployment")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"].endswith(f":{k8s.KSM_VERSION}")
    assert http_port(pod) == k8s.KSM_PORT


def test_a_changed_vendored_file_is_refused(tmp_path, monkeypatch, lab):
    estate, _ = lab
    shutil.copytree(ROOT / k8s.KSM_DIR, tmp_path / k8s.KSM_DIR)
    with open(tmp_path / k8s.KSM_DIR / "deployment.yaml", "ab") as f:
        f.write(b"        - --telemetry-host=0.0.0.0\n")
    monkeypatch.setattr(gpu_addons, "ROOT", tmp_path)
    gpu_addons.vendored.cache_clear()
    try:
        with pytest.raises(RenderError, match="deployment.yaml: sha256"):
            kube_state_metrics(estate)
    finally:
        gpu_addons.vendored.cache_clear()


def test_upstream_and_the_rendered_objects_pass_strict_validation(lab):
    estate, arts = lab
    version = estate.spec.kubernetes.version
    for doc in upstream_docs() + docs(arts):
        assert kcheck.validate_object(doc, version) == [], doc["kind"]


# --- placement, port and scraping -----------------------------------------------------------

def test_it_runs_on_the_control_planes_host_network_on_the_flows_port():
    d = spec_dict("ha")                    # three control planes
    estate = estate_of(d)
    arts = render_all(estate, "<test>")
    objects = docs(arts)
    deployment = kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and deployment["spec"]["replicas"] == 1
    assert pod["nodeSelector"][k8s.CONTROL_PLANE_LABEL] == ""
    assert pod["tolerations"] == list(k8s.ADDON_TOLERATIONS)
    nodes = scheduling_nodes(arts)
    runs_on = {n for n, node in nodes.items() if lands_on(pod, node)}
    flow = ksm_flow(estate)
    assert runs_on == flow.to == {"k8s-cp1", "k8s-cp2", "k8s-cp3"}
    assert http_port(pod) == flow.ports[0] == k8s.KSM_PORT
    assert f"--port={flow.ports[0]}" in pod["containers"][0]["args"]
    # Prometheus scrapes exactly those nodes, on that port, never the telemetry port
    seg = estate.spec.monitoring.segment
    assert scraped(arts) == {f"{estate.address(n, seg)}:{flow.ports[0]}" for n in runs_on}
    assert artifact_findings(estate, arts) == {}


def test_the_port_follows_a_spec_flow_that_replaces_the_default():
    d = spec_dict("lab")
    d["firewall"].setdefault("flows", []).append({
        "name": "kube-state-metrics", "to": "k8s1", "segment": "management", "port": 18080,
        "from_hosts": d["monitoring"]["host"], "reason": "the site's port for it"})
    estate = estate_of(d)
    arts = render_all(estate, "<test>")
    objects = docs(arts)
    pod = kind(objects, "Deployment")["spec"]["template"]["spec"]
    assert http_port(pod) == 18080
    assert {p["port"] for p in kind(objects, "Service")["spec"]["ports"]
            if p["name"] == "http-metrics"} == {18080}
    assert scraped(arts) == {f"{estate.address('k8s1', 'management')}:18080"}


def test_no_flow_opens_the_telemetry_port(lab):
    estate, arts = lab
    pod = kind(docs(arts), "Deployment")["spec"]["template"]["spec"]
    [telemetry] = [p["containerPort"] for p in pod["containers"][0]["ports"]
                   if p["name"] == "telemetry"]
    cps = ksm_flow(estate).to
    assert not [f for f in matrix(estate).flows if f.to & cps
                and f.ports[0] <= telemetry <= f.ports[1]]
    assert not any(t.endswith(f":{telemetry}") for t in scraped(arts))


def test_without_monitoring_nothing_is_rendered():
    d = spec_dict("lab")
    del d["monitoring"]
    arts = render_all(estate_of(d), "<test>")
    assert KSM not in arts and PROMETHEUS not in arts
    assert not [f for f in matrix(estate_of(d)).flows if f.name == "kube-state-metrics"]


@pytest.mark.parametrize("edit,vid,text", [
    # the control-plane toleration dropped: every control plane refuses it
    (lambda ds: kind(ds, "Deployment")["spec"]["template"]["spec"].pop("tolerations"),
     "kubernetes.addon_unschedulable", "kube-system/kube-state-metrics has no node"),
    # a field the Deployment API does not have
    (lambda ds: kind(ds, "Deployment")["spec"]["template"]["spec"].update({"hostPorts": 1}),
     "kubernetes.manifest_invalid", "hostPorts"),
])
def test_a_changed_rendering_is_caught(lab, edit, vid, text):
    estate, arts = lab
    found = artifact_findings(estate, tampered(arts, KSM, edit))
    assert vid in found, found
    assert any(text in f.message for f in found[vid]), [f.message for f in found[vid]]
