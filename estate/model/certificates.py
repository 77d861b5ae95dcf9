"""Every certificate Estate issues or relies on: who holds it, how long it lives, what renews it.

One table (CERTIFICATES) that the expiry collector (estate.render.certificates: a script and
a timer on each holder, writing node_exporter textfile metrics), the CertificateExpiring
alert, `estate doctor`, `estate drift` and docs/rotation.md read. A certificate's renewal is
either automatic on its holder (a timer), or, where the holder lacks what renewal needs
(the CA key or the seed stays off the node), the command the operator runs; the alert
names that command 30 days ahead (WARN_DAYS).
"""
from __future__ import annotations

import base64
import datetime as dt
import re
from dataclasses import dataclass

from estate.model import bridge
from estate.model import kubernetes as k8s
from estate.model.monitoring import TEXTFILE_DIR
from estate.spec.resolved import Estate

# The alert, doctor and drift warn this long before a certificate's notAfter.
WARN_DAYS = 30
METRIC = "estate_certificate_expiry_seconds"
METRIC_HELP = ("The notAfter of a certificate as Unix time (seconds), by certificate name "
               "(estate.model.certificates) and file; renew names the command that renews it.")
# node_exporter's textfile collector reads *.prom here (Debian's default, set explicitly in
# monitoring/node-exporter.env); the collector writes one file, whole.
TEXTFILE = f"{TEXTFILE_DIR}/estate-certificates.prom"
UNIT = "estate-cert-expiry"
SCHEDULE = "hourly"
PEM, KUBECONFIG = "pem", "kubeconfig"


@dataclass(frozen=True)
class Certificate:
    """A certificate (or several files of one kind): its holders, files, lifetime, renewal."""
    name: str               # the metric's certificate label
    holders: str            # which nodes: a key of HOLDERS
    paths: tuple[str, ...]  # on the holder
    kind: str               # PEM, or KUBECONFIG (the client certificate inside it)
    lifetime: str
    renew: str              # the command that renews it (the alert and doctor name it)
    automatic: str          # what renews it without a person, or why nothing can


def _minter_paths(estate: Estate) -> tuple[str, ...]:
    return tuple(bridge.kubeconfig_path(g.tenant) for g in bridge.grants(estate))


# kubeadm's leaf certificates and the kubeconfigs it writes (kubeadm certs check-expiration
# lists the same), on every control plane.
KUBEADM_PEM = tuple(f"{k8s.PKI_DIR}/{f}" for f in (
    "apiserver.crt", "apiserver-kubelet-client.crt", "apiserver-etcd-client.crt",
    "front-proxy-client.crt", "etcd/server.crt", "etcd/peer.crt",
    "etcd/healthcheck-client.crt"))
KUBEADM_CONF = tuple(f"/etc/kubernetes/{f}.conf" for f in (
    "admin", "controller-manager", "scheduler"))
KUBELET_CLIENT = "/var/lib/kubelet/pki/kubelet-client-current.pem"

CERTIFICATES: tuple[Certificate, ...] = (
    Certificate("estate-ca", "tls", (bridge.TLS_CA,), PEM,
                "until 2045-01-01 (derived from the TLS seed), or the site CA's own",
                "estate rotate SPEC tls-seed",
                "none needed within its life; a new seed issues a new one"),
    Certificate("slurmrestd-front", "slurmrestd", (bridge.TLS_CERT,), PEM,
                "two years from January 1 of the year it was issued",
                "estate apply SPEC",
                "none on the node: it lacks the CA key and the seed (they stay with the "
                "operator); any apply in a new year issues the next one, a year ahead"),
    Certificate("bridge-minter", "minter", (), KUBECONFIG,
                f"until the first of the month {bridge.MINTER_CERT_MONTHS} months after issue",
                "systemctl start estate-bridge-renew (or estate apply SPEC)",
                "estate-bridge-renew.timer: the minter asks the API server for a new one "
                "(a CertificateSigningRequest) and the control planes' estate-bridge-approve "
                "approves its own user's only"),
    Certificate("cluster-ca", "cluster_ca", (k8s.CLUSTER_CA_CERT,), PEM,
                "until 2045-01-01 (derived from the cluster-CA seed), or kubeadm's ten years",
                "Kubernetes' manual CA rotation (docs/rotation.md)",
                "none: a new cluster CA must be trusted beside the old one first"),
    Certificate("kubeadm", "control_planes", KUBEADM_PEM, PEM, "one year",
                "kubeadm certs renew all", "estate-cert-renew.timer, monthly"),
    Certificate("kubeadm-kubeconfig", "control_planes", KUBEADM_CONF, KUBECONFIG, "one year",
                "kubeadm certs renew all", "estate-cert-renew.timer, monthly"),
    Certificate("kubelet-client", "kubernetes", (KUBELET_CLIENT,), PEM, "one year",
                "the kubelet renews it (rotateCertificates)", "the kubelet, at 70-90 % of life"),
)
BY_NAME = {c.name: c for c in CERTIFICATES}


