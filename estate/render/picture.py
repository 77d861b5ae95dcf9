"""The estate as one picture: ``estate plan SPEC --svg FILE``.

It is drawn for a person deciding whether the boundaries are right: the fabric tree with
every node hanging under its leaf switch, grouped by rack, coloured by plane (border) and
pool (fill: the node class, as in ``estate plan``), GPU nodes showing their GPU count; the
segments with their CIDRs; the Slurm partitions and Kubernetes tenants; and the flows
between roles as a matrix.

The SVG is built as an ElementTree, so the serializer escapes every spec value (free text
such as a description or a GPU product may hold ``<`` or ``&``); nothing is pasted into
markup by hand. Every node is one ``<g class="node" id="node-NAME">`` and every switch one
``<g class="switch" id="switch-NAME">``, so programs (and tests) can count and find them.
Pure: the caller writes the text (``artifacts.write_file``).
"""
from __future__ import annotations

import math
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from estate.capacity import Budget, gpu_budget
from estate.model import Model, model
from estate.model.nodes import GroupFacts
from estate.model.flows import matrix
from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.model import Switch
from estate.spec.resolved import Estate
from estate.spec.types import CONTROL

SVG_NS = "http://www.w3.org/2000/svg"

MARGIN = 24
GAP = 28                      # between sections
COL_GAP = 20                  # between sibling columns of the tree
CELL_W, CELL_H, CELL_GAP = 56, 32, 4
RACK_PAD, RACK_LABEL = 8, 18
SW_W, SW_H, LEVEL_H = 156, 44, 72
ROW_H = 18                    # table rows

# Fills for pools (node classes), cycled; light enough for dark text on top.
POOL_FILLS = ("#9ecae1", "#fdd49e", "#a1d99b", "#dadaeb", "#fcbba1", "#c7e9c0",
              "#fee391", "#d9d9d9", "#bcbddc", "#fdae6b", "#c6dbef", "#e5f5e0")
PLANE_LABELS = {"slurm": "Slurm plane", "kubernetes": "Kubernetes plane",
                "none": "shared, no plane (storage and the like)"}
# What a cell without GPUs shows instead of its GPU count.
ROLE_TAGS = {"slurm_controller": "ctld", "slurmrestd": "rest", "slurm_login": "login",
             "slurm_worker": "slurmd", "storage": "nfs", "k8s_control_plane": "k8s-cp",
             "k8s_worker": "k8s"}

STYLE = """
text { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; fill: #111827; }
.title { font-size: 20px; font-weight: bold; }
.heading { font-size: 14px; font-weight: bold; }
.small { font-size: 9px; }
.muted { fill: #4b5563; }
.node rect, .swatch { stroke-width: 2.5; }
.plane-slurm { stroke: #1d4ed8; }
.plane-kubernetes { stroke: #c2410c; }
.plane-none { stroke: #6b7280; stroke-dasharray: 4 2; }
.switch rect { fill: #f3f4f6; stroke: #1f2937; stroke-width: 1.5; }
.rack > rect { fill: none; stroke: #9ca3af; }
.link { fill: none; stroke: #6b7280; stroke-width: 1.5; }
.cell { fill: #ffffff; stroke: #d1d5db; }
.open { fill: #ecfdf5; stroke: #d1d5db; }
""" + "".join(f".pool-{i} {{ fill: {c}; }}\n" for i, c in enumerate(POOL_FILLS))


class Flow(NamedTuple):
    """One allowed flow: who may open a connection to whom, on which port and why."""
    source: str          # a role, or addresses outside the nodes (admin, monitoring hosts)
    destination: str     # the role (or kind of node) that listens
    port: int | str      # a port, or a range "lo-hi"
    protocol: str
    reason: str


# Who listens for each flow of the matrix (estate.model.flows), as the picture names it.
SERVICE_ROLE = {"slurmctld": "slurm_controller", "slurmd": "slurm_worker",
                "slurmrestd": "slurmrestd", "slurmdbd": "slurmdbd",
                "kube-apiserver": "k8s_control_plane", "nfs": "storage",
                "etcd": "k8s_control_plane", "kubelet": "Kubernetes nodes",
                "calico-vxlan": "Kubernetes nodes", "calico-typha": "Kubernetes nodes",
                "calico-bgp": "Kubernetes nodes", "srun": "Slurm nodes",
                "ssh": "every node", "node-exporter": "every node",
                "dcgm-exporter": "GPU workers", "slurm-exporter": "slurm_controller",
                "kube-state-metrics": "k8s_control_plane", "prometheus": "monitoring host",
                "alertmanager": "monitoring host", "job-tcp": "slurm_worker",
                "job-udp": "slurm_worker", "job-launcher": "slurm_login"}


