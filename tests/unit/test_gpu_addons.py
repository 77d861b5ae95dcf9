"""NVIDIA's add-ons on the GPU workers: the DCGM exporter, from its pinned upstream manifest,
placed on exactly the GPU pools, strictly valid at the spec's Kubernetes version, and
scraped only through the flow matrix."""
from __future__ import annotations

import hashlib

import pytest
import yaml

from estate.check import kubernetes_schema as kcheck
from estate.model import kubernetes as k8s
from estate.model.flows import matrix
from estate.render import gpu_addons
from estate.render.templates import RenderError
from tests.unit.checkutil import ROOT
from tests.unit.test_kubernetes_check import artifact_findings, lab, tampered  # noqa: F401
from tests.unit.test_ownership import estate_of, research

DCGM = "kubernetes/manifests/22-dcgm-exporter.yaml"


def docs(arts, path) -> list[dict]:
    return [d for d in yaml.safe_load_all(arts[path].content) if d]


def daemonset(arts, path) -> dict:
    return next(d for d in docs(arts, path) if d["kind"] == "DaemonSet")


def test_the_vendored_manifest_is_the_pinned_upstream_file():
    data = (ROOT / k8s.DCGM_MANIFEST).read_bytes()
    assert hashlib.sha256(data).hexdigest() == k8s.DCGM_SHA256
    sums = (ROOT / "k8s" / "dcgm-exporter" / "SHA256SUMS").read_text()
    readme = (ROOT / "k8s" / "dcgm-exporter" / "README.md").read_text()
    assert k8s.DCGM_SHA256 in sums and k8s.DCGM_SHA256 in readme
    assert k8s.DCGM_VERSION in readme and k8s.DCGM_VERSION in data.decode()
    # the port Estate's flow opens is the one upstream listens on
    ds = next(d for d in yaml.safe_load_all(data) if d["kind"] == "DaemonSet")
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DCGM_EXPORTER_LISTEN"] == f":{k8s.DCGM_PORT}"


def test_a_changed_vendored_file_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "k8s" / "dcgm-exporter" / "dcgm-exporter.yaml"
    fake.parent.mkdir(parents=True)
    fake.write_bytes((ROOT / k8s.DCGM_MANIFEST).read_bytes() + b"# edited\n")
    monkeypatch.setattr(gpu_addons, "ROOT", tmp_path)
    gpu_addons.vendored.cache_clear()
    try:
        with pytest.raises(RenderError, match="sha256"):
            gpu_addons.vendored(k8s.DCGM_MANIFEST, k8s.DCGM_SHA256)
    finally:
        gpu_addons.vendored.cache_clear()


def test_upstream_and_the_rendered_objects_pass_strict_validation(lab):
    estate, arts = lab
    version = estate.spec.kubernetes.version
    upstream = list(yaml.safe_load_all((ROOT / k8s.DCGM_MANIFEST).read_bytes()))
    for doc in upstream + docs(arts, DCGM):
        assert kcheck.validate_object(doc, version) == [], doc["kind"]


