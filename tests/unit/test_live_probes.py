"""The live tier's probe pods (tests/live_k8s/probes.py), checked where no cluster runs:
each is a valid Pod at the spec's Kubernetes version, admissible under the tenants' Pod
Security level, and asks for what its test needs (one unit over the rendered quota; no GPU
but a pool's toleration)."""
from __future__ import annotations

import pytest
import yaml

from estate.check.kubernetes_schema import validate_object
from estate.model import kubernetes as k8s
from estate.pipeline import build
from tests.live_k8s import probes


@pytest.fixture(scope="module")
def prod():
    result = build("stacks/example-prod.yaml")
    assert result.ok
    return result


def _pods(estate):
    tenants = estate.spec.kubernetes.tenants
    out = [probes.server(t) for t in tenants] + [probes.client(t) for t in tenants]
    out += [probes.over_share(estate, t) for t in tenants if t.gpus]
    found = probes.granted_gpu_node(estate)
    assert found, "example-prod has a GPU pool a tenant holds quota in"
    return out + [probes.gpu_less_on(estate, *found)]


def test_every_probe_is_a_valid_pod(prod):
    version = prod.estate.spec.kubernetes.version
    for obj in _pods(prod.estate):
        assert validate_object(obj, version) == [], obj["metadata"]


def test_probes_meet_the_restricted_pod_security_level(prod):
    """Tenants enforce baseline and warn on restricted: the probes must not need either."""
    for obj in _pods(prod.estate):
        for c in obj["spec"]["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert sc["seccompProfile"]["type"] == "RuntimeDefault"


def test_over_share_asks_one_unit_more_than_the_rendered_quota(prod):
    est, arts = prod.estate, prod.artifacts
    for tenant in (t for t in est.spec.kubernetes.tenants if t.gpus):
        obj = probes.over_share(est, tenant)
        [(resource, asked)] = [(r, int(n)) for r, n in
                               obj["spec"]["containers"][0]["resources"]["requests"].items()
                               if k8s.gpu_resource(r)]
        hard = [d["spec"]["hard"] for a in arts.values()
                if a.path.startswith("kubernetes/manifests/")
                for d in yaml.safe_load_all(a.content)
                if d and d.get("kind") == "ResourceQuota"
                and d["metadata"].get("namespace") == tenant.name
                and f"requests.{resource}" in d["spec"].get("hard", {})]
        assert hard, tenant.name
        assert asked == int(hard[0][f"requests.{resource}"]) + 1


def test_the_gpu_less_probe_asks_for_no_gpu_on_a_granted_pool(prod):
    est = prod.estate
    tenant, node = probes.granted_gpu_node(est)
    obj = probes.gpu_less_on(est, tenant, node)
    requests = obj["spec"]["containers"][0]["resources"]["requests"]
    assert not [r for r in requests if k8s.gpu_resource(r)]
    assert obj["spec"]["tolerations"] == [k8s.pool_toleration(node.facts.gpu_model)]
    assert k8s.pool_toleration(node.facts.gpu_model) in k8s.tolerations_whitelist(est, tenant)


def test_the_reachability_the_probes_expect_is_the_specs(prod):
    tenants = prod.estate.spec.kubernetes.tenants
    for a in tenants:
        assert probes.reachable(a, a)
        for b in tenants:
            assert probes.reachable(a, b) == (a is b or a.name in b.allow_from)
