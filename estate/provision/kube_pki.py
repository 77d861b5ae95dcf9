"""The bridge minter's credential for the API server, derived from the estate's TLS seed.

The minter on the Slurm controllers patches each bridged tenant's Secret (estate.model.bridge).
It authenticates with a client certificate from the cluster CA, so nothing has to be copied
from a running cluster to the controllers by hand:

- the cluster CA: the site's (k8s-ca.key and k8s-ca.crt put in the secrets directory),
  else a P-256 CA derived from its own seed (k8s-ca.seed, label "k8s-ca": not the TLS
  front's, so rotating that one leaves the cluster CA alone) and written there for
  the first control plane's run, which puts it in /etc/kubernetes/pki before kubeadm init:
  kubeadm then signs with it instead of making its own, and the API server trusts the
  client certificates it signed. The same seed gives the same CA on every driver;
- per tenant, a client certificate whose CN is the user the tenant's RoleBinding names
  (bridge.minter_user; no organisation, hence no group), client-auth only, issued for the
  calendar month and valid until the first of the third month after it
  (bridge.MINTER_CERT_MONTHS): the first run of a month renews it, the same bytes on every
  driver; between runs the minter renews it itself (estate-bridge-renew);
- per tenant, a kubeconfig holding the API endpoint (kubeadm's controlPlaneEndpoint), the
  cluster CA, that certificate and its key (derived from the seed and the tenant): the
  controllers' run installs it as /etc/estate/bridge/<tenant>.kubeconfig, root 0600.

Everything lands in the secrets directory (k8s-ca.key 0600, k8s-ca.crt 0644,
bridge-<tenant>.kubeconfig 0600), never in the rendered tree; nothing here prints a key.
"""
from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path
from typing import Iterable

import yaml

from estate.model import bridge
from estate.model.bridge import K8S_CA_CERT, K8S_CA_KEY
from estate.model.services import KEYS
from estate.provision.tls import TlsError, cert_pem, derive_key, key_pem, put_file, read_seed, \
    serial_number, sign, site_or_derived_ca
from estate.spec.resolved import Estate

CA_LABEL, CA_NAME = "k8s-ca", "Estate Kubernetes CA"
SEED = KEYS["cluster-ca"].file
# Before the month starts: an API server whose clock runs a little behind still accepts it.
BACKDATE = dt.timedelta(days=1)


def ensure_bridge_credentials(directory: str | Path, estate: Estate,
                              today: dt.date | None = None,
                              nodes: Iterable[str] | None = None) -> list[str]:
    """The cluster CA where its control plane is among `nodes`, and every tenant's minter
    kubeconfig where a minter controller is (all of them when nodes is None); the files
    written anew (none on a re-run within the month)."""
    wanted = None if nodes is None else set(nodes)
    ca_host = bridge.ca_host(estate)
    place_ca = ca_host is not None and (wanted is None or ca_host in wanted)
    minters = [h for h in bridge.minter_hosts(estate) if wanted is None or h in wanted]
    if not place_ca and not minters:
        return []
    d = Path(directory)
    seed = read_seed(d, "the cluster CA that signs the bridge minter's credential is",
                     key="cluster-ca")
    ca_key, ca_cert = cluster_ca(d, seed)
    written = []
    if place_ca and not (d / K8S_CA_KEY).is_file():     # a site's own CA stays as it is
        written += put_file(d / K8S_CA_KEY, key_pem(ca_key), 0o600)
        written += put_file(d / K8S_CA_CERT, cert_pem(ca_cert), 0o644)
    if minters:
        month = today or dt.date.today()
        for g in bridge.grants(estate):
            key, cert = minter_certificate(seed, ca_key, ca_cert, g.tenant, month)
            text = kubeconfig(bridge.api_server(estate), estate.spec.name, g.tenant,
                              bridge.minter_user(g.tenant), cert_pem(ca_cert), cert_pem(cert),
                              key_pem(key))
            written += put_file(d / bridge.kubeconfig_secret(g.tenant), text, 0o600)
    return written


def cluster_ca(d: Path, seed: bytes):
    """(key, certificate) of the cluster CA: the site's, else the seed's."""
    if (d / K8S_CA_CERT).is_file() and not (d / K8S_CA_KEY).is_file():
        raise TlsError(f"{d} has {K8S_CA_CERT} but no {K8S_CA_KEY}: the bridge minter's "
                       "client certificate is signed with the cluster CA, so put its key "
                       f"beside it, or remove {K8S_CA_CERT} to have Estate derive the CA "
                       "from the seed")
    return site_or_derived_ca(d, seed, K8S_CA_KEY, K8S_CA_CERT, CA_LABEL, CA_NAME)


def validity(month: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """From the day before `month`'s first day to the first day MINTER_CERT_MONTHS later."""
    first = dt.datetime(month.year, month.month, 1, tzinfo=dt.timezone.utc)
    later = month.year * 12 + month.month - 1 + bridge.MINTER_CERT_MONTHS
    return first - BACKDATE, first.replace(year=later // 12, month=later % 12 + 1)


def minter_certificate(seed: bytes, ca_key, ca_cert, tenant: str, month: dt.date):
    """The tenant's minter key (from the seed) and its client certificate for the month."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    key = derive_key(seed, f"minter:{tenant}")
    start, end = validity(month)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, bridge.minter_user(tenant))])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(serial_number(seed, f"minter:{tenant}:{ca_cert.serial_number}:"
                                               f"{month.year}-{month.month}"))
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False,
                                         False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False))
    return key, sign(cert, ca_key)


def kubeconfig(server: str, cluster: str, namespace: str, user: str, ca: bytes, cert: bytes,
               key: bytes) -> bytes:
    """A kubeconfig with one cluster, user and context (kubectl reads it as it is; the
    minter's script reads server and the three *-data values, one a line)."""
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()
    context = f"{user}@{cluster}"
    doc = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": cluster, "cluster": {
               "server": server, "certificate-authority-data": b64(ca)}}],
           "users": [{"name": user, "user": {"client-certificate-data": b64(cert),
                                             "client-key-data": b64(key)}}],
           "contexts": [{"name": context, "context": {"cluster": cluster, "user": user,
                                                      "namespace": namespace}}],
           "current-context": context}
    return yaml.safe_dump(doc, sort_keys=False, width=1 << 20).encode()
