"""The picture (`estate plan SPEC --svg FILE`): one element per node and per switch, a
legend naming what is coloured, every spec value escaped, written atomically."""
from __future__ import annotations

import copy
import os
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from estate.cli import app
from estate.render.artifacts import write_file
from estate.render.picture import PLANE_LABELS, Flow, flow_edges, render_svg
from estate.spec.model import Spec
from estate.spec.resolved import Estate

ROOT = Path(__file__).resolve().parents[2]
NS = {"s": "http://www.w3.org/2000/svg"}
HOSTILE = '<script>alert("x")</script> & </text><text>'


@lru_cache(maxsize=None)
def _spec(name: str) -> dict:
    return yaml.safe_load((ROOT / "stacks" / f"{name}.yaml").read_text())


def estate(name: str, mutate=None) -> Estate:
    data = copy.deepcopy(_spec(name))
    if mutate:
        mutate(data)
    return Estate(Spec.model_validate(data))


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg.encode())


def groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return root.findall(f".//s:g[@class='{cls}']", NS)


def texts(e: ET.Element) -> str:
    return " ".join(t.text or "" for t in e.iter(f"{{{NS['s']}}}text"))


@pytest.mark.parametrize("name", ["lab", "example-prod"])
def test_one_element_per_node_and_per_switch(name):
    est = estate(name)
    root = parse(render_svg(est))
    node_ids = [g.get("id") for g in groups(root, "node")]
    assert sorted(node_ids) == sorted(f"node-{n}" for n in est.nodes)
    switch_ids = [g.get("id") for g in groups(root, "switch")]
    assert sorted(switch_ids) == sorted(f"switch-{s.name}" for s in est.spec.topology.switches)


def test_prod_has_its_128_gpu_nodes_with_their_count():
    root = parse(render_svg(estate("example-prod")))
    gpu_cells = [g for g in groups(root, "node") if g.get("id").startswith("node-gpu")]
    assert len(gpu_cells) == 128
    assert all("8 GPU" in texts(g) for g in gpu_cells)


def test_nodes_hang_under_their_leaf_switch_in_a_rack_box():
    root = parse(render_svg(estate("example-prod")))
    racks = {r.get("data-rack"): [g.get("id") for g in groups(r, "node")]
             for r in groups(root, "rack")}
    assert racks["r01"] == [f"node-gpu{i:03d}" for i in range(1, 33)]
    loose = root.find(".//s:g[@id='off-fabric']", NS)
    assert {g.get("id") for g in groups(loose, "node")} == {
        "node-ctl1", "node-ctl2", "node-login1", "node-login2", "node-k8s-cp1",
        "node-nfs1", "node-nfs2", "node-inf01", "node-inf02", "node-inf03", "node-inf04"}


@pytest.mark.parametrize("name", ["lab", "example-prod"])
def test_the_legend_names_each_plane_and_pool_and_the_nodes_wear_their_colours(name):
    est = estate(name)
    root = parse(render_svg(est))
    legend = root.find(".//s:g[@id='legend']", NS)
    planes = {g.plane or "none" for g in est.spec.nodes}
    pools = {g.node_class for g in est.spec.nodes}
    for plane in planes:
        assert PLANE_LABELS[plane] in texts(legend)
    swatch = {}
    for entry in groups(legend, "legend-pool"):
        assert entry.get("data-pool") in texts(entry)
        swatch[entry.get("data-pool")] = entry.find("s:rect", NS).get("class").split()[-1]
    assert set(swatch) == pools
    for cell in groups(root, "node"):
        group = est.group_of(cell.get("id").removeprefix("node-"))
        classes = cell.find("s:rect", NS).get("class").split()
        assert swatch[group.node_class] in classes
        assert f"plane-{group.plane or 'none'}" in classes


def test_segments_are_listed_with_their_cidrs():
    est = estate("example-prod")
    table = texts(parse(render_svg(est)).find(".//s:g[@id='segments']", NS))
    for s in est.spec.segments:
        assert s.name in table and str(s.cidr) in table


