"""kubeadm init with the rendered init config, the pod network (the CNI operator, then its
Installation once the operator has created its CRD), then the rendered manifests in name
order. A further control plane joins instead (kubeadm join from its rendered
JoinConfiguration, in the k8s_join phase). Every control plane gets kube-vip (when the spec
has an API VIP) and the etcd snapshot and certificate renewal timers.

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

import hashlib
import json
import os
import re
import shlex

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.facts.files import Sha256File
from pyinfra.operations import server, systemd

from estate.model import cni
from estate.model.bridge import K8S_CA_CERT, K8S_CA_KEY
from estate.model import kubernetes as k8s
from estate.model.services import MANIFESTS
from estate.model.destinations import destination
from estate.spec.hostlist import Hostlist
from roles._lib import probe, STAMPS, Unsupported, artifact_info, consumed, digest_of, install, \
    install_secret, node, put_text, render_dir, run_when_changed, runtime, secrets_dir
from roles._lib.facts import CertificateKey, FileText
from roles._lib.kubernetes import first_control_plane, join_values, missing_tools

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


@deploy("k8s_control_plane")
def k8s_control_plane(join: bool = False) -> None:
    missing = missing_tools(probe)
    if missing:
        raise Unsupported(f"{', '.join(missing)} not installed (see k8s_packages on this node)")
    revoke = host.data.get("estate_revoke_join")
    if revoke:
        revoke_token(revoke)
        return
    # before init or join: the API server's flags name it (kubernetes.oidc)
    for p in consumed(k8s.AUTH_CONFIG):
        install(p)
    init = consumed("kubernetes/kubeadm/init.yaml")
    if not init:   # a further control plane
        join_control_plane(join)
        return
    initialised = bool(probe(f"test -f {shlex.quote(ADMIN)} && echo initialised").strip())
    # kube-vip holds the VIP kubeadm init waits on: during init it needs super-admin.conf
    # (admin.conf gets its rights from init itself); once initialised, admin.conf.
    if consumed(k8s.KUBE_VIP_INIT_PATH) and not initialised:
        install(k8s.KUBE_VIP_INIT_PATH)
    cluster_ca(initialised)
    install(init[0])
    run_when_changed(name="kubeadm init", stamp=f"{STAMPS}/kubeadm-init",
                     digest="initialised",  # once: admin.conf marks an initialised node
                     command=INIT_COMMAND.format(admin=shlex.quote(ADMIN), fill=FILL_KEY,
                                                 src=shlex.quote(destination(init[0])),
                                                 config=shlex.quote(INIT)))
    control_plane_files()
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


def cluster_ca(initialised: bool) -> None:
    """The estate's cluster CA (estate.provision.kube_pki) in /etc/kubernetes/pki before
    kubeadm init, where a tenant's bridge needs it (runtime kubernetes_ca): kubeadm signs
    the cluster's certificates with a CA it finds there, and the bridge minter's client
    certificate comes from the same CA. The other control planes receive it through
    upload-certs. A cluster initialised with another CA is not touched: it stops here,
    with the way to hand that CA to Estate."""
    if not runtime("kubernetes_ca"):
        return
    if not initialised:
        install_secret(K8S_CA_CERT, k8s.CLUSTER_CA_CERT, owner="root:root", mode="0644")
        install_secret(K8S_CA_KEY, k8s.CLUSTER_CA_KEY, owner="root:root", mode="0600")
        return
    ours = hashlib.sha256((secrets_dir() / K8S_CA_CERT).read_bytes()).hexdigest()
    if host.get_fact(Sha256File, path=k8s.CLUSTER_CA_CERT) != ours:
        raise OperationError(
            f"{host.name}: this cluster was initialised with another CA than the estate's "
            f"{K8S_CA_CERT}, so the bridge minter's certificate would not be trusted. Copy "
            f"the cluster's {k8s.CLUSTER_CA_CERT} and {k8s.CLUSTER_CA_KEY} into the secrets "
            f"directory as {K8S_CA_CERT} and {K8S_CA_KEY} (root, 0600) and apply again")


def control_plane_files() -> None:
    """What every initialised or joined control plane runs beside kubeadm's static pods:
    kube-vip (with admin.conf), the etcd snapshot and certificate renewal timers."""
    if consumed(k8s.KUBE_VIP_PATH):
        install(k8s.KUBE_VIP_PATH)
    for p in consumed(k8s.SBIN + "*") + consumed(k8s.SYSTEMD_UNITS + "*"):
        install(p)
    for name in (*k8s.TIMERS, k8s.BRIDGE_APPROVE):
        if consumed(k8s.SYSTEMD_UNITS + k8s.timer_unit(name)):
            systemd.service(name=f"Enable {k8s.timer_unit(name)}",
                            service=k8s.timer_unit(name), running=True, enabled=True,
                            daemon_reload=True)


# Further control planes join one after another: etcd adds one learner member at a time,
# so a join that collides with another is reset and tried again, a minute later.
JOIN_STAGGER_S = 120
JOIN_RETRY_S = 60
JOIN_COMMAND = ("sleep {delay}; rc=1; for i in 1 2 3; do kubeadm join --config {config} && "
                "{{ rc=0; break; }}; kubeadm reset --force; sleep {retry}; done; "
                "rm -f {config}; exit $rc")
JOIN_FILLED = "/etc/kubernetes/estate-join.yaml"
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
CERT_KEY = re.compile(r"^[0-9a-f]{64}$")
# The first control plane's join values, made once per run (keyed by its pyinfra Host, which
# each run makes anew): each `upload-certs` makes a new key and re-encrypts the uploaded
# certificates, so a second one would void the first.
_JOIN_VALUES: dict[object, dict[str, str]] = {}


def join_control_plane(join: bool) -> None:
    """kubeadm join of a further control plane from its rendered JoinConfiguration (its
    controlPlane block makes it a `--control-plane` join), secrets filled on the node. In
    the k8s_join phase only: the first control plane is initialised by then. kube-vip and
    the timers come after the join, since kubeadm join's preflight wants
    /etc/kubernetes/manifests empty."""
    joins = consumed("kubernetes/kubeadm/join/*")
    for p in joins:
        install(p)
    if not joins:
        return
    if not probe(f"test -f {shlex.quote(KUBELET_CONF)} && echo joined").strip():
        if not join:
            return
        text = (render_dir() / joins[0]).read_text()
        for key, value in control_plane_join_values().items():
            text = text.replace("${" + key + "}", value)
        put_text(text, JOIN_FILLED, mode="0600",
                 name=f"Join config (from {destination(joins[0])})")
        delay = JOIN_STAGGER_S * join_index()
        run_when_changed(name="kubeadm join (control plane)",
                         stamp=f"{STAMPS}/kubeadm-join", digest="joined",
                         command=JOIN_COMMAND.format(delay=shlex.quote(str(delay)),
                                                     config=shlex.quote(JOIN_FILLED),
                                                     retry=shlex.quote(str(JOIN_RETRY_S))))
    control_plane_files()


def join_index() -> int:
    """This node's place among the further control planes (0 for the first to join)."""
    every = Hostlist.parse(artifact_info(k8s.SYSTEMD_UNITS + k8s.timer_unit("etcd-snapshot"))
                           ["consumers"])      # every control plane has the timers
    first = Hostlist.parse(artifact_info("kubernetes/kubeadm/init.yaml")["consumers"])
    joining = [n for n in every if n not in first]
    return joining.index(node()) if node() in joining else 0