def flow_edges(estate: Estate) -> list[Flow]:
    """The one adapter between the flow matrix and the picture: rows are the source nodes'
    spec roles (and the outside addresses a flow admits), columns who listens."""
    out: dict[Flow, None] = {}
    for f in matrix(estate).flows:
        dest = SERVICE_ROLE.get(f.name, f.name)
        roles = sorted({r for n in f.sources for r in estate.group_of(n).roles})
        port = f.ports[0] if f.ports[0] == f.ports[1] else f.port_text
        for source in roles + list(f.cidrs):
            out[Flow(source, dest, port, f.proto, f.name)] = None
    return list(out)


# --- SVG building blocks ------------------------------------------------------------

def _clean(value: object) -> str:
    # The spec types refuse control characters; this keeps the XML well-formed regardless.
    return CONTROL.sub("\ufffd", str(value))


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.1f}"


def el(tag: str, parent: ET.Element | None = None, text: str | None = None,
       **attrs: object) -> ET.Element:
    """An element; attribute names take '-' for '_' (class_ -> class, font_size -> ...)."""
    a = {k.rstrip("_").replace("_", "-"): (_num(v) if isinstance(v, (int, float)) else _clean(v))
         for k, v in attrs.items() if v is not None}
    e = ET.Element(tag, a) if parent is None else ET.SubElement(parent, tag, a)
    if text is not None:
        e.text = _clean(text)
    return e


def label(parent: ET.Element, x: float, y: float, s: str, size: float = 10,
          anchor: str | None = None, bold: bool = False, cls: str | None = None) -> ET.Element:
    return el("text", parent, s, x=x, y=y, font_size=size, text_anchor=anchor,
              font_weight="bold" if bold else None, class_=cls)


def plural(n: int, word: str, many: str = "") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "\u2026"


@dataclass
class Block:
    """A drawn part, with its origin at its top left corner."""
    el: ET.Element
    w: float
    h: float

    def at(self, parent: ET.Element, x: float, y: float) -> None:
        self.el.set("transform", f"translate({_num(x)},{_num(y)})")
        parent.append(self.el)


def stack(blocks: list[Block], gap: float = GAP, across: bool = False, **attrs) -> Block:
    """Blocks one under the other (or side by side with across=True)."""
    g = el("g", **attrs)
    pos = 0.0
    for b in blocks:
        b.at(g, pos if across else 0, 0 if across else pos)
        pos += (b.w if across else b.h) + gap
    pos = max(pos - gap, 0)
    size = [max((b.h if across else b.w) for b in blocks)] if blocks else [0]
    return Block(g, pos, size[0]) if across else Block(g, size[0], pos)


