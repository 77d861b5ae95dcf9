"""The pod network (Calico via its operator): rendered from the spec, strictly valid against
the pinned CRD and Kubernetes schemas, admitted by the flow matrix and the rendered
firewall between Kubernetes nodes only, applied operator-first; and each cni.* validator
catches its seeded mistake."""
from __future__ import annotations

import hashlib
import re
import subprocess

import pytest
import yaml

from estate.check import kubernetes_schema as kcheck
from estate.findings import Severity
from estate.model import cni
from estate.model.flows import matrix
from estate.pulumi import plan as planning
from estate.render import Artifacts, render_all
from estate.spec.load import load_text
from estate.spec.resolved import Estate
import roles.k8s_control_plane.tasks as control_plane
from tests.unit.checkutil import ROOT, findings_for, spec_dict
from tests.unit.test_check_validators import put
from tests.unit.test_kubernetes_check import _set, artifact_findings, tampered

INSTALLATION = "kubernetes/manifests/02-cni.yaml"
OPERATOR = "kubernetes/manifests/01-cni-operator.yaml"


def rendered(data: dict) -> tuple[Estate, Artifacts]:
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "<test>")
    assert loaded.spec is not None, loaded.findings
    estate = Estate(loaded.spec)
    return estate, render_all(estate, "<test>")


def edited(base: str, edits: dict) -> dict:
    data = spec_dict(base)
    for where, value in edits.items():
        put(data, where, value)
    return data


@pytest.fixture(scope="module")
def lab():
    return rendered(spec_dict("lab"))


def installation(arts) -> dict:
    docs = list(yaml.safe_load_all(arts[INSTALLATION].content))
    assert [d["kind"] for d in docs] == ["Installation"]
    return docs[0]


def segment(data: dict, name: str) -> dict:
    return next(s for s in data["segments"] if s["name"] == name)


# --- rendered from the spec -------------------------------------------------------------

@pytest.mark.parametrize("base", ["lab", "prod"])
def test_installation_is_the_specs_pool_mtu_and_segment(base):
    data = spec_dict(base)
    estate, arts = rendered(data)
    k8s = data["kubernetes"]
    seg = segment(data, k8s.get("api_segment", "service"))
    net = installation(arts)["spec"]["calicoNetwork"]
    assert net["ipPools"] == [{"name": "default-ipv4-ippool", "cidr": k8s["pod_cidr"],
                               "blockSize": 26, "encapsulation": "VXLAN",
                               "natOutgoing": "Enabled", "nodeSelector": "all()"}]
    assert net["mtu"] == seg.get("mtu", 1500) - 50 and net["bgp"] == "Disabled"
    assert net["nodeAddressAutodetectionV4"] == {"cidrs": [seg["cidr"]]}
    init = list(yaml.safe_load_all(arts["kubernetes/kubeadm/init.yaml"].content))
    cluster = next(d for d in init if d["kind"] == "ClusterConfiguration")
    assert cluster["networking"]["podSubnet"] == k8s["pod_cidr"]


def test_jumbo_segment_and_no_encapsulation():
    data = edited("lab", {"kubernetes.cni": {"encapsulation": "none"}})
    segment(data, data["kubernetes"].get("api_segment", "service"))["mtu"] = 9000
    estate, arts = rendered(data)
    net = installation(arts)["spec"]["calicoNetwork"]
    assert net["mtu"] == 9000 and net["bgp"] == "Enabled"
    assert net["ipPools"][0]["encapsulation"] == "None"
    names = {f.name: f for f in matrix(estate).flows}
    assert "calico-vxlan" not in names
    assert (names["calico-bgp"].proto, names["calico-bgp"].ports) == ("tcp", (179, 179))
    assert not {k: v for k, v in artifact_findings(estate, arts).items()
                if k.startswith(("cni.", "kubernetes."))}


def test_unknown_encapsulation_is_refused_by_the_spec_schema():
    found = findings_for(edited("lab", {"kubernetes.cni": {"encapsulation": "ipip"}}))
    assert any(f.path.startswith("kubernetes.cni.encapsulation") and f.severity is Severity.ERROR
               for f in found), found


