"""kubeadm init with the rendered init config, the pod network (the CNI operator, then its
Installation once the operator has created its CRD), then the rendered manifests in name
order.

An initialised node (/etc/kubernetes/admin.conf) is not initialised again; manifests
are re-applied when their digest changes. Where kubeadm is missing (k8s_packages could
not install it) the role is Unsupported, with the reason.

Under Pulumi (`estate pulumi step`) the control plane also hands out what the other nodes
join with: in the k8s_join phase it writes a fresh join token, the CA certificate hash,
a certificate key and admin.conf to the local file named by host data
``estate_join_out`` (0600), which the step prints as its secret output. A later step
(host data ``estate_revoke_join``: the token's public id) deletes that token once the
workers have joined.
"""
from __future__ import annotations

import json
import os
import re
import shlex

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.facts.server import Command
from pyinfra.operations import server

from estate.model import cni
from estate.model import kubernetes as k8s
from estate.model.services import MANIFESTS
from estate.provision.destinations import destination
from roles._lib import probe, STAMPS, Unsupported, consumed, digest_of, install, run_when_changed, \
    runtime
from roles._lib.facts import FileText

ADMIN = "/etc/kubernetes/admin.conf"
INIT = "/root/estate-kubeadm-init.yaml"
# A join token lives long enough for one `pulumi up`; the run revokes it sooner.
JOIN_TTL = "2h"
# Tries, 5 s apart, for the CNI operator to pull its image, start and create its CRDs.
CRD_TRIES = "60"
TOKEN_ID = re.compile(r"^[a-z0-9]{6}$")
# Fills ${KUBEADM_CERTIFICATE_KEY} from the environment (KEY): the key is never an
# argument of any process, so `ps` cannot show it.
FILL_KEY = ("awk 'BEGIN { k = ENVIRON[\"KEY\"]; p = \"${KUBEADM_CERTIFICATE_KEY}\" } "
            "{ while ((i = index($0, p)) > 0) $0 = substr($0, 1, i - 1) k "
            "substr($0, i + length(p)); print }'")
# kubeadm init once, on a 0600 copy of the init config with a fresh certificate key.
INIT_COMMAND = ("test -f {admin} || ( umask 077 && KEY=$(kubeadm certs certificate-key) && "
                "KEY=$KEY {fill} {src} > {config} && kubeadm init --upload-certs --config "
                "{config}; rc=$?; rm -f {config}; exit $rc )")


def apply_network(files: list[str], digest: str) -> None:
    """kubectl apply of the pod network's manifests, again when their digest changes. The
    CNI operator goes first: it creates the Installation CRD when it starts, and an
    Installation applied before that is refused ("no matches for kind"); so the
    Installation waits until the CRD exists and is Established."""
    first = [f for f in files if f.endswith("/" + cni.OPERATOR_PATH)]
    rest = [f for f in files if f not in first]
    kubectl = f"kubectl --kubeconfig {shlex.quote(ADMIN)}"
    crd = shlex.quote(f"crd/{cni.INSTALLATION_CRD}")
    then = f"{kubectl} apply {shlex.join(a for f in rest for a in ('-f', f))}" if rest \
        else "true"
    wait = (f"for i in $(seq {CRD_TRIES}); do {kubectl} get {crd} >/dev/null 2>&1 && break; "
            f"sleep 5; done && {kubectl} wait --for condition=Established --timeout=60s {crd}")
    command = f"{kubectl} apply {shlex.join(a for f in first for a in ('-f', f))} && " \
              f"{wait} && {then}" if first else then
    run_when_changed(name="kubectl apply the pod network (the CNI operator, then its "
                          "Installation once the operator's CRD is Established)",
                     stamp=f"{STAMPS}/k8s-network", digest=digest, command=command)


# The rendered manifests, applied one file at a time in name order and server-side
# (Kueue's CRDs exceed the 256 KiB last-applied annotation of a client-side apply). After
# Kueue's controller file, wait until Kueue serves: its CRDs established and its
# Deployment rolled out (its webhooks validate every ClusterQueue applied next).
APPLY_MANIFESTS = (
    "for f in {files}; do kubectl --kubeconfig {admin} apply --server-side --force-conflicts "
    "-f \"$f\" || exit 1; case \"$f\" in */{controller}) kubectl --kubeconfig {admin} wait "
    "--for=condition=Established --timeout=120s crd/clusterqueues.kueue.x-k8s.io "
    "crd/localqueues.kueue.x-k8s.io crd/resourceflavors.kueue.x-k8s.io && kubectl "
    "--kubeconfig {admin} -n {ns} rollout status deployment/{deployment} --timeout=300s "
    "|| exit 1;; esac; done")


