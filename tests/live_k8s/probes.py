"""The pods the live tenancy checks run (tests/live_k8s/test_live_tenancy.py), built from
the derived model so they carry what a tenant's pod may carry. A unit test holds each to
Kubernetes' strict schema, so the shapes are checked even where no cluster exists."""
from __future__ import annotations

from estate.model import kubernetes as k8s
from estate.spec.model import Tenant
from estate.spec.resolved import Estate

# Kubernetes' own e2e images: agnhost serves and probes (netexec, connect, pause).
AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.53"
BUSYBOX = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"     # a shell, for ls
PORT = 8080
PROBE_LABEL = "estate.io/live-probe"
# Small, explicit requests: the tenants' ResourceQuotas fence CPU and memory too.
RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"},
             "limits": {"cpu": "100m", "memory": "64Mi"}}


def pod(name: str, namespace: str, args: list[str], *, gpus: dict[str, int] | None = None,
        node: str | None = None, tolerations: list[dict] = (), env: dict | None = None,
        image: str = AGNHOST, command: list[str] | None = None) -> dict:
    resources = {k: dict(v) for k, v in RESOURCES.items()}
    for resource, n in (gpus or {}).items():
        resources["requests"][resource] = str(n)
        resources["limits"][resource] = str(n)
    container = {"name": "probe", "image": image, "args": args, "resources": resources,
                 "securityContext": {"allowPrivilegeEscalation": False,
                                     "capabilities": {"drop": ["ALL"]},
                                     "runAsNonRoot": True, "runAsUser": 65534,
                                     "seccompProfile": {"type": "RuntimeDefault"}}}
    if command:
        container["command"] = command
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    spec = {"containers": [container], "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {PROBE_LABEL: name}},
            "spec": spec}


def server(tenant: Tenant) -> dict:
    return pod("probe-server", tenant.name, ["netexec", f"--http-port={PORT}"])


def client(tenant: Tenant) -> dict:
    return pod("probe-client", tenant.name, ["pause"])


def reachable(source: Tenant, target: Tenant) -> bool:
    """What the spec allows: a tenant's own pods, and those of the tenants it allows from."""
    return source.name == target.name or source.name in target.allow_from


def over_share(estate: Estate, tenant: Tenant) -> dict:
    """A pod asking for one GPU unit more than the tenant's share (its ResourceQuota)."""
    share = k8s.tenant_resources(estate, tenant)
    resource = max(share, key=lambda r: share[r])
    return pod("probe-over-share", tenant.name, ["pause"], gpus={resource: share[resource] + 1})


def gpu_less_on(estate: Estate, tenant: Tenant, node: k8s.KNode) -> dict:
    """A pod on a GPU node that asks for no GPU but names them all in the variable the
    runtime used to honour: it must see no /dev/nvidia<N> (kubernetes.gpu_isolation)."""
    pool = node.facts.gpu_model
    return pod("probe-no-gpu", tenant.name, ["ls /dev | grep -c '^nvidia[0-9]' || true"],
               image=BUSYBOX, command=["sh", "-c"], node=node.name,
               tolerations=[k8s.pool_toleration(pool)], env={"NVIDIA_VISIBLE_DEVICES": "all"})


def granted_gpu_node(estate: Estate) -> tuple[Tenant, k8s.KNode] | None:
    """A tenant and a GPU worker of a pool it holds quota in (its pods may tolerate it)."""
    quotas = k8s.tenant_quotas(estate)
    for node in k8s.plane_nodes(estate):
        if not node.is_gpu_worker:
            continue
        for tenant in estate.spec.kubernetes.tenants:
            if any(q.flavor == node.facts.gpu_model for q in quotas[tenant.name]):
                return tenant, node
    return None