def test_rendered_objects_pass_strict_validation(lab):
    estate, arts = lab
    version = estate.spec.kubernetes.version
    for path in (OPERATOR, INSTALLATION):
        docs = list(yaml.safe_load_all(arts[path].content))
        assert docs
        for doc in docs:
            assert kcheck.validate_object(doc, version) == [], (path, doc["kind"])
    # the CRD is closed: a field Calico does not know, and one of the removed overrides
    doc = installation(arts)
    doc["spec"]["calicoNetwork"]["vxlanPort"] = 4789
    doc["spec"]["typhaDeployment"] = {}
    errs = kcheck.validate_object(doc, version)
    assert any("vxlanPort" in e for e in errs) and any("typhaDeployment" in e for e in errs)


def _changed(a, b, path=()) -> set[tuple]:
    """The paths at which two parsed YAML values differ (a key added, dropped or changed)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return set().union(*(_changed(a.get(k), b.get(k), path + (k,)) for k in a.keys() | b.keys()))
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return set().union(*(_changed(x, y, path + (i,)) for i, (x, y) in enumerate(zip(a, b))))
    return set() if a == b else {path}


def test_operator_manifest_is_the_pinned_upstream_file_with_only_its_deployment_hardened(lab):
    _, arts = lab
    vendored = (ROOT / cni.OPERATOR_MANIFEST).read_bytes()
    assert hashlib.sha256(vendored).hexdigest() == cni.OPERATOR_SHA256
    upstream = [d for d in yaml.safe_load_all(vendored) if d]
    rendered = list(yaml.safe_load_all(arts[OPERATOR].content))
    assert [d["kind"] for d in rendered] == [d["kind"] for d in upstream]
    changed = {(d["kind"], p) for u, d in zip(upstream, rendered) for p in _changed(u, d)}
    pod = ("spec", "template", "spec")
    assert changed == {("Deployment", pod + ("securityContext",)),
                       ("Deployment", pod + ("containers", 0, "securityContext")),
                       ("Deployment", pod + ("containers", 0, "resources"))}
    [dep] = [d for d in rendered if d["kind"] == "Deployment"]
    [c] = dep["spec"]["template"]["spec"]["containers"]
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["image"] == cni.OPERATOR_IMAGE
    # every other document (the Deployment is the last) is upstream's text, comments included
    assert vendored.decode().rsplit("\n---\n", 1)[0] in arts[OPERATOR].content.decode()
    readme = (ROOT / "k8s" / "cni" / "README.md").read_text()
    assert cni.OPERATOR_SHA256 in readme and cni.CALICO_VERSION in readme


def test_the_operator_image_runs_as_the_uid_the_hardening_names():
    """The UID is the image's own (tigera/operator v1.42.3 build/Dockerfile USER 10001:10001):
    a different one would run the binary as a user its files were not made for."""
    assert cni.OPERATOR_IMAGE.endswith(":v1.42.3")
    assert cni.OPERATOR_POD_SECURITY["runAsUser"] == cni.OPERATOR_POD_SECURITY["runAsGroup"] == 10001


# --- flows and firewall -----------------------------------------------------------------

def test_flows_admit_calico_between_plane_nodes_only(lab):
    estate, _ = lab
    plane = set(estate.plane_hosts("kubernetes"))
    seg = estate.spec.kubernetes.api_segment
    for name, proto, port in (("calico-typha", "tcp", 5473), ("calico-vxlan", "udp", 4789)):
        flow = next(f for f in matrix(estate).flows if f.name == name)
        assert (flow.proto, flow.ports, flow.segment) == (proto, (port, port), seg)
        assert flow.to == plane and flow.sources == plane and not flow.cidrs
        for src in estate.nodes:
            for dst in plane - {src}:
                allowed = matrix(estate).allows(src, dst, proto, port, seg)
                assert (allowed is not None) == (src in plane), (src, dst, name)
    assert not [f for f in matrix(estate).flows if f.name == "calico-bgp"]


def test_rendered_firewall_opens_calico_ports_on_plane_nodes_only(lab):
    estate, arts = lab
    plane = set(estate.plane_hosts("kubernetes"))
    seg = estate.spec.kubernetes.api_segment
    sources = sorted(int(estate.address(n, seg)) for n in plane)
    for gi, hosts in enumerate(estate.group_hosts):
        text = arts[f"network/nftables/group-{gi:03d}.nft"].content.decode()
        rules = re.findall(r"ip saddr \{ ([^}]*) \} (tcp|udp) dport (5473|4789) ", text)
        if set(hosts) <= plane:
            assert {(p, port) for _, p, port in rules} == {("tcp", "5473"), ("udp", "4789")}
            for srcs, _, _ in rules:   # the plane nodes' consecutive addresses, merged
                lo, hi = (srcs.split("-") + [srcs])[:2]
                assert (int(ipv4(lo)), int(ipv4(hi))) == (sources[0], sources[-1])
        else:
            assert rules == [], hosts


def ipv4(text: str):
    from ipaddress import IPv4Address
    return IPv4Address(text.strip())


# --- applied operator-first -------------------------------------------------------------

def applied(monkeypatch, files) -> str:
    """The command the role hands to run_when_changed for these installed files."""
    seen = {}
    monkeypatch.setattr(control_plane, "run_when_changed", lambda **kw: seen.update(kw))
    control_plane.apply_network(files, "digest")
    assert seen["digest"] == "digest" and seen["stamp"].endswith("/k8s-network")
    return seen["command"]


def test_control_plane_applies_the_operator_then_waits_for_its_crd(tmp_path, monkeypatch):
    """The command as the role runs it, with a kubectl that records its calls: the operator
    is applied alone, its CRD waited for, then the Installation."""
    log, bin_dir = tmp_path / "calls", tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\n")
    fake.chmod(0o755)
    files = [f"/x/{cni.OPERATOR_PATH}", f"/x/{cni.INSTALLATION_PATH}"]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["sh", "-c", applied(monkeypatch, files)], check=True, env=env, timeout=30)
    calls = [c.split(" ", 2)[2] for c in log.read_text().splitlines()]   # no --kubeconfig
    crd = f"crd/{cni.INSTALLATION_CRD}"
    assert calls == [f"apply -f /x/{cni.OPERATOR_PATH}", f"get {crd}",
                     f"wait --for condition=Established --timeout=60s {crd}",
                     f"apply -f /x/{cni.INSTALLATION_PATH}"]


def test_a_crd_that_never_comes_fails_the_apply(tmp_path, monkeypatch):
    """kubectl get finds no CRD: the loop gives up after CRD_TRIES and kubectl wait fails,
    so the stamp is not written and the next run tries again (sleep is stubbed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("kubectl", 'case "$3" in get|wait) exit 1;; esac'), ("sleep", "")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    command = applied(monkeypatch, [f"/x/{cni.OPERATOR_PATH}", f"/x/{cni.INSTALLATION_PATH}"])
    run = subprocess.run(["sh", "-c", command + " && echo applied"], capture_output=True,
                         text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30)
    assert run.returncode != 0 and "applied" not in run.stdout


def test_the_pod_network_is_the_roles_in_every_path(lab):
    """Pulumi's ConfigGroup gets every manifest but the pod network's, which the control
    plane's step applies even under --no-manifests (it waits for the operator's CRD)."""
    _, arts = lab
    paths = [p for p, _ in planning.manifests(arts)]
    assert paths and OPERATOR not in paths and INSTALLATION not in paths
    assert set(paths) | {OPERATOR, INSTALLATION} == \
        {p for p in arts if p.startswith("kubernetes/manifests/")}
    source = (ROOT / "roles" / "k8s_control_plane" / "tasks.py").read_text()
    network = source.index("network = sorted(")
    gate = source.index('runtime("apply_manifests", True)')
    assert network < gate and "runtime(" not in source[network:gate]


# --- validators: seeded mistakes in the rendered files ------------------------------------

def _pool(key, value):
    return _set([0, "spec", "calicoNetwork", "ipPools", 0, key], value)


def _drop_installation(docs):
    docs.clear()
    docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})


