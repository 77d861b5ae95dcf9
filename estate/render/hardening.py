"""The security settings Estate adds to the workloads it renders or vendors, in one place.

Each function states what it sets; the reasons that are specific to a workload live beside
the call. What a workload cannot take (a privileged GPU add-on, a host-network pod) is
listed with its reason in k8s/checkov-allowlist.txt, which tests/unit/test_checkov.py holds
to Checkov's findings on the rendered manifests.
"""
from __future__ import annotations

RUNTIME_DEFAULT = {"type": "RuntimeDefault"}


def seccomp(pod: dict) -> None:
    """The container runtime's default seccomp profile for every container of the pod (the
    kubelet's own default is Unconfined unless seccompDefault is on)."""
    pod.setdefault("securityContext", {}).setdefault("seccompProfile", dict(RUNTIME_DEFAULT))


def unprivileged(container: dict, add: tuple[str, ...] = (), read_only: bool = True) -> None:
    """No privilege escalation, every capability dropped but `add`, and a read-only root
    filesystem where the image writes nothing outside its volumes."""
    sc = container.setdefault("securityContext", {})
    sc.pop("privileged", None)
    sc["allowPrivilegeEscalation"] = False
    sc["capabilities"] = {"drop": ["ALL"], **({"add": list(add)} if add else {})}
    if read_only:
        sc["readOnlyRootFilesystem"] = True


def sized(container: dict, cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> None:
    container["resources"] = {"requests": {"cpu": cpu, "memory": memory},
                              "limits": {"cpu": cpu_limit, "memory": memory_limit}}


def cpu_limit(container: dict, limit: str) -> None:
    """A CPU limit where upstream sets requests and a memory limit only."""
    container.setdefault("resources", {}).setdefault("limits", {}).setdefault("cpu", limit)
