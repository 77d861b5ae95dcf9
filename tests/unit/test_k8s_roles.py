"""The Kubernetes-plane roles' wiring and parsers, without nodes: which deploys a plane node
gets, where its artifacts go, and what the roles read back from the rendered files."""
from __future__ import annotations

from pathlib import Path

import pytest

from estate.pipeline import build
from estate.model.destinations import destination, installer
from estate.catalogue import ORDER
from estate.provision.inventory import deploys_for, targets
from roles.k8s_node.tasks import kernel_problem, rendered_modules, rendered_sysctls
from roles._lib.facts import CertificateKey, JoinToken
from roles._lib.kubernetes import reach_problem
from roles.k8s_packages.tasks import pinned_packages, repository

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab():
    result = build(Path("stacks/lab.yaml"))
    assert result.ok
    manifest = {p: {"consumers": str(a.consumers), "plane": a.plane}
                for p, a in result.artifacts.items()}
    return result, manifest, {t.name: t for t in targets(result.estate, manifest)}


def test_plane_nodes_get_the_kubernetes_deploys(lab):
    _, _, ts = lab
    assert {"k8s_node", "k8s_packages", "k8s_control_plane"} <= set(ts["k8s1"].deploys)
    assert "k8s_worker" not in ts["k8s1"].deploys and "gpu_node" not in ts["k8s1"].deploys
    assert {"k8s_node", "k8s_packages", "k8s_worker", "gpu_node"} <= set(ts["k8s2"].deploys)
    assert not any(d.startswith("k8s") for d in ts["ctl1"].deploys)
    # control plane before workers: the order the deploys run in
    assert ORDER.index("k8s_node") < ORDER.index("k8s_control_plane") < ORDER.index("k8s_worker")
    assert len(ORDER) == len(set(ORDER))


def test_every_consumed_kubernetes_file_has_an_installer(lab):
    _, _, ts = lab
    for name in ("k8s1", "k8s2"):
        t = ts[name]
        for p in t.consumes:
            if p.startswith("kubernetes/"):
                assert installer(p, t.deploys), f"{name}: nobody installs {p}"


def test_destinations():
    assert destination("kubernetes/containerd/config-gpu.toml") == "/etc/containerd/config.toml"
    assert destination("kubernetes/apt/kubernetes.list") == \
        "/etc/apt/sources.list.d/kubernetes.list"
    assert destination("kubernetes/node/sysctl.conf").startswith("/etc/sysctl.d/")
    assert destination("kubernetes/node/modules.conf").startswith("/etc/modules-load.d/")
    assert installer("kubernetes/kubeadm/join/k8s2.yaml", ["k8s_worker"]) == "k8s_worker"


def test_package_source_is_rendered_from_the_spec_version(lab):
    result, _, _ = lab
    arts = result.artifacts
    url, keyring = repository(arts["kubernetes/apt/kubernetes.list"].content.decode())
    assert url == "https://pkgs.k8s.io/core:/stable:/v1.36/deb/"
    pref = arts["kubernetes/apt/kubernetes.pref"].content.decode()
    assert pinned_packages(pref) == ["kubelet", "kubeadm", "kubectl"]
    assert "Pin: version 1.36.1-*" in pref


def test_package_repository_override(tmp_path):
    spec = (ROOT / "stacks" / "lab.yaml").read_text().replace(
        "kubernetes:\n", "kubernetes:\n  package_repository: http://mirror.example/k8s/ /\n", 1)
    (tmp_path / "s.yaml").write_text(spec)
    result = build(tmp_path / "s.yaml")
    assert result.ok, [f.as_dict() for f in result.findings]
    url, _ = repository(result.artifacts["kubernetes/apt/kubernetes.list"].content.decode())
    assert url == "http://mirror.example/k8s/"


def test_kernel_problem_names_what_cannot_be_applied():
    answers = {"uname -r": "6.1\n"}
    run = lambda cmd: answers.get(cmd, "ok" if "overlay" in cmd else "")  # noqa: E731
    problem = kernel_problem(run, ["overlay", "br_netfilter"], {"net.ipv4.ip_forward": "1"})
    assert "br_netfilter" in problem and "overlay" not in problem.split("modules")[1][:20]
    assert "net.ipv4.ip_forward" in problem
    assert kernel_problem(lambda cmd: "ok" if "echo ok" in cmd else "1", ["overlay"],
                          {"net.ipv4.ip_forward": "1"}) is None