# (path, edit(documents), validator id, text in its message)
TAMPER = [
    (INSTALLATION, _pool("cidr", "10.245.0.0/16"), "cni.pod_cidr_mismatch",
     "not kubeadm's podSubnet 10.244.0.0/16"),
    (INSTALLATION, _set([0, "spec", "calicoNetwork", "mtu"], 1500), "cni.mtu",
     "pod MTU 1500 + 50 bytes of encapsulation exceed"),
    (INSTALLATION, _set([0, "spec", "calicoNetwork", "mtu"], None), "cni.mtu", "sets no MTU"),
    (INSTALLATION, _set([0, "spec", "calicoNetwork", "nodeAddressAutodetectionV4"],
                        {"firstFound": True}), "cni.node_address", "not the API segment's"),
    # no encapsulation needs BGP, which the matrix does not admit under VXLAN
    (INSTALLATION, _pool("encapsulation", "None"), "cni.port_not_in_flows",
     "179/tcp (calico-bgp)"),
    (INSTALLATION, _pool("encapsulation", "IPIP"), "cni.port_not_in_flows",
     "encapsulation IPIP has no flow"),
    (INSTALLATION, _drop_installation, "cni.missing", "holds no Installation object"),
    (OPERATOR, _set([0, "metadata", "labels", "pod-security.kubernetes.io/enforce"],
                    "baseline"), "cni.operator_not_pinned", "differs from Calico"),
    (OPERATOR, _set([6, "spec", "template", "spec", "hostPID"], True),
     "cni.operator_not_pinned", "beyond the operator Deployment's securityContext"),
    (OPERATOR, _set([6, "spec", "template", "spec", "containers", 0, "securityContext"],
                    {"privileged": True}), "cni.operator_not_pinned",
     "container securityContext is {'privileged': True}"),
    (OPERATOR, _set([6, "spec", "template", "spec", "securityContext", "runAsUser"], 0),
     "cni.operator_not_pinned", "pod securityContext is"),
    # the CRD's enum and closed objects (kubernetes.manifest_invalid reads k8s/crds/)
    (INSTALLATION, _pool("encapsulation", "Vxlan"), "kubernetes.manifest_invalid", "Vxlan"),
    (INSTALLATION, _pool("vxlanPort", 4790), "kubernetes.manifest_invalid", "vxlanPort"),
]


