"""Node sets: members derived once, rendered as NodeSet lines, and named by partitions."""
from __future__ import annotations

import yaml

from estate.model import model
from estate.model.slurm_keys import conf_keys, versions
from estate.render.slurm import render_slurm
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from estate.verify.slurm_view import expected_partitions
from tests.unit.checkutil import spec_dict


def estate_of(data: dict) -> Estate:
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "<test>")
    assert loaded.spec is not None, loaded.findings
    return Estate(loaded.spec)


def conf(estate: Estate) -> list[str]:
    art = next(a for a in render_slurm(estate) if a.path == "slurm/slurm.conf")
    return art.content.decode().splitlines()


def test_every_release_estate_renders_for_has_nodeset():
    # why estate.check.slurm_nodesets has no release check: the parser tables all have it
    assert all("nodeset" in conf_keys(v) for v in versions())


def test_a_class_nodeset_is_written_as_its_workers_and_batch_names_it():
    est = estate_of(spec_dict("prod"))
    lines = conf(est)
    assert "NodeSet=h100-nodes Nodes=gpu[001-128]" in lines
    batch = next(ln for ln in lines if ln.startswith("PartitionName=batch "))
    assert " Nodes=h100-nodes " in batch
    members = model(est).partitions[0].members
    assert len(members) == 128 and "gpu128" in members
    # slurmctld reports the node set's nodes, not its name
    assert expected_partitions(est)["batch"]["Nodes"] == "gpu[001-128]"


def test_feature_nodeset_and_hosts_plus_nodesets_in_one_partition():
    data = spec_dict("prod")
    data["nodes"][5]["slurm"]["features"] = ["h100", "ib", "hbm80", "spare"]   # gpu[097-128]
    data["slurm"]["nodesets"].append({"name": "spares", "feature": "spare"})
    data["slurm"]["partitions"][2].update(nodes="gpu[001-002]", nodesets=["spares"])
    est = estate_of(data)
    lines = conf(est)
    assert "NodeSet=spares Feature=spare" in lines
    debug = next(ln for ln in lines if ln.startswith("PartitionName=debug "))
    assert " Nodes=gpu[001-002],spares " in debug
    members = model(est).partitions[2].members
    assert len(members) == 34 and "gpu001" in members and "gpu097" in members
    assert "gpu050" not in members