def test_the_flow_adapter_reads_the_flow_matrix():
    edges = flow_edges(estate("lab"))
    assert Flow("slurm_worker", "slurm_controller", 6817, "tcp", "slurmctld") in edges
    assert Flow("k8s_worker", "k8s_control_plane", 6443, "tcp", "kube-apiserver") in edges
    assert Flow("slurm_worker", "storage", 2049, "tcp", "nfs") in edges
    assert Flow("10.60.0.1/32", "every node", 22, "tcp", "ssh") in edges
    assert Flow("slurm_login", "Slurm nodes", "60001-63000", "tcp", "srun") in edges
    # roles, not segments: the storage node reaches no Slurm daemon
    assert not [e for e in edges if e.source == "storage" and e.reason.startswith("slurm")]
    assert len(edges) == len(set(edges))


def test_the_flow_matrix_has_a_cell_per_source_and_destination():
    edges = [Flow("a", "x", 1, "tcp", "one"), Flow("a", "x", 2, "udp", "two"),
             Flow("b", "y", 3, "tcp", "three")]
    matrix = parse(render_svg(estate("lab"), edges)).find(".//s:g[@id='flows']", NS)
    assert len(groups(matrix, "flow")) == 2 and len(groups(matrix, "no-flow")) == 2
    assert "1/tcp one" in texts(matrix) and "2/udp two" in texts(matrix)


def test_every_spec_value_is_escaped():
    def hostile(d):
        d["description"] = HOSTILE
        d["node_classes"][1]["gpus"]["product"] = "A&B" + HOSTILE
    edges = [Flow(HOSTILE, "a&b", 1, "tcp", HOSTILE)]
    svg = render_svg(estate("lab", hostile), edges)
    root = parse(svg)   # well-formed
    assert not [e for e in root.iter() if e.tag.endswith("script")]
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "A&amp;B" in svg
    header = root.find(".//s:g[@id='header']", NS)
    assert HOSTILE in texts(header)   # shown as text, not markup


def test_a_switch_cycle_is_drawn_once_and_ends():
    def cycle(d):
        d["topology"]["switches"] = [{"name": "a", "switches": ["b"]},
                                     {"name": "b", "switches": ["a"]}]
        for g in d["nodes"]:
            g.pop("switch", None)
    root = parse(render_svg(estate("lab", cycle)))
    assert sorted(g.get("id") for g in groups(root, "switch")) == ["switch-a", "switch-b"]


def test_an_estate_without_switches_draws_its_racks():
    def flat(d):
        d["topology"] = {}
        for g in d["nodes"]:
            g.pop("switch", None)
    est = estate("lab", flat)
    root = parse(render_svg(est))
    assert groups(root, "switch") == [] and len(groups(root, "node")) == len(est.nodes)


def test_prod_picture_stays_small():
    assert len(render_svg(estate("example-prod")).encode()) < 300_000


# --- the command --------------------------------------------------------------------

def test_plan_svg_writes_the_picture(tmp_path):
    out = tmp_path / "prod.svg"
    result = CliRunner().invoke(app, ["plan", str(ROOT / "stacks/example-prod.yaml"),
                                      "--svg", str(out), "--output", "json"])
    assert result.exit_code == 0, result.output
    assert len(groups(parse(out.read_text()), "node")) == 139
    assert list(tmp_path.iterdir()) == [out]   # no temporary file left behind


def test_plan_svg_on_a_broken_spec_leaves_the_file(tmp_path):
    out = tmp_path / "old.svg"
    out.write_text("old")
    result = CliRunner().invoke(app, ["plan", str(ROOT / "tests/data/broken-prod.yaml"),
                                      "--svg", str(out)])
    assert result.exit_code == 1
    assert "not drawn" in result.output and out.read_text() == "old"


def test_plan_svg_into_a_missing_directory_fails_helpfully(tmp_path):
    out = tmp_path / "missing" / "x.svg"
    result = CliRunner().invoke(app, ["plan", str(ROOT / "stacks/lab.yaml"), "--svg", str(out)])
    assert result.exit_code == 1 and "cannot write" in result.output
    assert not out.parent.exists()


def test_write_file_keeps_the_old_file_when_the_rename_fails(tmp_path, monkeypatch):
    out = tmp_path / "f"
    out.write_text("old")

    def fail(*_):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        write_file(b"new", out)
    assert out.read_text() == "old" and list(tmp_path.iterdir()) == [out]