@pytest.mark.parametrize("path,edit,vid,text", TAMPER, ids=[f"{t[2]}:{t[3]}" for t in TAMPER])
def test_tampered_cni_file_is_caught(lab, path, edit, vid, text):
    estate, arts = lab
    found = artifact_findings(estate, tampered(arts, path, edit))
    assert vid in found, sorted(found)
    assert any(text in f.message for f in found[vid]), [f.message for f in found[vid]]


def test_clean_renders_have_no_cni_findings(lab):
    assert not {k for k in artifact_findings(*lab) if k.startswith("cni.")}
    assert not {k for k in artifact_findings(*rendered(spec_dict("prod")))
                if k.startswith("cni.")}


def test_a_missing_cni_manifest_is_caught(lab):
    estate, arts = lab
    out = Artifacts(arts)
    del out[OPERATOR]
    found = artifact_findings(estate, out)["cni.missing"]
    assert [f.path for f in found] == [OPERATOR] and "NotReady" in found[0].message


@pytest.mark.parametrize("flow,where", [
    # VXLAN moved to flannel's port: calico-node still sends to 4789
    ({"name": "calico-vxlan", "proto": "udp", "port": 8472, "to": "k8s[1-2]",
      "from_hosts": "k8s[1-2]", "segment": "service", "reason": "moved"}, "calico-vxlan"),
    # Typha reachable only on the control plane: the worker's Typha is cut off
    ({"name": "calico-typha", "proto": "tcp", "port": 5473, "to": "k8s1",
      "from_hosts": "k8s[1-2]", "segment": "service", "reason": "one typha"}, "calico-typha"),
])
def test_a_spec_flow_that_cuts_the_pod_network_is_caught(flow, where):
    estate, arts = rendered(edited("lab", {"firewall.flows": [flow]}))
    found = artifact_findings(estate, arts).get("cni.port_not_in_flows", [])
    assert any(f"({where})" in f.message for f in found), [f.message for f in found]
    assert all(f.severity is Severity.ERROR and f.path == "firewall.flows[0]" for f in found)


