"""The pod network's manifests: the pinned Tigera operator (vendored, verbatim) and the
Installation that configures Calico from the spec (facts: estate.model.cni)."""
from __future__ import annotations

import hashlib
from functools import lru_cache

from estate.model import cni
from estate.render.templates import ROOT, RenderError


def installation_spec(estate) -> dict:
    """The Installation's spec: one IPv4 pool over the pod CIDR, the MTU that fits the
    segment, node addresses on the API segment (the addresses the flows admit)."""
    k8s, encap = estate.spec.kubernetes, cni.encapsulation(estate)
    network = {
        "bgp": "Enabled" if encap.bgp else "Disabled",
        "ipPools": [{"name": cni.POOL_NAME, "cidr": str(k8s.pod_cidr),
                     "blockSize": cni.BLOCK_SIZE, "encapsulation": encap.calico,
                     "natOutgoing": "Enabled", "nodeSelector": "all()"}],
    }
    mtu, cidr = cni.pod_mtu(estate), cni.api_cidr(estate)
    if mtu is not None:
        network["mtu"] = mtu
    if cidr is not None:
        network["nodeAddressAutodetectionV4"] = {"cidrs": [cidr]}
    return {"calicoNetwork": network}


@lru_cache(maxsize=1)
def operator_manifest() -> bytes:
    """The vendored operator manifest, refused if it is not the pinned upstream file."""
    data = (ROOT / cni.OPERATOR_MANIFEST).read_bytes()
    if hashlib.sha256(data).hexdigest() != cni.OPERATOR_SHA256:
        raise RenderError(f"{cni.OPERATOR_MANIFEST} is not Calico {cni.CALICO_VERSION}'s "
                          "tigera-operator.yaml (sha256 differs): restore it from upstream")
    return data