def test_rendered_kernel_files_parse(lab):
    result, _, _ = lab
    a = result.artifacts
    assert rendered_modules(a["kubernetes/node/modules.conf"].content.decode()) == \
        ["overlay", "br_netfilter"]
    assert rendered_sysctls(a["kubernetes/node/sysctl.conf"].content.decode())[
        "net.ipv4.ip_forward"] == "1"


def test_reach_problem_names_host_and_port():
    assert reach_problem(lambda cmd: "", "https://pkgs.k8s.io/core:/stable:/v1.31/deb/") == \
        "cannot reach pkgs.k8s.io:443 (https://pkgs.k8s.io/core:/stable:/v1.31/deb/) from this node"
    assert reach_problem(lambda cmd: "ok\n", "http://mirror:8080/k8s/") is None


def test_manifests_are_applied_server_side_in_order_and_kueue_is_awaited(lab, tmp_path):
    """The role's apply command, run by a shell against a kubectl that only logs."""
    import shlex
    import subprocess
    from estate.model import kubernetes as k8s
    from roles.k8s_control_plane.tasks import ADMIN, APPLY_MANIFESTS
    result, _, _ = lab
    files = [destination(p) for p in sorted(result.artifacts)
             if p.startswith("kubernetes/manifests/")]
    command = APPLY_MANIFESTS.format(files=shlex.join(files), admin=shlex.quote(ADMIN),
                                     controller=shlex.quote(k8s.KUEUE_CONTROLLER),
                                     ns=shlex.quote(k8s.KUEUE_NAMESPACE),
                                     deployment=shlex.quote(k8s.KUEUE_DEPLOYMENT))
    log = tmp_path / "log"
    (tmp_path / "kubectl").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    (tmp_path / "kubectl").chmod(0o755)
    run = subprocess.run(["sh", "-c", command], env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    calls = log.read_text().splitlines()
    applied = [c.rsplit(" -f ", 1)[1] for c in calls if " apply " in c]
    assert applied == files and all("--server-side" in c for c in calls if " apply " in c)
    order = [c.rsplit(" -f ", 1)[1].rsplit("/", 1)[1] if " apply " in c else c.split()[2]
             for c in calls]
    assert order.index("41-kueue-controller.yaml") < order.index("wait") \
        < order.index("-n") < order.index("50-kueue.yaml")
    assert any("rollout status deployment/kueue-controller-manager" in c for c in calls)


def _fake(tmp_path, name: str, body: str) -> None:
    (tmp_path / name).write_text("#!/bin/sh\n" + body)
    (tmp_path / name).chmod(0o755)


@pytest.mark.parametrize("failures,rc", [(0, 0), (2, 0), (3, 1)])
def test_a_control_plane_join_that_collides_is_reset_and_retried(tmp_path, failures, rc):
    """The role's join command, run by a shell against a kubeadm that fails `failures` times
    (another member being added): each failure is reset, three tries, the filled file (it
    holds the certificate key) removed whatever happens."""
    import shlex
    import subprocess
    from roles.k8s_control_plane.tasks import JOIN_COMMAND
    log, count, filled = tmp_path / "log", tmp_path / "count", tmp_path / "join.yaml"
    filled.write_text("secret")
    _fake(tmp_path, "kubeadm", f'echo "$*" >> {log}\ncase "$1" in join) '
                               f'n=$(cat {count} 2>/dev/null || echo 0); '
                               f'echo $((n + 1)) > {count}; [ "$n" -ge {failures} ];; esac\n')
    command = JOIN_COMMAND.format(delay="0", retry="0", config=shlex.quote(str(filled)))
    run = subprocess.run(["sh", "-c", command], env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
                         capture_output=True, text=True)
    assert run.returncode == rc, run.stderr
    calls = log.read_text().splitlines()
    joins = min(failures + 1, 3)
    assert calls.count(f"join --config {filled}") == joins
    assert calls.count("reset --force") == joins - (1 - rc)
    assert not filled.exists()


def test_ha_control_planes_get_the_join_kube_vip_and_timers_from_their_role():
    from estate.model import kubernetes as k8s
    from roles.k8s_control_plane.tasks import JOIN_STAGGER_S  # noqa: F401
    from tests.unit.checkutil import spec_dict
    import tempfile
    import yaml
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "ha.yaml").write_text(yaml.safe_dump(spec_dict("ha"), sort_keys=False))
        result = build(Path(d) / "ha.yaml")
    assert result.ok, [f.as_dict() for f in result.findings if f.severity.name == "ERROR"]
    manifest = {p: {"consumers": str(a.consumers), "plane": a.plane}
                for p, a in result.artifacts.items()}
    ts = {t.name: t for t in targets(result.estate, manifest)}
    cp2 = ts["k8s-cp2"]
    assert "k8s_control_plane" in cp2.deploys and "k8s_worker" not in cp2.deploys
    for p in ("kubernetes/kubeadm/join/k8s-cp2.yaml", k8s.KUBE_VIP_PATH,
              "kubernetes/systemd/estate-etcd-snapshot.timer", "kubernetes/sbin/estate-cert-renew"):
        assert p in cp2.consumes and installer(p, cp2.deploys) == "k8s_control_plane", p
    assert k8s.KUBE_VIP_INIT_PATH not in cp2.consumes
    assert destination(k8s.KUBE_VIP_PATH) == destination(k8s.KUBE_VIP_INIT_PATH) == \
        "/etc/kubernetes/manifests/kube-vip.yaml"
    assert destination("kubernetes/systemd/estate-cert-renew.timer") == \
        "/etc/systemd/system/estate-cert-renew.timer"
    assert destination("kubernetes/sbin/estate-etcd-snapshot") == \
        "/usr/local/sbin/estate-etcd-snapshot"


