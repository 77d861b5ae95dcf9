"""The lab's machine list, derived from the spec: what Vagrant brings up.

``lab/vagrant-nodes.json`` is read by vagrant/Vagrantfile and by the lab
driver (estate.lab.vagrant), so neither re-derives addresses or segments.
No node installs it (empty consumers): it describes the nodes, it is not
configuration on them.

Lab naming: every Docker network, bridge and container starts with
``estate-lab`` so the lab never collides with other tiers on the same host.
Bridge names are limited to 15 characters by the kernel, hence the VLAN id
rather than the segment name in them (estate-lab10).
"""
from __future__ import annotations

import json
from ipaddress import IPv4Address

from estate.model.services import NVIDIA_MAJOR
from estate.render.artifacts import Artifact
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

PREFIX = "estate-lab"
# The molecule scenarios' containers and networks (estate.provision.molecule): they take
# the same subnets, so the lab removes what an interrupted scenario left.
MOLECULE_PREFIX = "estate-mol"
PATH = "lab/vagrant-nodes.json"
# One host runs the lab's machines; past this a spec is an estate, not a lab, and
# rendering a machine list for it (7 MB for 10,000 nodes) would only slow every render.
MAX_NODES = 64


def network_name(segment: str) -> str:
    return f"{PREFIX}-{segment}"


def bridge_name(vlan: int) -> str:
    return f"{PREFIX}{vlan}"  # at most 14 characters: VLAN ids stop at 4094


def container_name(node: str) -> str:
    return f"{PREFIX}-{node}"


def _segments(estate: Estate) -> list[dict]:
    out = []
    for seg in estate.spec.segments:
        out.append({
            "name": seg.name, "purpose": seg.purpose, "cidr": str(seg.cidr),
            "prefixlen": seg.cidr.prefixlen, "vlan": seg.vlan, "mtu": seg.mtu,
            # The host's own address on the bridge: inside the reserved block.
            "gateway": str(IPv4Address(int(seg.cidr.network_address) + 1)),
            "network": network_name(seg.name), "bridge": bridge_name(seg.vlan),
        })
    return out


def _nodes(estate: Estate) -> list[dict]:
    prefixlen = {s.name: s.cidr.prefixlen for s in estate.spec.segments}
    out = []
    for name, node in estate.nodes.items():
        group = estate.spec.nodes[node.group]
        cls = estate.node_class(group)
        nets = [{"segment": seg, "network": network_name(seg),
                 "ip": str(estate.address(name, seg)), "prefixlen": prefixlen[seg]}
                for seg in group.addresses if seg in prefixlen and estate.address(name, seg)]
        out.append({
            "name": name, "hostname": name, "container": container_name(name),
            "plane": group.plane, "roles": list(group.roles),
            "cpus": cls.cpus if cls else 1, "memory_mb": cls.memory_mb if cls else 1024,
            "networks": nets,
            # the fake GPUs the node's container may open (the Vagrantfile's device rules)
            "devices": [{"major": NVIDIA_MAJOR, "minor": i}
                        for i in range(cls.gpu_count if cls and group.plane == "slurm" else 0)],
            # Kubernetes server binaries are in no reachable registry: the k8s nodes
            # are defined (vagrant up NAME starts one) but not started by default.
            "autostart": group.plane != "kubernetes",
        })
    return out


def lab_document(estate: Estate) -> dict:
    return {"name": estate.spec.name, "segments": _segments(estate), "nodes": _nodes(estate)}


def render_lab(estate: Estate, source: str = "") -> list[Artifact]:
    if len(estate.nodes) > MAX_NODES:
        return []
    doc = lab_document(estate)
    body = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    return [Artifact(PATH, body, Hostlist(), meta={"consumed_by": "vagrant/Vagrantfile"})]
