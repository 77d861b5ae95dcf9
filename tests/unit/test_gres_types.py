"""GRES type names as slurmctld tells them apart (slurm.gres_type_clash).

slurmctld knows a type by gres_build_id(), a 32-bit sum of its bytes (SchedMD/slurm
src/interfaces/gres.c): names with one number are one type, names that only share a
prefix or a substring are not.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from estate.model.nvidia import MIG_PROFILES
from estate.model.slurm import gres_type_id
from estate.pipeline import build
from tests.unit.checkutil import findings_for, spec_dict

CLASH = "slurm.gres_type_clash"


def test_type_number_matches_slurms_gres_plugin_ids():
    # ParaStation's psslurm hard-codes the plugin ids Slurm's gres_build_id gives "gpu"
    # and "mic" (psslurmgres.h): the same function names plugins and types
    assert gres_type_id("gpu") == 7696487
    assert gres_type_id("mic") == 6515053


def test_type_number_is_a_sum_per_byte_lane():
    # bytes 0 and 4 share a lane, so swapping them keeps the number; case does not
    assert gres_type_id("v100s") == gres_type_id("s100v")
    assert gres_type_id("a100") != gres_type_id("A100")
    assert gres_type_id("a" * 4 + "\x01") == gres_type_id("b" + "a" * 3)


def test_nvidia_mig_profiles_and_common_models_have_distinct_numbers():
    names = {p for table in MIG_PROFILES.values() for p in table}
    names |= {"a100", "a30", "h100", "h200", "l40s", "l4", "b200", "gh200", "v100", "t4"}
    assert len({gres_type_id(n) for n in names}) == len(names)


def _two_kinds(first: str, second: str) -> dict:
    d = spec_dict("prod")
    d["node_classes"][0]["gpus"] = [
        {"model": first, "product": "NVIDIA-A100-SXM4-80GB", "count": 4, "memory_gb": 80},
        {"model": second, "product": "NVIDIA-A100-SXM4-80GB", "count": 4, "memory_gb": 80}]
    return d


def _clashes(d: dict) -> list[str]:
    return [f.path for f in findings_for(d) if f.id == CLASH]


@pytest.mark.parametrize("first,second", [("a100", "a100_80gb"), ("a100_80gb", "a100"),
                                          ("h100", "h100nvl"), ("l4", "l40s")])
def test_prefix_and_substring_names_are_distinct_types(first, second):
    assert _clashes(_two_kinds(first, second)) == []


def test_clash_across_classes_is_reported_once_where_the_second_name_appears():
    # slurmctld compares types cluster-wide: a job asking for gpu:s100v:1 matches the
    # v100s nodes of another class as well
    d = spec_dict("prod")
    d["node_classes"][0]["gpus"]["model"] = "v100s"
    d["node_classes"].append(dict(d["node_classes"][0], name="v100s-b", gpus=dict(
        d["node_classes"][0]["gpus"], model="s100v")))
    moved = [g for g in d["nodes"] if g["class"] == "h100-8x"][1:]
    for group in moved:                 # three groups of the second class: one finding
        group["class"] = "v100s-b"
    assert len(moved) == 3
    assert _clashes(d) == [f"node_classes[{len(d['node_classes']) - 1}].gpus.model"]


def test_mig_profile_and_its_me_variant_are_distinct_types():
    d = spec_dict("prod")
    gpus = d["node_classes"][0]["gpus"]
    gpus.update(mig=True, mig_profiles={"1g.10gb": 1, "1g.10gb+me": 1, "3g.40gb": 1})
    d["slurm"]["gres_autodetect"] = "nvml"
    assert _clashes(d) == []


def test_untyped_gres_has_no_type_to_clash():
    d = _two_kinds("v100s", "s100v")
    for group in d["nodes"]:
        if group["class"] == "h100-8x":
            group.setdefault("slurm", {})["gres_typed"] = False
    assert _clashes(d) == []
    assert _clashes(_two_kinds("v100s", "s100v")) == ["node_classes[0].gpus[1].model"]


def test_a_clashing_mig_profile_is_found_at_its_profile():
    # no real profile clashes (above), so the finding's path is checked on its own
    from estate.check.slurm_gres import _type_loc
    from estate.spec.model import Spec
    d = spec_dict("prod")
    d["node_classes"][0]["gpus"].update(mig=True, mig_profiles={"1g.10gb": 7})
    spec = Spec.model_validate(d)
    assert _type_loc(spec, "h100-8x", "1g.10gb") == ("node_classes", 0, "gpus",
                                                     "mig_profiles", "1g.10gb")
    assert _type_loc(spec, "l40s-8x", "l40s") == ("node_classes", 1, "gpus", "model")


# --- rendering despite a known finding (the controllers-only MIG lab) ---------------------

MIG_LAB = Path(__file__).resolve().parents[1] / "live_slurm" / "mig.yaml"
NO_NVML = ("slurm.plugin_not_in_release", "slurm.gres_autodetect")
LAB_CLASH = ("slurm.gres_type_clash", "node_classes[3].gpus[1].model")


def test_the_mig_lab_spec_fails_exactly_the_findings_its_lab_accepts():
    refused = build(MIG_LAB)
    assert not refused.ok and refused.artifacts is None
    assert {(f.id, f.path) for f in refused.findings} == {NO_NVML, LAB_CLASH}
    rendered = build(MIG_LAB, accept=frozenset({NO_NVML, LAB_CLASH}))
    assert rendered.ok and len(rendered.findings) == 2
    conf = rendered.artifacts["slurm/slurm.conf"].content.decode()
    assert "Gres=gpu:3g.20gb:2,gpu:2g.10gb:2,gpu:1g.5gb:2,gpu:1g.5gb+me:2" in conf


def test_accepting_one_finding_does_not_accept_another():
    result = build(MIG_LAB, accept=frozenset({NO_NVML}))
    assert not result.ok and result.artifacts is None
    assert [(f.id, f.path) for f in result.blocking] == [LAB_CLASH]


def test_the_lab_accepts_findings_only_where_no_slurmd_runs(tmp_path):
    from estate.lab.driver import LabError
    from estate.lab.netns import Lab
    with pytest.raises(LabError, match="controllers_only"):
        Lab(MIG_LAB, state=tmp_path, accept=frozenset({NO_NVML}))
    lab = Lab(MIG_LAB, state=tmp_path, controllers_only=True, accept=frozenset({NO_NVML}))
    with pytest.raises(LabError, match="gres_type_clash"):
        lab.load()