def test_the_exporter_runs_on_exactly_the_gpu_pools():
    estate = estate_of(research())     # two pools: l4 (k8s2) and a100 (k8s3)
    from estate.render import render_all
    arts = render_all(estate, "<test>")
    pod = daemonset(arts, DCGM)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": pool, "effect": "NoSchedule"}
        for pool in ("a100", "l4")]
    assert all(d["metadata"]["namespace"] == "kube-system" for d in docs(arts, DCGM))
    # unprivileged, with upstream's own security context: the GPUs come through the
    # toolkit's volume-mount request (host /dev/null under nvidia-container-devices/)
    [c] = pod["containers"]
    sc = c["securityContext"]
    assert "privileged" not in sc and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"add": ["SYS_ADMIN"], "drop": ["ALL"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    [mount] = [m for m in c["volumeMounts"] if m["mountPath"] == k8s.ALL_GPUS_MOUNT]
    assert volumes[mount["name"]]["hostPath"]["path"] == "/dev/null"
    assert not [e for e in c["env"] if e["name"] == "NVIDIA_VISIBLE_DEVICES"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["hostNetwork"] is True
    assert artifact_findings(estate, arts).get("kubernetes.addon_unschedulable") is None


def test_without_gpu_workers_there_is_no_exporter():
    d = research()
    d["nodes"] = [n for n in d["nodes"] if n["hosts"] not in ("k8s2", "k8s3")]
    d["kubernetes"]["tenants"] = []
    from estate.render import render_all
    assert DCGM not in render_all(estate_of(d), "<test>")


def test_monitoring_hosts_and_only_they_scrape_it():
    d = research()
    d["firewall"]["monitoring"] = ["10.10.0.5/32"]
    m = matrix(estate_of(d))
    [flow] = [f for f in m.flows if f.name == "dcgm-exporter"]
    # the Kubernetes GPU workers' DaemonSet, and the Slurm GPU workers' unit
    assert flow.to == {"k8s2", "k8s3", "gpu1", "gpu2"} and flow.cidrs == ("10.10.0.5/32",)
    # the lab's Prometheus (monitoring.host) and the outside scraper, nobody else
    assert flow.ports == (k8s.DCGM_PORT, k8s.DCGM_PORT) and flow.sources == {"ctl1"}
    d["firewall"]["monitoring"] = []
    del d["monitoring"]
    assert not [f for f in matrix(estate_of(d)).flows if f.name == "dcgm-exporter"]


@pytest.mark.parametrize("edit,vid,text", [
    # the pools' tolerations dropped: the tainted GPU workers refuse it
    (lambda ds: ds[0]["spec"]["template"]["spec"].pop("tolerations"),
     "kubernetes.addon_unschedulable", "kube-system/dcgm-exporter has no node"),
    # a field the DaemonSet API does not have
    (lambda ds: ds[0]["spec"]["template"]["spec"].update({"gpuPolicy": "all"}),
     "kubernetes.manifest_invalid", "gpuPolicy"),
])
def test_a_changed_exporter_is_caught(lab, edit, vid, text):
    estate, arts = lab
    found = artifact_findings(estate, tampered(arts, DCGM, edit))
    assert vid in found, found
    assert any(text in f.message for f in found[vid]), [f.message for f in found[vid]]


# --- node-feature-discovery and GPU Feature Discovery --------------------------------------

NFD = "kubernetes/manifests/23-node-feature-discovery.yaml"
GFD = "kubernetes/manifests/24-gpu-feature-discovery.yaml"


@pytest.mark.parametrize("path,sha,readme", [
    (k8s.NFD_MANIFEST, k8s.NFD_SHA256, "k8s/nfd/README.md"),
    (k8s.GFD_MANIFEST, k8s.GFD_SHA256, "k8s/gfd/README.md"),
])
def test_nfd_and_gfd_are_the_pinned_upstream_files(path, sha, readme):
    data = (ROOT / path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == sha
    sums = (ROOT / path).with_name("SHA256SUMS").read_text()
    assert f"{sha}  {path.rsplit('/', 1)[1]}" in sums
    assert sha in (ROOT / readme).read_text()


def test_upstream_nfd_and_gfd_pass_strict_validation(lab):
    estate, arts = lab
    version = estate.spec.kubernetes.version
    for path in (k8s.NFD_MANIFEST, k8s.GFD_MANIFEST):
        for doc in yaml.safe_load_all((ROOT / path).read_bytes()):
            assert kcheck.validate_object(doc, version) == [], (path, doc["kind"])
    for path in (NFD, GFD):
        for doc in docs(arts, path):
            assert kcheck.validate_object(doc, version) == [], (path, doc["kind"])


def test_nfd_runs_its_workers_on_the_gpu_pools_and_the_rest_like_every_add_on():
    from estate.render import render_all
    estate = estate_of(research())
    arts = render_all(estate, "<test>")
    objects = docs(arts, NFD)
    assert "Namespace" not in {d["kind"] for d in objects}
    assert {d["metadata"].get("namespace") for d in objects} <= {"kube-system", None}
    assert all(s["namespace"] == "kube-system" for d in objects for s in d.get("subjects", []))
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in objects
            if d["kind"] in ("Deployment", "DaemonSet")}
    assert pods["nfd-worker"]["tolerations"] == k8s.gpu_addon_tolerations(estate)
    assert pods["nfd-worker"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    for name in ("nfd-master", "nfd-gc"):
        assert pods[name]["tolerations"] == list(k8s.ADDON_TOLERATIONS)
        assert pods[name]["affinity"] == k8s.addon_affinity()
    assert artifact_findings(estate, arts) == {}


def test_gfd_runs_once_per_device_plugin_config_with_its_sharing():
    """k8s2's L4 under the default config (time-slicing), k8s3's A100s under their class's
    (MIG, mixed): each GFD DaemonSet reads its config and its MIG strategy."""
    from estate.render import render_all
    from tests.unit.test_mig import mig_spec
    estate = estate_of(mig_spec())
    arts = render_all(estate, "<test>")
    sets = {d["metadata"]["name"]: d for d in docs(arts, GFD)}
    assert sorted(sets) == ["gpu-feature-discovery-default", "gpu-feature-discovery-gpu-2x"]
    mig = sets["gpu-feature-discovery-gpu-2x"]["spec"]["template"]["spec"]
    assert mig["nodeSelector"] == {"nvidia.com/gpu.present": "true",
                                   "nvidia.com/device-plugin.config": "gpu-2x"}
    env = {e["name"]: e["value"] for e in mig["containers"][0]["env"]}
    assert env["MIG_STRATEGY"] == "mixed" and env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    assert {"key": "gpu-2x", "path": "config.yaml"} in \
        next(v for v in mig["volumes"] if v["name"] == "config")["configMap"]["items"]
    plain = sets["gpu-feature-discovery-default"]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in plain["containers"][0]["env"]}
    assert env["MIG_STRATEGY"] == "none" and "NVIDIA_MIG_MONITOR_DEVICES" not in env
    # the two never select each other's pods
    selectors = [d["spec"]["selector"]["matchLabels"] for d in sets.values()]
    assert selectors[0] != selectors[1]
    assert artifact_findings(estate, arts) == {}


def _workload(name):
    def edit(ds):
        doc = next(d for d in ds if d and d["kind"] in ("Deployment", "DaemonSet")
                   and d["metadata"]["name"] == name)
        doc["spec"]["template"]["spec"].pop("tolerations")
    return edit


@pytest.mark.parametrize("path,edit,text", [
    (GFD, lambda ds: ds[0]["spec"]["template"]["spec"].pop("tolerations"),
     "kube-system/gpu-feature-discovery-default has no node"),
    (NFD, _workload("nfd-worker"), "kube-system/nfd-worker has no node"),
    (NFD, _workload("nfd-master"), "kube-system/nfd-master has no node"),
])
def test_an_add_on_without_its_tolerations_is_caught(lab, path, edit, text):
    estate, arts = lab
    found = artifact_findings(estate, tampered(arts, path, edit))
    assert any(text in f.message for f in found.get("kubernetes.addon_unschedulable", [])), \
        found


def test_the_add_ons_that_see_every_gpu_add_sys_admin_instead_of_running_privileged(lab):
    """The toolkit counts CAP_SYS_ADMIN in the bounding set as privileged (v1.20.0
    internal/config/image/privileged.go), which is all the plugin and GFD need to get
    NVIDIA_VISIBLE_DEVICES=all honoured; upstream's Helm chart gives them the same."""
    _, arts = lab
    plugin = daemonset(arts, "kubernetes/manifests/20-device-plugin.yaml")
    gfd = daemonset(arts, GFD)
    for pod in (plugin["spec"]["template"]["spec"], gfd["spec"]["template"]["spec"]):
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert "privileged" not in sc, c["name"]
            assert sc["allowPrivilegeEscalation"] is False
            want = {"drop": ["ALL"]}
            if c["name"] in ("nvidia-device-plugin", "gpu-feature-discovery"):
                want["add"] = [k8s.TOOLKIT_PRIVILEGE]
                # the toolkit's hooks write into the root of a container given GPUs
                assert "readOnlyRootFilesystem" not in sc, c["name"]
            else:
                assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["capabilities"] == want, c["name"]
        for c in pod.get("initContainers") or []:
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}, c["name"]
