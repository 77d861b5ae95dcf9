"""kubeadm init with the rendered init config, then the rendered manifests in name order.

An initialised node (/etc/kubernetes/admin.conf) is not initialised again; manifests
are re-applied when their digest changes. Where kubeadm is missing (k8s_packages could
not install it) the role is Unsupported, with the reason.
"""
from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import Command

from estate.provision.destinations import destination
from roles._lib import STAMPS, Unsupported, consumed, digest_of, install, run_when_changed

ADMIN = "/etc/kubernetes/admin.conf"


def missing_tools(run) -> list[str]:
    return [t for t in ("kubeadm", "kubelet", "kubectl")
            if (run(f"command -v {t}") or "").strip() == ""]


@deploy("k8s_control_plane")
def k8s_control_plane() -> None:
    missing = missing_tools(lambda c: host.get_fact(Command, f"{c} || true"))
    if missing:
        raise Unsupported(f"{', '.join(missing)} not installed (see k8s_packages on this node)")
    init = consumed("kubernetes/kubeadm/init.yaml")
    for p in init + consumed("kubernetes/kubeadm/join/*"):
        install(p)
    if init:
        run_when_changed(name="kubeadm init", stamp=f"{STAMPS}/kubeadm-init",
                         digest="initialised",  # once: admin.conf marks an initialised node
                         command=f"test -f {ADMIN} || kubeadm init --upload-certs "
                                 f"--config {destination(init[0])}")
    manifests = sorted(consumed("kubernetes/manifests/*"))
    for p in manifests:
        install(p)
    if manifests:
        files = " ".join(f"-f {destination(p)}" for p in manifests)
        run_when_changed(name="kubectl apply the rendered manifests (name order)",
                         stamp=f"{STAMPS}/k8s-manifests", digest=digest_of(manifests),
                         command=f"kubectl --kubeconfig {ADMIN} apply {files}")
