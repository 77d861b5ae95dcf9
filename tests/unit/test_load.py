"""Loading: malformed YAML and schema errors come back as findings with file:line:column."""
from __future__ import annotations

import pytest

from estate.check import has_errors
from estate.spec.load import load, load_text
from tests.unit.checkutil import SPECS, findings_for, keyed, spec_dict


@pytest.mark.parametrize("name", sorted(SPECS))
def test_example_specs_load_and_check_clean(name):
    loaded = load(SPECS[name])
    assert loaded.findings == [] and loaded.spec is not None
    findings = findings_for(spec_dict(name))
    assert not has_errors(findings), [f for f in findings if f.severity.value == "error"]


def test_example_prod_has_no_warnings_either():
    mine = ("network.", "nodes.", "boundaries.", "slurm.", "topology.", "storage.", "identity.")
    assert [f for f in findings_for(spec_dict("prod")) if f.id.startswith(mine)] == []


def test_malformed_yaml_reports_file_line_column():
    text = "name: x\nsegments:\n  - {name: a, cidr: 10.0.0.0/24\nnodes: []\n"
    loaded = load_text(text, "broken.yaml")
    assert loaded.spec is None
    [finding] = loaded.findings
    assert finding.id == "spec.yaml"
    assert finding.severity.value == "error"
    file, line, col = finding.location.split(":")
    assert file == "broken.yaml" and int(line) in (3, 4) and int(col) >= 1


def test_schema_error_points_at_the_offending_value():
    text = SPECS["lab"].read_text().replace("vlan: 20,", "vlan: 5000,")
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "vlan: 5000" in l)
    loaded = load_text(text, "lab.yaml")
    found = keyed(loaded.findings)
    finding = found[("schema.less_than_equal", "segments[1].vlan")]
    assert finding.location.startswith(f"lab.yaml:{line}:")
    assert finding.hint


def test_unknown_key_names_the_closest_valid_key():
    data = spec_dict("prod")
    data["nodes"][2]["swtich"] = data["nodes"][2].pop("switch")
    found = keyed(findings_for(data, "prod.yaml"))
    finding = found[("schema.unknown_key", "nodes[2].swtich")]
    assert finding.hint == "did you mean 'switch'?"
    assert finding.location.startswith("prod.yaml:")


def test_unknown_key_without_close_match_lists_valid_keys():
    data = spec_dict("prod")
    data["slurm"]["zzz"] = 1
    finding = keyed(findings_for(data))[("schema.unknown_key", "slurm.zzz")]
    assert "cluster_name" in finding.hint and "partitions" in finding.hint


def test_unknown_key_in_alias_field_suggests_the_alias():
    data = spec_dict("lab")
    data["nodes"][0]["clas"] = data["nodes"][0].pop("class")
    found = keyed(findings_for(data))
    assert found[("schema.unknown_key", "nodes[0].clas")].hint == "did you mean 'class'?"


def test_a_spec_that_is_not_a_mapping():
    loaded = load_text("- a\n- b\n", "list.yaml")
    assert [f.id for f in loaded.findings] == ["spec.type"]


def test_unreadable_file(tmp_path):
    loaded = load(tmp_path / "missing.yaml")
    assert [f.id for f in loaded.findings] == ["spec.read"]


def test_example_prod_renders_through_the_pipeline():
    from estate.pipeline import build
    result = build(SPECS["prod"])
    assert result.ok, [f for f in result.findings if f.severity.value == "error"]
    conf = result.artifacts["slurm/slurm.conf"].content.decode()
    assert "NodeName=gpu[001-128]" in conf and "Gres=gpu:h100:8" in conf
    # example-prod runs Slurm 24.11: topology.conf holds its blocks (topology/block)
    topo = result.artifacts["slurm/topology.conf"].content.decode()
    assert "BlockName=b08 Nodes=gpu[113-128]" in topo and "SwitchName" not in topo
    assert "TopologyPlugin=topology/block" in conf
