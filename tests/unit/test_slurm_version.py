"""slurm.version: which Slurm release the spec renders for. The releases are the catalogue's
(each with the Debian suite that ships it), each with a key list written from that
release's own parser; the renderer writes topology/block only where the release reads it,
and the validators check slurm.extra and SchedulerParameters against the spec's release."""
from __future__ import annotations

import json

import pytest

from estate.catalogue import DEFAULT_SLURM, SLURM_SUITES
from estate.model.slurm_keys import (KEYS_DIR, at_least, conf_keys, plugins, scheduler_options,
                                     ships, versions)
from tests.unit.checkutil import findings_for, keyed, spec_dict
from tests.unit.test_slurm_settings import global_keys, render


def with_version(name: str, version: str | None) -> dict:
    data = spec_dict(name)
    data["slurm"].pop("version", None)
    if version:
        data["slurm"]["version"] = version
    return data


def test_every_release_has_a_key_list_from_its_own_slurm():
    assert versions() == sorted(SLURM_SUITES)
    for version in versions():
        doc = json.loads((KEYS_DIR / f"{version}.json").read_text())
        # the package that shipped the parser is the release's (24.11.5-4+deb13u1)
        assert f" {version}." in doc["source"]["slurm.conf"], doc["source"]


def test_the_default_is_the_host_suites_slurm():
    assert DEFAULT_SLURM == "22.05"
    loaded = findings_for(with_version("lab", None))
    assert loaded == []


def test_an_unknown_release_is_refused_at_its_path():
    found = findings_for(with_version("lab", "23.02"))
    assert [f.path for f in found] == ["slurm.version"]
    assert "24.11" in found[0].message


def test_at_least_compares_major_then_minor():
    assert at_least("24.11", (23, 11)) and at_least("23.11", (23, 11))
    assert not at_least("22.05", (23, 11)) and not at_least("23.02", (23, 11))


def test_blocks_render_as_topology_block_on_24_11():
    files = render(with_version("prod", "24.11"))
    topo = files["slurm/topology.conf"]
    assert "TopologyPlugin=topology/block" in files["slurm/slurm.conf"].splitlines()
    assert "BlockName=b01 Nodes=gpu[001-016]" in topo.splitlines()
    assert "BlockSizes=16,32,64,128" in topo.splitlines()
    assert "SwitchName" not in topo
    assert "slurm/topology.block.conf" not in files   # one topology.conf, the one installed


def test_a_switch_tree_stays_topology_tree_on_24_11():
    data = with_version("prod", "24.11")
    data["topology"].pop("blocks")
    data["topology"].pop("block_sizes")
    files = render(data)
    assert "TopologyPlugin=topology/tree" in files["slurm/slurm.conf"].splitlines()
    assert "SwitchName=leaf04 Nodes=gpu[097-128] LinkSpeed=400" in \
        files["slurm/topology.conf"].splitlines()


def test_blocks_on_22_05_are_an_error_naming_slurm_version():
    data = with_version("prod", "22.05")
    found = keyed(findings_for(data))
    f = found[("topology.block_version", "topology.blocks")]
    assert f.severity.value == "error"
    assert "23.11" in f.message and "slurm.version" in f.hint and "24.11" in f.hint
    # and nothing of topology/block is rendered for a Slurm that cannot read it
    files = render(data)
    assert "TopologyPlugin=topology/tree" in files["slurm/slurm.conf"]
    assert "BlockName" not in files["slurm/topology.conf"]


@pytest.mark.parametrize("version", sorted(SLURM_SUITES))
def test_every_key_rendered_is_one_the_release_parses(version):
    """What slurm.conf.j2 writes must be keys the spec's Slurm knows (from its parser)."""
    for name in ("lab", "prod"):
        data = with_version(name, version)
        if not at_least(version, (23, 11)):
            data["topology"].pop("blocks", None)
            data["topology"].pop("block_sizes", None)
        conf = render(data)["slurm/slurm.conf"]
        unknown = {k for k in global_keys(conf)} - set(conf_keys(version).values())
        assert unknown == set(), (version, name)


