"""kubeadm join with the rendered JoinConfiguration, its placeholders filled on the node
with a token made on the first control plane (never written to the rendered tree).

A joined node (/etc/kubernetes/kubelet.conf) is left alone. The token comes from the
control plane when it is in the same pyinfra run (estate apply's k8s_join phase), else
from host data ``estate_join`` (under Pulumi: the control plane's step's secret outputs,
handed to this node's step in its environment). Where kubeadm is missing the role is
Unsupported, with the reason.
"""
from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationError, deploy

from estate.model.destinations import destination
from roles._lib import probe, Unsupported, artifact_info, consumed, install, put_text, render_dir, \
    run_when_changed
from roles._lib.kubernetes import first_control_plane, join_values, missing_tools

KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
FILLED = "/etc/kubernetes/estate-join.yaml"


def _join_values() -> dict[str, str]:
    given = host.data.get("estate_join") or {}
    if given.get("token") and given.get("ca_cert_hash"):
        return {"KUBEADM_TOKEN": given["token"], "KUBEADM_CA_CERT_HASH": given["ca_cert_hash"]}
    cp = first_control_plane()
    if cp is None:
        first = artifact_info("kubernetes/kubeadm/init.yaml")["consumers"]
        raise OperationError(f"{host.name}: the control plane {first} is not in this run and "
                             "no join token was given; join through `estate apply`, or under "
                             "Pulumi from the control plane's step outputs")
    return join_values(cp)


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
    values = _join_values()
    text = (render_dir() / joins[0]).read_text()
    for key, value in values.items():
        text = text.replace("${" + key + "}", value)
    put_text(text, FILLED, mode="0600", name=f"Join config (from {destination(joins[0])})")
    run_when_changed(name="kubeadm join", stamp="/var/lib/estate/applied/kubeadm-join",
                     digest="joined", command=f"kubeadm join --config {FILLED} && rm -f {FILLED}")
