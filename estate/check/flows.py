"""Flow matrix validators: the spec's own flows name real nodes, and no flow the spec
replaces cuts one that a role needs (estate.model.flows derives both)."""
from __future__ import annotations

from estate.check._common import hostlist_error, parse_hosts, problem, short
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model.flows import DEFAULT_NAMES, default_flows, matrix
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

E = Severity.ERROR


@validator("flows.unknown_node", E, "flows",
           "a firewall flow names nodes the spec does not have, or none at all")
def unknown_node(estate: Estate) -> Problems:
    for i, flow in enumerate(estate.spec.firewall.flows):
        for key in ("to", "from_hosts"):
            expr = getattr(flow, key)
            hosts = parse_hosts(expr) if expr is not None else Hostlist()
            if hosts is None:
                yield problem(("firewall", "flows", i, key), f"not a hostlist: "
                              f"{hostlist_error(expr)}", "write a hostlist such as gpu[1-4]")
                continue
            unknown = [h for h in hosts if h not in estate.nodes]
            if unknown:
                yield problem(("firewall", "flows", i, key), f"flow '{flow.name}' names "
                              f"{short(Hostlist.from_names(unknown))}, which no node group has",
                              "name nodes of spec.nodes")
        if not (flow.from_hosts or flow.from_roles or flow.from_cidrs):
            yield problem(("firewall", "flows", i), f"flow '{flow.name}' has no source: "
                          "nothing could use it", "give from_roles, from_hosts or from_cidrs")
        if flow.port_end is not None and flow.port_end < flow.port:
            yield problem(("firewall", "flows", i, "port_end"), f"port_end {flow.port_end} "
                          f"is below port {flow.port}", "give the range's last port")


@validator("flows.required_cut", E, "flows",
           "a flow the spec replaces cuts a flow that a role needs (its daemons could not "
           "reach their controller, server or peers)")
def required_cut(estate: Estate) -> Problems:
    if not any(f.name in DEFAULT_NAMES for f in estate.spec.firewall.flows):
        return   # the spec only adds flows: nothing is cut
    m = matrix(estate)
    replaced = {f.name: f for f in m.flows if f.path[:2] == ("firewall", "flows")}
    for need in default_flows(estate):
        flow = replaced.get(need.name)
        if flow is None:
            continue
        for dst, missing in _cut(estate, m, need):
            roles = _roles(estate, missing)
            yield problem(flow.path, f"flow '{need.name}' no longer lets {short(missing)} "
                          f"(role {', '.join(roles) or 'none'}) reach {dst} on "
                          f"{need.proto} {need.port_text} ({need.segment}), which they need: "
                          f"{need.reason}", "add them to the flow's from_roles or "
                          "from_hosts, or remove the flow to keep the default")


def _cut(estate, m, need):
    """(destination, source nodes the matrix no longer lets through) for a required flow:
    the destinations are grouped by the flows that reach them, so a 10,000-node flow is
    a few range comparisons."""
    by_cover: dict[tuple, list[str]] = {}
    for dst in sorted(need.to):
        cover = tuple(i for i, f in enumerate(m.flows) if dst in f.to and
                      f.segment == need.segment and f.has_port(need.proto, need.ports[0])
                      and f.has_port(need.proto, need.ports[1]))
        by_cover.setdefault(cover, []).append(dst)
    for cover, dsts in by_cover.items():
        allowed = [r for i in cover for r in m.source_ranges(m.flows[i])]
        missing = [n for n in sorted(need.sources)
                   if (a := estate.address(n, need.segment)) is not None
                   and not any(lo <= int(a) <= hi for lo, hi in allowed)]
        if missing:
            yield short(Hostlist.from_names(dsts)), Hostlist.from_names(missing)


def _roles(estate, hosts) -> list[str]:
    return sorted({r for h in hosts for r in estate.group_of(h).roles})


@validator("flows.source_off_segment", Severity.WARNING, "flows",
           "a firewall flow's source nodes have no address on the flow's segment")
def source_off_segment(estate: Estate) -> Problems:
    known = {s.name for s in estate.spec.segments}
    for i, flow in enumerate(estate.spec.firewall.flows):
        if flow.segment not in known:
            continue   # network.unknown_segment says so
        m = matrix(estate)
        spec_flow = next(f for f in m.flows if f.path == ("firewall", "flows", i))
        off = [n for n in sorted(spec_flow.sources) if estate.address(n, flow.segment) is None]
        if off:
            yield problem(("firewall", "flows", i), f"flow '{flow.name}': "
                          f"{short(Hostlist.from_names(off))} have no address on segment "
                          f"{flow.segment}, so no rule can let them in",
                          f"give them an address on {flow.segment}, or choose the segment "
                          "they share with the flow's nodes")