def test_extra_keys_are_checked_against_the_specs_release():
    """TLSType came in 24.11's parser, SchedulerAuth left it: each is an error only on the
    release that does not know it, and the message names that release's key list."""
    for version, good, bad in (("24.11", "TLSType", "SchedulerAuth"),
                               ("22.05", "SchedulerAuth", "TLSType")):
        data = with_version("prod", version)
        if version == "22.05":
            data["topology"].pop("blocks")
            data["topology"].pop("block_sizes")
        data["slurm"]["extra"] = {good: "x", bad: "y"}
        found = keyed(findings_for(data))
        assert ("slurm.unknown_setting", f"slurm.extra.{good}") not in found
        f = found[("slurm.unknown_setting", f"slurm.extra.{bad}")]
        assert f"keys/{version}.json" in f.message


def test_scheduler_parameters_follow_the_release():
    """24.11 moved preempt_youngest_first to PreemptParameters; bf_topopt_enable is new."""
    assert "preempt_youngest_first" in scheduler_options("22.05")
    assert "preempt_youngest_first" not in scheduler_options("24.11")
    data = with_version("prod", "24.11")
    data["slurm"]["scheduler_parameters"] = {"preempt_youngest_first": True,
                                             "bf_topopt_enable": True}
    found = keyed(findings_for(data))
    assert ("slurm.unknown_scheduler_parameter",
            "slurm.scheduler_parameters.preempt_youngest_first") in found
    assert ("slurm.unknown_scheduler_parameter",
            "slurm.scheduler_parameters.bf_topopt_enable") not in found


def test_each_release_lists_the_plugins_it_ships():
    """Read from the release's plugin directory: 24.11 dropped the 'none' plugins and
    pmix_v4 (it has pmix_v5), and added topology/block."""
    assert ships("22.05", "mpi/none") and not ships("24.11", "mpi/none")
    assert ships("22.05", "mpi/pmix_v4") and not ships("24.11", "mpi/pmix_v4")
    assert ships("24.11", "topology/block") and not ships("22.05", "topology/block")
    assert {"auth_jwt", "gres_gpu", "select_cons_tres"} <= plugins("24.11")


NONE_SETTINGS = ("MpiDefault=none", "TaskPlugin=task/none",
                 "AccountingStorageType=accounting_storage/none",
                 "JobAcctGatherType=jobacct_gather/none")


def test_none_plugins_are_left_unset_where_the_release_has_none():
    """24.11 treats an unset keyword as none (slurm.conf(5): "Unset by default"); 22.05
    loads the none plugins. tests/live_slurm/two_leaf.yaml: linuxproc, no accounting."""
    from pathlib import Path
    import yaml
    spec = Path(__file__).resolve().parents[1] / "live_slurm" / "two_leaf.yaml"
    data = yaml.safe_load(spec.read_text())
    data["slurm"].pop("hooks")      # files next to the spec: not what this test is about
    for version, written in (("22.05", True), ("24.11", False)):
        data["slurm"]["version"] = version
        lines = render(data)["slurm/slurm.conf"].splitlines()
        assert all((s in lines) == written for s in NONE_SETTINGS), (version, lines)
    assert findings_for(data) == []


def test_a_plugin_the_release_does_not_ship_is_an_error_at_its_field():
    data = with_version("prod", "24.11")
    data["slurm"]["mpi_default"] = "pmix_v4"
    f = keyed(findings_for(data))[("slurm.plugin_not_in_release", "slurm.mpi_default")]
    assert "mpi/pmix_v4" in f.message and "24.11" in f.message
    assert "pmix_v5" in f.hint and "none" not in f.hint
    data["slurm"]["mpi_default"] = "none"          # unset on 24.11: no plugin to miss
    assert ("slurm.plugin_not_in_release", "slurm.mpi_default") not in keyed(findings_for(data))


@pytest.mark.parametrize("version,line", [("22.05", "TopologyPlugin=topology/none"),
                                          ("24.11", None)])
def test_no_switches_no_blocks_is_the_flat_topology(version, line):
    """24.11's topology/tree with no switch refuses every multi-node job (measured:
    tests/live_slurm/test_gres_mix.py); with nothing to describe, the release's flat plugin
    (24.11 has no topology/none: the key is unset, and its default is flat)."""
    data = with_version("prod", version)
    data["topology"] = {}
    conf = render(data)["slurm/slurm.conf"].splitlines()
    plugin = [ln for ln in conf if ln.startswith("TopologyPlugin=")]
    assert plugin == ([line] if line else [])