def _holders(estate: Estate) -> dict[str, list[str]]:
    rest = estate.spec.slurm.slurmrestd
    fronts = list(estate.role_hosts("slurmrestd")) if rest else []
    minters = bridge.minter_hosts(estate)
    cps = [n.name for n in k8s.control_planes(estate)] if estate.spec.kubernetes else []
    kube = [n.name for n in k8s.plane_nodes(estate)] if estate.spec.kubernetes else []
    return {"tls": list(dict.fromkeys(fronts + minters)), "slurmrestd": fronts,
            "minter": minters, "cluster_ca": cps, "control_planes": cps, "kubernetes": kube}


def paths(estate: Estate, cert: Certificate) -> tuple[str, ...]:
    return _minter_paths(estate) if cert.name == "bridge-minter" else cert.paths


def held(estate: Estate) -> dict[str, list[tuple[Certificate, str]]]:
    """node -> (certificate, file) it holds, in the table's order; nodes holding none left
    out."""
    holders = _holders(estate)
    out: dict[str, list[tuple[Certificate, str]]] = {}
    for cert in CERTIFICATES:
        for node in holders[cert.holders]:
            out.setdefault(node, []).extend((cert, p) for p in paths(estate, cert))
    return {n: v for n, v in out.items() if v}


# --- reading a certificate's expiry (doctor, drift, tests) ---------------------------------

def client_certificate(kubeconfig: str) -> bytes | None:
    """The PEM of a kubeconfig's first client-certificate-data (never its key)."""
    m = re.search(r"^\s*client-certificate-data:\s*(\S+)", kubeconfig, re.M)
    return base64.b64decode(m.group(1)) if m else None


def read_command(kind: str, path: str) -> list[str]:
    """argv that prints the certificate part of the file (a kubeconfig's key stays there)."""
    if kind == KUBECONFIG:
        return ["sed", "-n", "s/^ *client-certificate-data: *//p", path]
    return ["cat", "--", path]


def not_after(text: str | bytes, kind: str) -> dt.datetime | None:
    """The certificate's notAfter (UTC), from the file's text or read_command's output."""
    from cryptography import x509
    raw = text.encode() if isinstance(text, str) else text
    if kind == KUBECONFIG:
        line = raw.decode(errors="replace").strip()
        try:
            raw = client_certificate(line) if ":" in line else base64.b64decode(
                line.split()[0])
        except (ValueError, IndexError):
            return None
        if not raw:
            return None
    try:
        return x509.load_pem_x509_certificate(raw).not_valid_after_utc
    except ValueError:
        return None


def expiring(end: dt.datetime, now: dt.datetime, days: int = WARN_DAYS) -> bool:
    return end - now < dt.timedelta(days=days)


def describe(cert: Certificate, path: str, end: dt.datetime, now: dt.datetime) -> str:
    left = end - now
    when = (f"expired {-left.days} days ago" if left.total_seconds() < 0 else
            f"expires in {left.days} days" if left.days else
            f"expires in {int(left.total_seconds() // 60)} minutes")
    return f"{cert.name} ({path}) {when}, on {end:%Y-%m-%d %H:%M} UTC"
