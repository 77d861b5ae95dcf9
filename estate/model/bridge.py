"""The bridge between the planes: a Kubernetes tenant submits jobs to Slurm over slurmrestd.

One place for its facts, which the renderers, the validators, the labs and `estate verify`
read:

- slurmrestd listens on loopback only, behind a TLS front (stunnel, from Debian) on its
  segment's address: a token never crosses a segment in clear;
- Slurm enforces the grant: the bridge user's only associations are the grant's (account,
  partition) pairs with its QOS (AccountingStorageEnforce=associations,qos), and a token
  names its user (claim `sun`), which auth/jwt will not let a caller swap for another;
- tokens are minted on the controllers by Slurm itself (`scontrol token`, signed with the
  key only slurmctld holds) and handed to the tenant's namespace as a Secret: no component
  of the Kubernetes plane ever holds the signing key;
- the minter authenticates to the API server with a client certificate per tenant, issued
  at provisioning time from the cluster CA (estate.provision.kube_pki), which Estate
  places on the first control plane before kubeadm init: its user (minter_user) is the
  subject of the tenant's RoleBinding, and nothing has to be copied by hand.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from estate.model import kubernetes as k8s
from estate.spec.model import Bridge, Tenant
from estate.spec.resolved import Estate

# slurmrestd's own listener: the TLS front on the segment address forwards here.
LOOPBACK = "127.0.0.1"
# The TLS front's files on a slurmrestd node (the key and certificate are issued per node
# from the estate's CA at provisioning time: estate.provision.tls).
TLS_DIR = "/etc/estate/tls"
TLS_CERT = f"{TLS_DIR}/slurmrestd.crt"
TLS_KEY = f"{TLS_DIR}/slurmrestd.key"
TLS_CA = f"{TLS_DIR}/ca.crt"
TLS_MIN_VERSION = "TLSv1.2"
# The front runs as Debian's stunnel4 user once it has read its key.
TLS_USER = "stunnel4"
# The estate's CA and each front's key and certificate in the secrets directory.
CA_KEY, CA_CERT = "ca.key", "ca.crt"


def server_files(node: str) -> tuple[str, str]:
    """(key, certificate) file names of a node's TLS front in the secrets directory."""
    return f"slurmrestd-{node}.key", f"slurmrestd-{node}.crt"

# Where the minter leaves each tenant's current token on a controller (root only), and
# the Secret it keeps current in the tenant's namespace (keys: token, ca.crt, user).
TOKEN_DIR = "/run/estate/bridge"
SECRET = "slurm-bridge"
MINTER = "slurm-bridge-minter"     # its Role and RoleBinding
KUBECONFIG_DIR = "/etc/estate/bridge"   # <tenant>.kubeconfig: the minter's credential
# The cluster CA in the secrets directory: derived from the TLS seed, or the site's own
# (both files put there by hand); the first control plane gets it before kubeadm init.
K8S_CA_KEY, K8S_CA_CERT = "k8s-ca.key", "k8s-ca.crt"
# The minter's client certificate: issued for the calendar month of the run, valid from the
# day before it starts until the first day of the third month after it: at least two months
# whatever day it is issued, so the 30-day expiry alert (estate.model.certificates) stays
# quiet after any run; the minter renews it itself (estate-bridge-renew) before that.
MINTER_CERT_MONTHS = 3


def minter_user(tenant: str) -> str:
    """The Kubernetes user the tenant's minter is (its certificate's CN, no groups): the
    only subject of the RoleBinding that may patch the tenant's Secret."""
    return f"estate:{MINTER}:{tenant}"


def kubeconfig_path(tenant: str) -> str:
    return f"{KUBECONFIG_DIR}/{tenant}.kubeconfig"


def kubeconfig_secret(tenant: str) -> str:
    """The tenant's minter kubeconfig in the secrets directory (it holds the client key)."""
    return f"bridge-{tenant}.kubeconfig"

# The OpenAPI version each Slurm release's slurmrestd serves jobs under (Debian 12's 22.05
# ships v0.0.36-38; Debian 13's 24.11 ships v0.0.40-42).
REST_API = {"22.05": "v0.0.38", "24.11": "v0.0.41"}


@dataclass(frozen=True)
class Grant:
    tenant: str
    user: str
    account: str
    partitions: tuple[str, ...]
    qos: tuple[str, ...]
    token_lifetime: int


def grants(estate: Estate) -> list[Grant]:
    """Every tenant's bridge, in spec order."""
    k8s = estate.spec.kubernetes
    return [grant(t) for t in (k8s.tenants if k8s else ()) if t.bridge]


def has_minter(estate: Estate) -> bool:
    """The controllers mint tokens where a tenant is granted the bridge and slurmrestd runs
    (check refuses a bridge without it, bridge.no_slurmrestd)."""
    return bool(grants(estate)) and estate.spec.slurm.slurmrestd is not None


def minter_hosts(estate: Estate) -> list[str]:
    """The Slurm controllers that run the minter (each gets every tenant's kubeconfig)."""
    return list(estate.spec.slurm.controllers) if has_minter(estate) else []


def ca_host(estate: Estate) -> str | None:
    """The control plane that gets the estate's cluster CA before kubeadm init (the one that
    initialises; the others receive it through kubeadm's upload-certs), where the minter
    needs it; elsewhere kubeadm makes its own CA, as without a bridge."""
    return k8s.control_planes(estate)[0].name if has_minter(estate) else None


def api_server(estate: Estate) -> str:
    """The URL the minter reaches the API at: kubeadm's controlPlaneEndpoint (the VIP, or
    the only control plane), which the API server's certificate names."""
    return f"https://{k8s.api_endpoint(estate)}"


def grant(tenant: Tenant) -> Grant:
    b: Bridge = tenant.bridge
    return Grant(tenant.name, b.user, b.account, tuple(b.partitions), tuple(b.qos),
                 b.token_lifetime)


def mint_interval(estate: Estate) -> int:
    """Seconds between mints: half the shortest lifetime, so a token always has at least
    half its life left when a pod reads it."""
    return max(30, min(g.token_lifetime for g in grants(estate)) // 2)


def rest_api(version: str) -> str:
    return REST_API[version]


def job_request(version: str, script: str, *, name: str, partition: str, account: str,
                qos: str | None = None, cwd: str = "/tmp", time_limit_min: int = 10) -> dict:
    """The body of a job submission (POST /slurm/<api>/job/submit) for a Slurm release:
    v0.0.38 takes the script beside the job and the environment as a mapping; v0.0.41
    takes the script inside it, the environment as NAME=value strings and numbers as
    {set, number} objects."""
    job: dict[str, Any] = {"name": name, "partition": partition, "account": account,
           "current_working_directory": cwd}
    if qos:
        job["qos"] = qos
    if rest_api(version) == "v0.0.38":
        job.update(time_limit=time_limit_min, environment={"PATH": "/usr/bin:/bin"})
        return {"job": job, "script": script}
    job.update(time_limit={"set": True, "number": time_limit_min},
               environment=["PATH=/usr/bin:/bin"], script=script)
    return {"job": job}
