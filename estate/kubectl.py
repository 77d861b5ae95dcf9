"""Reading a running cluster through the operator's kubeconfig (ESTATE_KUBECONFIG): kubectl
on this machine, an argv without a shell, never a command on a node. `estate verify`'s
Kubernetes check and tests/live_k8s use it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

KUBECONFIG_ENV = "ESTATE_KUBECONFIG"


def kubectl_json(*args: str) -> dict | None:
    """`kubectl <args> -o json` through ESTATE_KUBECONFIG, or None when no cluster is
    configured (no ESTATE_KUBECONFIG, or no kubectl)."""
    config, kubectl = os.environ.get(KUBECONFIG_ENV), shutil.which("kubectl")
    if not config or not kubectl:
        return None
    argv = [kubectl, "--kubeconfig", config, *args, "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def kubectl_nodes() -> dict | None:
    """`kubectl get nodes -o json`, or None without a cluster."""
    return kubectl_json("get", "nodes")
