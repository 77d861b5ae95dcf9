"""kubeadm join with the rendered JoinConfiguration, its placeholders filled on the node
with a token made on the first control plane (never written to the rendered tree).

A joined node (/etc/kubernetes/kubelet.conf) is left alone. The control plane must be
in the same pyinfra run (estate apply's k8s_join phase). Where kubeadm is missing the
role is Unsupported, with the reason.
"""
from __future__ import annotations

import re

from pyinfra import host, state
from pyinfra.api import OperationError, deploy
from pyinfra.facts.server import Command

from estate.provision.destinations import destination
from estate.spec.hostlist import Hostlist
from roles._lib import probe, Unsupported, artifact_info, consumed, install, put_text, render_dir, \
    run_when_changed
from roles.k8s_control_plane.tasks import missing_tools

KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
FILLED = "/etc/kubernetes/estate-join.yaml"


def join_values(join_command: str) -> dict[str, str]:
    """KUBEADM_TOKEN and KUBEADM_CA_CERT_HASH from `kubeadm token create --print-join-command`."""
    token = re.search(r"--token (\S+)", join_command)
    ca = re.search(r"--discovery-token-ca-cert-hash (\S+)", join_command)
    if not token or not ca:
        raise OperationError("the control plane printed no join command")
    return {"KUBEADM_TOKEN": token.group(1), "KUBEADM_CA_CERT_HASH": ca.group(1)}


def _control_plane():
    """The host in this run that consumes init.yaml (the first control plane)."""
    first = Hostlist.parse(artifact_info("kubernetes/kubeadm/init.yaml")["consumers"])
    for h in state.inventory:
        if (h.data.get("estate_node") or h.name) in first:
            return h
    raise OperationError(f"{host.name}: the control plane {first} is not in this run; "
                         "join through `estate apply`")


@deploy("k8s_worker")
def k8s_worker() -> None:
    missing = missing_tools(probe)
    if missing:
        raise Unsupported(f"{', '.join(missing)} not installed (see k8s_packages on this node)")
    joins = consumed("kubernetes/kubeadm/join/*")
    for p in joins:
        install(p)
    if not joins or probe(f"test -f {KUBELET_CONF} && echo joined"):
        return
    cp = _control_plane()
    values = join_values(cp.get_fact(Command, "kubeadm token create --print-join-command"))
    text = (render_dir() / joins[0]).read_text()
    for key, value in values.items():
        text = text.replace("${" + key + "}", value)
    put_text(text, FILLED, mode="0600", name=f"Join config (from {destination(joins[0])})")
    run_when_changed(name="kubeadm join", stamp="/var/lib/estate/applied/kubeadm-join",
                     digest="joined", command=f"kubeadm join --config {FILLED} && rm -f {FILLED}")