def table(title: str, header: list[str], rows: list[list[str]], widths: list[int],
          **attrs) -> Block:
    g = el("g", **attrs)
    label(g, 0, 14, title, cls="heading")
    y = 22
    for r, row in enumerate([header] + rows):
        x = 0
        if r:
            el("rect", g, x=0, y=y, width=sum(widths), height=ROW_H,
               class_="cell" if r % 2 else "open")
        for value, w in zip(row, widths):
            t = label(g, x + 4, y + 13, short(value, max(3, w // 6)), size=10, bold=r == 0)
            if len(value) > max(3, w // 6):
                el("title", t, value)
            x += w
        y += ROW_H
    return Block(g, sum(widths), y)


# --- the estate's facts, as the picture needs them ---------------------------------

@dataclass
class Facts:
    estate: Estate
    m: Model
    pools: dict[str, int] = field(default_factory=dict)       # node class -> colour index
    leaf: dict[str, str] = field(default_factory=dict)        # node -> its switch
    switches: dict[str, Switch] = field(default_factory=dict)  # first of each name
    budget: Budget | None = None

    def group(self, name: str) -> GroupFacts:
        return self.m.groups[self.estate.nodes[name].group]

    def gpus(self, name: str) -> int:
        return self.group(name).class_gpus


def facts(estate: Estate) -> Facts:
    f = Facts(estate, model(estate), budget=gpu_budget(estate))
    for g in f.m.groups:
        if len(g.hosts):
            f.pools.setdefault(g.spec.node_class, len(f.pools) % len(POOL_FILLS))
    for sw in estate.spec.topology.switches:
        f.switches.setdefault(sw.name, sw)
    f.leaf = leaf_switches(estate, f.switches)
    return f


def leaf_switches(estate: Estate, switches: dict[str, Switch]) -> dict[str, str]:
    """Node -> the switch it hangs under: its group's switch, else the first switch naming
    it in its own node list."""
    out: dict[str, str] = {}
    for sw in switches.values():
        try:
            names: Iterable[str] = Hostlist.parse(sw.nodes) if sw.nodes else []
        except HostlistError:
            names = []   # topology's validators report it
        for name in names:
            if name in estate.nodes:
                out.setdefault(name, sw.name)
    for name, node in estate.nodes.items():
        own = estate.spec.nodes[node.group].switch
        if own in switches:
            out[name] = own
    return out


def racks(f: Facts, names: list[str]) -> list[tuple[str, list[str]]]:
    """The nodes by rack, racks in the order their first node appears."""
    by_rack: dict[str, list[str]] = {}
    for name in names:
        by_rack.setdefault(f.group(name).spec.rack or "-", []).append(name)
    return list(by_rack.items())


# --- nodes and racks ------------------------------------------------------------------

def node_cell(f: Facts, name: str) -> Block:
    g = f.group(name)
    plane = g.plane or "none"
    e = el("g", class_="node", id=f"node-{name}")
    el("title", e, node_summary(f, name))
    el("rect", e, width=CELL_W, height=CELL_H, rx=3,
       class_=f"pool-{f.pools.get(g.spec.node_class, 0)} plane-{plane}")
    label(e, CELL_W / 2, 12, short(name, 10), size=9, anchor="middle")
    gpus = g.class_gpus
    tag = f"{gpus} GPU" if gpus else short("+".join(ROLE_TAGS.get(r, r) for r in g.roles), 10)
    label(e, CELL_W / 2, 26, tag, size=10 if gpus else 9, anchor="middle", bold=bool(gpus))
    return Block(e, CELL_W, CELL_H)


def node_summary(f: Facts, name: str) -> str:
    g = f.group(name)
    kinds = g.cls.gpu_kinds if g.cls else ()
    what = " + ".join(f"{k.count}x {k.model}" for k in kinds) or "no GPU"
    parts = [p.name for p in f.m.partitions if name in p.members]
    return "; ".join(x for x in (
        f"{name}: {g.spec.node_class} ({what})",
        f"plane {g.plane or 'none'}", f"rack {g.spec.rack or '-'}",
        f"switch {f.leaf[name]}" if name in f.leaf else "no leaf switch",
        "roles " + ", ".join(g.roles),
        "partitions " + ", ".join(parts) if parts else "") if x)


def columns(n: int) -> int:
    """Cells per row: racks are drawn tall (4 across up to 32 nodes), wider when big."""
    return max(1, min(n, max(4, math.ceil(math.sqrt(n / 2)))))


def rack_box(f: Facts, rack: str, names: list[str]) -> Block:
    cols = columns(len(names))
    rows = math.ceil(len(names) / cols)
    w = 2 * RACK_PAD + cols * CELL_W + (cols - 1) * CELL_GAP
    h = RACK_LABEL + rows * (CELL_H + CELL_GAP) - CELL_GAP + RACK_PAD
    g = el("g", class_="rack", data_rack=rack)
    el("rect", g, width=w, height=h, rx=4)
    gpus = sum(f.gpus(n) for n in names)
    label(g, RACK_PAD, 13, short(f"rack {rack}: {plural(len(names), 'node')}"
                                 + (f", {plural(gpus, 'GPU')}" if gpus else ""), w // 5),
          size=10, cls="muted")
    for i, name in enumerate(names):
        r, c = divmod(i, cols)
        node_cell(f, name).at(g, RACK_PAD + c * (CELL_W + CELL_GAP),
                              RACK_LABEL + r * (CELL_H + CELL_GAP))
    return Block(g, w, h)


def rack_column(f: Facts, names: list[str]) -> Block:
    return stack([rack_box(f, rack, members) for rack, members in racks(f, names)], gap=10)


# --- the fabric tree ----------------------------------------------------------------

@dataclass
class Placed:
    cx: float
    depth: int
    kids: list[str]


class Tree:
    """Switches laid out as a tree: leaves side by side, a parent centred over its
    children, each switch's nodes (a column of racks) below the lowest level."""

    def __init__(self, f: Facts):
        self.f = f
        self.children = {n: [c for c in sw.switches if c in f.switches and c != n]
                         for n, sw in f.switches.items()}
        members: dict[str, list[str]] = {}
        for name in f.estate.nodes:
            if name in f.leaf:
                members.setdefault(f.leaf[name], []).append(name)
        self.members = members
        self.blocks = {n: rack_column(f, names) for n, names in members.items()}
        self.placed: dict[str, Placed] = {}
        self.nodes_y = 0.0

    def roots(self) -> list[str]:
        child = {c for kids in self.children.values() for c in kids}
        return [n for n in self.f.switches if n not in child]

    def place(self, name: str, x0: float, depth: int) -> float:
        """Lay out name's subtree from x0; returns its width."""
        self.placed[name] = Placed(0, depth, [])
        x = x0
        for c in self.children[name]:
            if c not in self.placed:       # a cycle or a second parent: the validators say
                self.placed[name].kids.append(c)
                x += self.place(c, x, depth + 1) + COL_GAP
        span = x - x0 - COL_GAP if x > x0 else 0
        own = self.blocks[name].w if name in self.blocks else 0
        width = max(SW_W, span, own)
        kids = self.placed[name].kids
        self.placed[name].cx = ((self.placed[kids[0]].cx + self.placed[kids[-1]].cx) / 2
                                if kids else x0 + width / 2)
        return width

    def layout(self) -> float:
        x = 0.0
        for root in self.roots() + list(self.f.switches):   # unreached ones (cycles) last
            if root not in self.placed:
                x += self.place(root, x, 0) + COL_GAP
        return max(x - COL_GAP, 0)

    def counts(self, name: str, seen: set[str] | None = None) -> tuple[int, int]:
        """(nodes, GPUs) under a switch's subtree."""
        seen = seen if seen is not None else set()
        seen.add(name)
        names = self.members.get(name, [])
        nodes, gpus = len(names), sum(self.f.gpus(n) for n in names)
        for c in self.placed[name].kids:
            if c not in seen:
                n, g = self.counts(c, seen)
                nodes, gpus = nodes + n, gpus + g
        return nodes, gpus

    def draw(self) -> Block:
        width = self.layout()
        levels = max((p.depth for p in self.placed.values()), default=-1) + 1
        self.nodes_y = nodes_y = levels * LEVEL_H
        g = el("g", id="fabric")
        links = el("g", g, class_="links")
        for name, p in self.placed.items():
            y = p.depth * LEVEL_H
            for c in p.kids:
                kid = self.placed[c]
                mid = y + SW_H + (LEVEL_H - SW_H) / 2
                el("path", links, class_="link", d=f"M{_num(p.cx)},{_num(y + SW_H)} "
                   f"V{_num(mid)} H{_num(kid.cx)} V{_num(kid.depth * LEVEL_H)}")
            if name in self.blocks:
                el("path", links, class_="link",
                   d=f"M{_num(p.cx)},{_num(y + SW_H)} V{_num(nodes_y)}")
                b = self.blocks[name]
                b.at(g, p.cx - b.w / 2, nodes_y)
            self.switch_box(name, p).at(g, p.cx - SW_W / 2, y)
        height = nodes_y + max((b.h for b in self.blocks.values()), default=0)
        return Block(g, width, height)

    def switch_box(self, name: str, p: Placed) -> Block:
        sw = self.f.switches[name]
        nodes, gpus = self.counts(name)
        speed = f"{sw.link_speed_gbps} Gb/s" if sw.link_speed_gbps else ""
        line = ", ".join(x for x in (speed, plural(nodes, "node"),
                                     plural(gpus, "GPU") if gpus else "") if x)
        e = el("g", class_="switch", id=f"switch-{name}")
        el("title", e, f"switch {name}: {line}; children: "
           + (", ".join(p.kids) if p.kids else "none (leaf)"))
        el("rect", e, width=SW_W, height=SW_H, rx=6)
        label(e, SW_W / 2, 18, short(name, 20), size=12, anchor="middle", bold=True)
        label(e, SW_W / 2, 34, short(line, 30), size=9, anchor="middle", cls="muted")
        return Block(e, SW_W, SW_H)


def fabric(f: Facts) -> Block:
    """The switch tree with its nodes, then the racks of nodes under no switch, level with
    the tree's node columns."""
    parts, nodes_y = [], 22.0
    if f.switches:
        tree = Tree(f)
        parts.append(tree.draw())
        nodes_y = max(nodes_y, tree.nodes_y)
    loose = [n for n in f.estate.nodes if n not in f.leaf]
    if loose:
        g = el("g", id="off-fabric")
        label(g, 0, nodes_y - 8, "not under a switch", cls="heading")
        column = rack_column(f, loose)
        column.at(g, 0, nodes_y)
        parts.append(Block(g, max(column.w, 160), nodes_y + column.h))
    return stack(parts, gap=2 * COL_GAP, across=True)


# --- legend, header and tables ----------------------------------------------------------

def legend(f: Facts) -> Block:
    g = el("g", id="legend")
    label(g, 0, 14, "Legend: border = plane, fill = pool (node class)", cls="heading")
    y = 26
    present = {grp.plane or "none" for grp in f.m.groups if len(grp.hosts)}
    for plane in [p for p in PLANE_LABELS if p in present]:
        e = el("g", g, class_="legend-plane", data_plane=plane)
        el("rect", e, x=0, y=y, width=28, height=14, rx=2, fill="#ffffff",
           class_=f"swatch plane-{plane}")
        label(e, 36, y + 11, PLANE_LABELS.get(plane, plane), size=11)
        y += 20
    y += 6
    for cls_name, i in f.pools.items():
        e = el("g", g, class_="legend-pool", data_pool=cls_name)
        el("rect", e, x=0, y=y, width=28, height=14, rx=2, class_=f"swatch pool-{i}",
           stroke="#9ca3af")
        label(e, 36, y + 11, pool_line(f, cls_name), size=11)
        y += 20
    return Block(g, 520, y)


def pool_line(f: Facts, cls_name: str) -> str:
    groups = [g for g in f.m.groups if g.spec.node_class == cls_name]
    nodes = sum(len(g.hosts) for g in groups)
    cls = f.estate.classes.get(cls_name)
    if cls and cls.gpu_kinds:
        kinds = " + ".join(f"{k.count}x {k.model} ({short(k.product, 40)})"
                           for k in cls.gpu_kinds)
        return (f"{cls_name}: {kinds}, "
                f"{plural(nodes, 'node')}, {plural(nodes * cls.gpu_count, 'GPU')}")
    return f"{cls_name}: no GPU, {plural(nodes, 'node')}"


def header(f: Facts) -> Block:
    spec, budget = f.estate.spec, f.budget
    g = el("g", id="header")
    label(g, 0, 20, f"Estate {spec.name}", cls="title")
    y = 20
    for line in textwrap.wrap(spec.description, 150, max_lines=3, placeholder="\u2026"):
        y += 16
        label(g, 0, y, line, size=11, cls="muted")
    rack_count = len({grp.spec.rack for grp in f.m.groups if len(grp.hosts)})
    planes = ", ".join(f"{p} {n}" for p, n in sorted(budget.planes.items()) if n)
    y += 18
    label(g, 0, y, f"{plural(len(f.estate.nodes), 'node')} in {plural(rack_count, 'rack')}, "
          f"{plural(len(f.switches), 'switch', 'switches')}, {budget.total} schedulable GPUs"
          + (f" ({planes})" if planes else ""), size=11)
    return Block(g, 900, y + 4)


def segments_table(f: Facts) -> Block:
    spec = f.estate.spec
    rows = []
    for s in spec.segments:
        hosts = sum(len(h) for grp, h in zip(spec.nodes, f.estate.group_hosts)
                    if s.name in grp.addresses)
        rows.append([s.name, str(s.cidr), str(s.vlan), s.purpose, str(s.mtu), str(hosts)])
    return table("Segments", ["segment", "CIDR", "VLAN", "purpose", "MTU", "hosts"], rows,
                 [100, 116, 46, 80, 46, 46], id="segments")


def scheduling_tables(f: Facts) -> Block:
    budget = f.budget.as_dict()
    parts = [[p.name, p.nodes_text, str(budget["partitions"].get(p.name, {}).get("gpus", 0)),
              p.spec.max_time, str(p.spec.priority_tier), "yes" if p.spec.default else ""]
             for p in f.m.partitions]
    blocks = [table("Slurm partitions", ["partition", "nodes", "GPUs", "max time", "tier",
                                          "default"], parts, [90, 130, 50, 80, 36, 50],
                    id="partitions")]
    k8s = f.estate.spec.kubernetes
    if k8s and k8s.tenants:
        rows = [[t.name, ", ".join(f"{m}={n}" for m, n in t.gpus.items()), str(t.priority),
                 ", ".join(t.allow_from) or "-"] for t in k8s.tenants]
        blocks.append(table("Kubernetes tenants", ["tenant", "GPU quota", "priority",
                                                    "reached from"], rows,
                            [100, 120, 60, 110], id="tenants"))
    return stack(blocks, gap=16)


FLOW_HEAD_W, FLOW_COL_W = 150, 150
FLOW_FITS = (FLOW_COL_W - 8) // 6     # characters of a cell line at 10px


def flow_matrix(edges: list[Flow]) -> Block:
    """Sources down, destinations across; each cell lists the ports the source may open."""
    g = el("g", id="flows")
    label(g, 0, 14, "Flows (rows may open connections to columns)", cls="heading")
    sources = list(dict.fromkeys(e.source for e in edges))
    dests = list(dict.fromkeys(e.destination for e in edges))
    cells: dict[tuple[str, str], list[Flow]] = {}
    for e in edges:
        cells.setdefault((e.source, e.destination), []).append(e)
    for j, d in enumerate(dests):
        label(g, FLOW_HEAD_W + j * FLOW_COL_W + 4, 35, short(d, FLOW_FITS), size=10, bold=True)
    y = 22 + ROW_H
    for s in sources:
        h = max(len(cells.get((s, d), [])) for d in dests) * 13 + 8
        label(g, 4, y + 14, short(s, 24), size=10, bold=True)
        for j, d in enumerate(dests):
            flow_cell(g, FLOW_HEAD_W + j * FLOW_COL_W, y, h, cells.get((s, d), []))
        y += h
    if not edges:
        label(g, 0, y + 14, "no flows", size=10, cls="muted")
        y += ROW_H
    return Block(g, FLOW_HEAD_W + FLOW_COL_W * len(dests), y)


def flow_cell(parent: ET.Element, x: float, y: float, h: float, here: list[Flow]) -> None:
    c = el("g", parent, class_="flow" if here else "no-flow")
    el("rect", c, x=x, y=y, width=FLOW_COL_W, height=h, class_="open" if here else "cell")
    for k, fl in enumerate(here):
        label(c, x + 4, y + 14 + 13 * k, short(f"{fl.port}/{fl.protocol} {fl.reason}",
                                               FLOW_FITS), size=10)
    if here:
        el("title", c, "; ".join(f"{fl.source} -> {fl.destination}: {fl.reason} "
                                 f"{fl.port}/{fl.protocol}" for fl in here))


# --- the whole picture ------------------------------------------------------------------

def render_svg(estate: Estate, edges: list[Flow] | None = None) -> str:
    """The SVG text of the estate; edges default to flow_edges(estate)."""
    f = facts(estate)
    body = stack([
        header(f),
        fabric(f),
        legend(f),
        stack([segments_table(f), scheduling_tables(f)], gap=40, across=True),
        flow_matrix(flow_edges(estate) if edges is None else edges),
    ])
    w, h = body.w + 2 * MARGIN, body.h + 2 * MARGIN
    root = el("svg", xmlns=SVG_NS, width=w, height=h, viewBox=f"0 0 {_num(w)} {_num(h)}")
    el("title", root, f"Estate {estate.spec.name}")
    el("style", root).text = STYLE      # a constant: _clean would mangle its newlines
    el("rect", root, width=w, height=h, fill="#ffffff")
    body.at(root, MARGIN, MARGIN)
    ET.indent(root, space=" ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"