class _Host:
    def __init__(self, name, data=None, answers=None):
        self.name, self.data, self.answers, self.asked = name, data or {}, answers or {}, []

    def get_fact(self, fact, **kwargs):
        self.asked.append((fact, kwargs))
        return self.answers[fact]


def test_further_control_planes_share_one_certificate_key_per_run(monkeypatch):
    """Each `upload-certs` makes a new key and re-encrypts the uploaded certificates: the
    first control plane is asked once per run, whichever control planes join."""
    from pyinfra.api import OperationError
    import roles.k8s_control_plane.tasks as cp
    key = "0123456789abcdef" * 4
    first = _Host("k8s-cp1", answers={
        JoinToken: {"KUBEADM_TOKEN": "abcdef.0123456789abcdef",
                    "KUBEADM_CA_CERT_HASH": "sha256:" + "a" * 64},
        CertificateKey: key})
    monkeypatch.setattr(cp, "_JOIN_VALUES", {})
    monkeypatch.setattr(cp, "first_control_plane", lambda: first)
    for name in ("k8s-cp2", "k8s-cp3"):
        monkeypatch.setattr(cp, "host", _Host(name))
        assert cp.control_plane_join_values() == {
            "KUBEADM_TOKEN": "abcdef.0123456789abcdef",
            "KUBEADM_CA_CERT_HASH": "sha256:" + "a" * 64, "KUBEADM_CERTIFICATE_KEY": key}
    assert first.asked.count((CertificateKey, {})) == 1
    assert (JoinToken, {"ttl": cp.JOIN_TTL}) in first.asked
    # under Pulumi the first control plane's step hands them over
    given = {"token": "bcdefa.0123456789abcdef", "ca_cert_hash": "sha256:" + "b" * 64,
             "certificate_key": "f" * 64}
    monkeypatch.setattr(cp, "host", _Host("k8s-cp2", data={"estate_join": given}))
    assert cp.control_plane_join_values()["KUBEADM_CERTIFICATE_KEY"] == "f" * 64
    # no key printed: refused before anything is written
    monkeypatch.setattr(cp, "_JOIN_VALUES", {})
    first.answers[CertificateKey] = ""
    monkeypatch.setattr(cp, "host", _Host("k8s-cp3"))
    with pytest.raises(OperationError, match="no certificate key"):
        cp.control_plane_join_values()


def test_further_control_planes_join_one_after_another(monkeypatch):
    import roles.k8s_control_plane.tasks as cp
    from estate.model import kubernetes as k8s
    info = {"kubernetes/kubeadm/init.yaml": {"consumers": "k8s-cp1"},
            k8s.SYSTEMD_UNITS + k8s.timer_unit("etcd-snapshot"): {"consumers": "k8s-cp[1-3]"}}
    monkeypatch.setattr(cp, "artifact_info", info.__getitem__)
    for name, index in (("k8s-cp2", 0), ("k8s-cp3", 1)):
        monkeypatch.setattr(cp, "node", lambda name=name: name)
        assert cp.join_index() == index