def missing_tools(run) -> list[str]:
    return [t for t in ("kubeadm", "kubelet", "kubectl")
            if (run(f"command -v {shlex.quote(t)}") or "").strip() == ""]


def join_values(join_command: str) -> dict[str, str]:
    """KUBEADM_TOKEN and KUBEADM_CA_CERT_HASH from `kubeadm token create --print-join-command`."""
    token = re.search(r"--token (\S+)", join_command)
    ca = re.search(r"--discovery-token-ca-cert-hash (\S+)", join_command)
    if not token or not ca:
        raise OperationError("the control plane printed no join command")
    return {"KUBEADM_TOKEN": token.group(1), "KUBEADM_CA_CERT_HASH": ca.group(1)}


@deploy("k8s_control_plane")
def k8s_control_plane(join: bool = False) -> None:
    missing = missing_tools(probe)
    if missing:
        raise Unsupported(f"{', '.join(missing)} not installed (see k8s_packages on this node)")
    revoke = host.data.get("estate_revoke_join")
    if revoke:
        revoke_token(revoke)
        return
    init = consumed("kubernetes/kubeadm/init.yaml")
    if not init:
        raise OperationError(f"{host.name}: joining further control planes (kubeadm join "
                             "--control-plane with the uploaded certificate key) is not "
                             "implemented yet; only the first control plane is provisioned")
    install(init[0])
    run_when_changed(name="kubeadm init", stamp=f"{STAMPS}/kubeadm-init",
                     digest="initialised",  # once: admin.conf marks an initialised node
                     command=INIT_COMMAND.format(admin=shlex.quote(ADMIN), fill=FILL_KEY,
                                                 src=shlex.quote(destination(init[0])),
                                                 config=shlex.quote(INIT)))
    # The pod network first, in every path (estate.model.cni.ROLE_MANIFESTS says why).
    network = sorted(p for p in consumed(MANIFESTS + "*") if cni.role_applied(p))
    for p in network:
        install(p)
    if network:
        apply_network([destination(p) for p in network], digest_of(network))
    # One owner for the rest: under Pulumi its ConfigGroup applies them (estate apply
    # --no-manifests).
    manifests = sorted(p for p in consumed(MANIFESTS + "*") if not cni.role_applied(p)) \
        if runtime("apply_manifests", True) else []
    for p in manifests:
        install(p)
    if manifests:
        run_when_changed(name="kubectl apply the rendered manifests (name order)",
                         stamp=f"{STAMPS}/k8s-manifests", digest=digest_of(manifests),
                         command=APPLY_MANIFESTS.format(
                             files=shlex.join(destination(p) for p in manifests),
                             admin=shlex.quote(ADMIN),
                             controller=shlex.quote(k8s.KUEUE_CONTROLLER),
                             ns=shlex.quote(k8s.KUEUE_NAMESPACE),
                             deployment=shlex.quote(k8s.KUEUE_DEPLOYMENT)))
    out = host.data.get("estate_join_out")
    if join and out:
        write_join_material(out)


def join_material() -> dict[str, str]:
    """A fresh join token, the CA hash, a certificate key and admin.conf, read from the
    initialised node (facts: nothing of it is logged or named in an operation)."""
    values = join_values(host.get_fact(
        Command, f"kubeadm token create --ttl {JOIN_TTL} --description "
                 "'estate: revoked once the workers have joined' --print-join-command"))
    # upload-certs makes the key itself and prints it last: it is on no command line.
    key = host.get_fact(Command, "kubeadm init phase upload-certs --upload-certs "
                                 "2>/dev/null | tail -n 1")
    return {"token": values["KUBEADM_TOKEN"], "ca_cert_hash": values["KUBEADM_CA_CERT_HASH"],
            "certificate_key": (key or "").strip(),
            "admin_conf": host.get_fact(FileText, path=ADMIN)}


def write_join_material(path: str) -> None:
    if not probe(f"test -f {shlex.quote(ADMIN)} && echo initialised"):
        return   # not initialised yet: the k8s_control phase's init failed or has not run
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(join_material(), f)


def revoke_token(token_id: str) -> None:
    """Delete a join token by its public id (the secret half never leaves the step)."""
    if not TOKEN_ID.match(token_id):
        raise OperationError(f"{host.name}: {token_id!r} is not a bootstrap token id")
    quoted = shlex.quote(token_id)
    listed = probe(f"kubeadm token list 2>/dev/null | awk 'NR > 1 {{ print $1 }}' "
                   f"| cut -d. -f1 | grep -x {quoted}")
    if listed.strip() == token_id:
        server.shell(name=f"Revoke the join token {token_id}",
                     commands=[f"kubeadm token delete {quoted}"])
