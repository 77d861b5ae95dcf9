"""kubeadm init with the rendered init config, then the rendered manifests in name order.

An initialised node (/etc/kubernetes/admin.conf) is not initialised again; manifests
are re-applied when their digest changes. Where kubeadm is missing (k8s_packages could
not install it) the role is Unsupported, with the reason.
"""
from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import OperationError, deploy

from estate.model.services import MANIFESTS
from estate.provision.destinations import destination
from roles._lib import probe, STAMPS, Unsupported, consumed, digest_of, install, run_when_changed, \
    runtime

ADMIN = "/etc/kubernetes/admin.conf"
INIT = "/root/estate-kubeadm-init.yaml"


def missing_tools(run) -> list[str]:
    return [t for t in ("kubeadm", "kubelet", "kubectl")
            if (run(f"command -v {shlex.quote(t)}") or "").strip() == ""]


@deploy("k8s_control_plane")
def k8s_control_plane() -> None:
    missing = missing_tools(probe)
    if missing:
        raise Unsupported(f"{', '.join(missing)} not installed (see k8s_packages on this node)")
    init = consumed("kubernetes/kubeadm/init.yaml")
    if not init:
        raise OperationError(f"{host.name}: joining further control planes (kubeadm join "
                             "--control-plane with the uploaded certificate key) is not "
                             "implemented yet; only the first control plane is provisioned")
    install(init[0])
    src = shlex.quote(destination(init[0]))
    admin = shlex.quote(ADMIN)
    config = shlex.quote(INIT)
    # Several control planes: init.yaml carries ${KUBEADM_CERTIFICATE_KEY}; it is made on the
    # node and substituted into a 0600 copy, never into the rendered or installed file.
    run_when_changed(name="kubeadm init", stamp=f"{STAMPS}/kubeadm-init",
                     digest="initialised",  # once: admin.conf marks an initialised node
                     command=f"test -f {admin} || ( umask 077 && "
                             f"key=$(kubeadm certs certificate-key) && "
                             f"sed \"s/\\${{KUBEADM_CERTIFICATE_KEY}}/$key/\" {src} > {config} && "
                             f"kubeadm init --upload-certs --config {config}; rc=$?; "
                             f"rm -f {config}; exit $rc )")
    # One owner: under Pulumi its ConfigGroup applies them (estate apply --no-manifests).
    manifests = sorted(consumed(MANIFESTS + "*")) if runtime("apply_manifests", True) else []
    for p in manifests:
        install(p)
    if manifests:
        files = shlex.join(arg for p in manifests for arg in ("-f", destination(p)))
        run_when_changed(name="kubectl apply the rendered manifests (name order)",
                         stamp=f"{STAMPS}/k8s-manifests", digest=digest_of(manifests),
                         command=f"kubectl --kubeconfig {shlex.quote(ADMIN)} apply {files}")
