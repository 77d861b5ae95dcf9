"""Network validators: segments, CIDRs, VLANs and node addresses."""
from __future__ import annotations

from ipaddress import IPv4Address

from estate.check._common import duplicates, problem
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING


@validator("network.duplicate_segment", E, "network", "two segments share a name")
def duplicate_segment(estate: Estate) -> Problems:
    segs = estate.spec.segments
    for i, seg, first in duplicates(segs, lambda s: s.name):
        yield problem(("segments", i, "name"), f"segment '{seg.name}' is defined twice "
                      f"(first at segments[{first}])", "rename or remove one of them")


@validator("network.duplicate_vlan", W, "network", "two segments share a VLAN id")
def duplicate_vlan(estate: Estate) -> Problems:
    segs = estate.spec.segments
    for i, seg, first in duplicates(segs, lambda s: s.vlan):
        yield problem(("segments", i, "vlan"), f"VLAN {seg.vlan} of segment '{seg.name}' "
                      f"is also used by '{segs[first].name}'; both subnets share one "
                      "broadcast domain", "give each segment its own VLAN id")


@validator("network.cidr_overlap", E, "network", "two segments' CIDRs overlap")
def cidr_overlap(estate: Estate) -> Problems:
    segs = estate.spec.segments
    for j, seg in enumerate(segs):
        for i in range(j):
            if segs[i].cidr.overlaps(seg.cidr) and segs[i].name != seg.name:
                yield problem(("segments", j, "cidr"), f"{seg.cidr} of segment "
                              f"'{seg.name}' overlaps {segs[i].cidr} of '{segs[i].name}'",
                              "give every segment a disjoint CIDR")


@validator("network.kubernetes_cidr_overlap", E, "network",
           "a Kubernetes pod or service CIDR overlaps a segment or the other CIDR")
def kubernetes_cidr_overlap(estate: Estate) -> Problems:
    k8s = estate.spec.kubernetes
    if k8s is None:
        return
    for key in ("pod_cidr", "service_cidr"):
        net = getattr(k8s, key)
        for seg in estate.spec.segments:
            if net.overlaps(seg.cidr):
                yield problem(("kubernetes", key), f"{key} {net} overlaps segment "
                              f"'{seg.name}' ({seg.cidr}): pods could not reach those hosts",
                              "pick a range no segment uses, e.g. 10.244.0.0/16 for pods")
    if k8s.pod_cidr.overlaps(k8s.service_cidr):
        yield problem(("kubernetes", "service_cidr"), f"service_cidr {k8s.service_cidr} "
                      f"overlaps pod_cidr {k8s.pod_cidr}; kubeadm rejects this",
                      "make the pod and service CIDRs disjoint")


def _segment_refs(spec):
    """(loc, segment name) for every place the spec names a segment."""
    for gi, group in enumerate(spec.nodes):
        for seg in group.addresses:
            yield ("nodes", gi, "addresses", seg), seg
    yield ("slurm", "address_segment"), spec.slurm.address_segment
    if spec.slurm.slurmrestd:
        yield ("slurm", "slurmrestd", "segment"), spec.slurm.slurmrestd.segment
    if spec.kubernetes:
        yield ("kubernetes", "api_segment"), spec.kubernetes.api_segment
    for i, export in enumerate(spec.storage.exports):
        yield ("storage", "exports", i, "segment"), export.segment
    for i, flow in enumerate(spec.firewall.flows):
        yield ("firewall", "flows", i, "segment"), flow.segment
    if spec.monitoring:
        yield ("monitoring", "segment"), spec.monitoring.segment


@validator("network.unknown_segment", E, "network", "a reference to a segment that is not defined")
def unknown_segment(estate: Estate) -> Problems:
    known = {s.name for s in estate.spec.segments}
    for loc, name in _segment_refs(estate.spec):
        if name not in known:
            yield problem(loc, f"unknown segment '{name}'",
                          f"use one of: {', '.join(sorted(known))}, or add the segment")


@validator("network.cidr_exhausted", E, "network", "a segment has too few free addresses")
def cidr_exhausted(estate: Estate) -> Problems:
    cidrs = {s.name: s.cidr for s in estate.spec.segments}
    for short in estate.address_shortfalls:
        yield problem(("nodes", short.group, "addresses", short.segment),
                      f"segment '{short.segment}' ({cidrs[short.segment]}) has {short.free} "
                      f"free addresses left for this group of {short.needed} nodes",
                      "widen the segment's CIDR, lower its 'reserved' count, or move "
                      "explicit addresses out of the way")


@validator("network.segment_too_small", E, "network",
           "a segment CIDR without room for a gateway and hosts (/31, /32)")
def segment_too_small(estate: Estate) -> Problems:
    for i, seg in enumerate(estate.spec.segments):
        if seg.cidr.num_addresses < 4:
            yield problem(("segments", i, "cidr"), f"{seg.cidr} has {seg.cidr.num_addresses} "
                          "address(es): no room for a network, a gateway, hosts and a "
                          "broadcast address", "use a /30 or larger")


@validator("network.address_outside_segment", E, "network",
           "explicit node addresses fall outside the segment's host range")
def address_outside_segment(estate: Estate) -> Problems:
    segs = {s.name: s for s in estate.spec.segments}
    for b in estate.address_blocks:
        seg = segs[b.segment]
        # clamped: a /31 or /32 has no host addresses (network.segment_too_small says so)
        lo = min(int(seg.cidr.network_address) + 1, 2**32 - 1)
        hi = max(int(seg.cidr.broadcast_address) - 1, 0)
        last = b.first + b.count - 1
        if b.given and (b.first < lo or last > hi):
            yield problem(("nodes", b.group, "addresses", b.segment),
                          f"addresses {IPv4Address(b.first)}-{IPv4Address(last)} for "
                          f"{b.count} nodes are not all host addresses of {seg.cidr}",
                          f"pick a first address so that all {b.count} fit between "
                          f"{IPv4Address(lo)} and {IPv4Address(hi)}, or use 'auto'")


@validator("network.duplicate_address", E, "network", "two node groups share addresses")
def duplicate_address(estate: Estate) -> Problems:
    by_seg: dict[str, list] = {}
    for b in estate.address_blocks:
        by_seg.setdefault(b.segment, []).append(b)
    for blocks in by_seg.values():
        blocks.sort(key=lambda b: (b.first, b.group))
        reach = blocks[0]  # block reaching furthest so far
        for b in blocks[1:]:
            if b.first <= reach.first + reach.count - 1:
                yield problem(("nodes", b.group, "addresses", b.segment),
                              f"address {IPv4Address(b.first)} on '{b.segment}' is also "
                              f"given to nodes[{reach.group}]",
                              "give one of the groups a free range or 'auto'")
            if b.first + b.count > reach.first + reach.count:
                reach = b


@validator("network.address_is_gateway", W, "network",
           "a node takes the segment's first host address, conventionally its gateway")
def address_is_gateway(estate: Estate) -> Problems:
    segs = {s.name: s for s in estate.spec.segments}
    for b in estate.address_blocks:
        gateway = int(segs[b.segment].cidr.network_address) + 1
        if b.given and b.first <= gateway < b.first + b.count:
            yield problem(("nodes", b.group, "addresses", b.segment),
                          f"{IPv4Address(gateway)} is the first host address of "
                          f"'{b.segment}', conventionally its gateway",
                          "start the group's addresses after the gateway")