def control_plane_join_values() -> dict[str, str]:
    """Token, CA hash and certificate key: from host data ``estate_join`` (under Pulumi),
    else from the first control plane in this run, once."""
    given = host.data.get("estate_join") or {}
    if given.get("token") and given.get("ca_cert_hash") and given.get("certificate_key"):
        values = {"KUBEADM_TOKEN": given["token"], "KUBEADM_CA_CERT_HASH": given["ca_cert_hash"],
                  "KUBEADM_CERTIFICATE_KEY": given["certificate_key"]}
    else:
        cp = first_control_plane()
        if cp is None:
            raise OperationError(f"{host.name}: the first control plane is not in this run "
                                 "and no join material was given; join through `estate "
                                 "apply`, or under Pulumi from the first control plane's step")
        if cp not in _JOIN_VALUES:
            _JOIN_VALUES[cp] = {**join_values(cp, ttl=JOIN_TTL),
                                "KUBEADM_CERTIFICATE_KEY": cp.get_fact(CertificateKey)}
        values = _JOIN_VALUES[cp]
    if not CERT_KEY.match(values["KUBEADM_CERTIFICATE_KEY"]):
        raise OperationError(f"{host.name}: the first control plane gave no certificate key "
                             "(kubeadm init phase upload-certs --upload-certs)")
    return values


def join_material() -> dict[str, str]:
    """A fresh join token, the CA hash, a certificate key and admin.conf, read from the
    initialised node (facts: nothing of it is logged or named in an operation)."""
    values = join_values(host, ttl=JOIN_TTL,
                         description="estate: revoked once the workers have joined")
    return {"token": values["KUBEADM_TOKEN"], "ca_cert_hash": values["KUBEADM_CA_CERT_HASH"],
            "certificate_key": host.get_fact(CertificateKey),
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