def test_replacing_a_default_with_the_same_admission_passes():
    flow = {"name": "calico-vxlan", "proto": "udp", "port": 4789, "to": "k8s[1-2]",
            "from_hosts": "k8s[1-2]", "segment": "service", "reason": "explicit"}
    estate, arts = rendered(edited("lab", {"firewall.flows": [flow]}))
    assert "cni.port_not_in_flows" not in artifact_findings(estate, arts)


def test_reserved_operator_namespaces():
    found = findings_for(edited("lab", {"kubernetes.tenants[0].name": "calico-system"}))
    assert any(f.id == "kubernetes.tenant_name" for f in found)


def test_pods_reach_the_api_on_their_own_control_plane(lab):
    """Locally delivered pod traffic keeps its pod address (no masquerade): the control
    plane's input chain must admit the pod CIDR on the API port, and only that port."""
    estate, arts = lab
    net = estate.spec.kubernetes.pod_cidr    # rendered as an address range
    pods = f"{net.network_address}-{net.broadcast_address}"
    for gi, hosts in enumerate(estate.group_hosts):
        text = arts[f"network/nftables/group-{gi:03d}.nft"].content.decode()
        lines = [l for l in text.splitlines() if "ip saddr {" in l and pods in l]
        if set(hosts) <= set(estate.spec.kubernetes.control_plane):
            assert len(lines) == 1 and "tcp dport 6443 " in lines[0], lines
        else:
            assert lines == [], hosts


def test_a_spec_without_kubernetes_has_no_cni_findings():
    data = spec_dict("lab")
    data["kubernetes"] = None
    for group in data["nodes"]:
        group["roles"] = [r for r in group["roles"] if not r.startswith(("k8s", "gpu_node"))]
        if group.get("plane") == "kubernetes":
            group["plane"] = "slurm"
    estate, arts = rendered(data)
    assert not [a for a in arts if a.startswith("kubernetes/")]
    found = artifact_findings(estate, arts)
    assert not {k for k in found if k.startswith(("cni.", "internal."))}, found


# --- validators: seeded mistakes in the spec ----------------------------------------------

# (validator id, severity, base spec, edits {path: value}, expected finding path)
CASES = [
    ("cni.pod_cidr_too_small", Severity.ERROR, "lab", {"kubernetes.pod_cidr": "10.244.0.0/27"},
     "kubernetes.pod_cidr"),
    ("cni.pod_cidr_blocks", Severity.WARNING, "lab",
     {"kubernetes.pod_cidr": "10.244.0.0/26", "nodes[5].hosts": "k8s[2-3]"},
     "kubernetes.pod_cidr"),
    ("cni.bgp_mesh", Severity.WARNING, "lab",
     {"kubernetes.cni": {"encapsulation": "none"}, "nodes[5].hosts": "inf[001-100]"},  # 101
     "kubernetes.cni.encapsulation"),
]


@pytest.mark.parametrize("vid,severity,base,edits,path", CASES,
                         ids=[f"{c[0]}:{c[4]}" for c in CASES])
def test_seeded_spec_mistake_is_reported(vid, severity, base, edits, path):
    found = {(f.id, f.path): f for f in findings_for(edited(base, edits))}
    assert (vid, path) in found, sorted(found)
    f = found[(vid, path)]
    assert f.severity is severity and f.hint and f.location.startswith("<test>:")


@pytest.mark.parametrize("edits", [
    {"kubernetes.pod_cidr": "10.244.0.0/25"},                     # 2 blocks, 2 nodes
    {"kubernetes.cni": {"encapsulation": "none"}, "nodes[5].hosts": "inf[001-099]"},  # 100
])
def test_just_within_the_limits_is_clean(edits):
    found = [f for f in findings_for(edited("lab", edits)) if f.id.startswith("cni.")]
    assert found == []
