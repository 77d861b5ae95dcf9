"""What the Kubernetes roles share (each role imports this, never another role): reaching
a package repository, the tools kubeadm needs, the join material the first control plane
hands out, and which host of the run that is."""
from __future__ import annotations

import shlex
from shlex import quote
from typing import Callable
from urllib.parse import urlparse

from pyinfra import state
from pyinfra.api import OperationError

from estate.spec.hostlist import Hostlist
from roles._lib import artifact_info
from roles._lib.facts import JoinToken


def reach_problem(run: Callable[[str], str], url: str) -> str | None:
    """Why the node cannot fetch the repository's signing key (None if it can)."""
    u = urlparse(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    # host and port are arguments of the inner script ($1, $2), never part of its code
    connect = quote('exec 3<>"/dev/tcp/$1/$2"')
    if (run(f"timeout 8 bash -c {connect} _ {quote(u.hostname or '')} {quote(str(port))} "
            "2>/dev/null && echo ok") or "").strip() == "ok":
        return None
    return f"cannot reach {u.hostname}:{port} ({url}) from this node"


def missing_tools(run) -> list[str]:
    return [t for t in ("kubeadm", "kubelet", "kubectl")
            if (run(f"command -v {shlex.quote(t)}") or "").strip() == ""]


def join_values(cp, **fact_args) -> dict[str, str]:
    """KUBEADM_TOKEN and KUBEADM_CA_CERT_HASH of a new token made on control plane `cp`."""
    values = cp.get_fact(JoinToken, **fact_args)
    if not values:
        raise OperationError(f"{cp.name}: the control plane printed no join command")
    return values


def first_control_plane():
    """The host in this run that consumes init.yaml (the first control plane), or None."""
    first = Hostlist.parse(artifact_info("kubernetes/kubeadm/init.yaml")["consumers"])
    return next((h for h in state.inventory if (h.data.get("estate_node") or h.name) in first),
                None)
