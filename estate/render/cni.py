"""The pod network's manifests: the pinned Tigera operator (vendored, verbatim; rendered as
upstream's text but for its Deployment, which Estate hardens) and the Installation that
configures Calico from the spec (facts: estate.model.cni)."""
from __future__ import annotations

import copy
import hashlib
import re
from functools import lru_cache
from typing import Callable

import yaml

from estate.model import cni
from estate.render.templates import ROOT, RenderError


def installation_spec(estate) -> dict:
    """The Installation's spec: one IPv4 pool over the pod CIDR, the MTU that fits the
    segment, node addresses on the API segment (the addresses the flows admit)."""
    k8s, encap = estate.spec.kubernetes, cni.encapsulation(estate)
    network: dict[str, object] = {
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


_DOC_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)


@lru_cache(maxsize=1)
def operator_documents() -> tuple[str | dict, ...]:
    """The vendored manifest, document by document: upstream's text as it is (comments
    included), but the operator's Deployment as an object, hardened (harden_operator)."""
    out: list[str | dict] = []
    for text in _DOC_SEPARATOR.split(operator_manifest().decode()):
        doc = yaml.safe_load(text)
        hardened = isinstance(doc, dict) and doc.get("kind") == "Deployment"
        out.append(harden_operator(doc) if hardened else text)
    return tuple(out)


def harden_operator(deployment: dict) -> dict:
    """The operator Deployment with Estate's securityContext and resources
    (cni.OPERATOR_*: why each); refused where upstream already sets one, which an upgrade
    must look at rather than have overwritten."""
    out = copy.deepcopy(deployment)
    pod = out["spec"]["template"]["spec"]
    [c] = pod["containers"]
    for where, key in ((pod, "securityContext"), (c, "securityContext"), (c, "resources")):
        if key in where:
            raise RenderError(f"{cni.OPERATOR_MANIFEST}: upstream now sets the operator's "
                              f"{key}; review estate.model.cni.OPERATOR_* against it")
    pod["securityContext"] = copy.deepcopy(cni.OPERATOR_POD_SECURITY)
    c["securityContext"] = copy.deepcopy(cni.OPERATOR_CONTAINER_SECURITY)
    c["resources"] = copy.deepcopy(cni.OPERATOR_RESOURCES)
    return out


def operator_text(dump: Callable[[dict], str]) -> bytes:
    """The rendered operator manifest: a header naming the change, then every upstream
    document, the Deployment dumped by `dump` (the renderer's YAML)."""
    head = (f"# Calico {cni.CALICO_VERSION}'s tigera-operator.yaml ({cni.OPERATOR_MANIFEST}), "
            "verbatim but for the\n# tigera-operator Deployment's securityContext and "
            "resources (estate.render.cni).\n")
    parts = [d if isinstance(d, str) else "\n" + dump(d) + "\n"
             for d in operator_documents()]
    return (head + "---".join(parts)).encode()
