"""MIG profiles as GRES types on real slurmctld, 22.05 and 24.11 (tests/live_slurm/mig.yaml).

MIG devices are found by slurmd through NVML (AutoDetect=nvml, slurm.mig_needs_nvml), and
Debian builds Slurm without gpu/nvml, so no slurmd here could register a MIG node. The lab
runs controllers only (slurmctld and the client on ctl1, no slurmd; workers stay as they
start) and renders despite exactly two findings: slurm.plugin_not_in_release at
slurm.gres_autodetect, about the plugin slurmd would load, and slurm.gres_type_clash at
gpu3's s100v, the clash the last test shows slurmctld making.

What is proven: slurmctld of both releases loads the rendered slurm.conf with one GRES type
per MIG profile (Gres=gpu:3g.20gb:2,...,gpu:1g.5gb+me:2) beside whole GPUs of another node,
`scontrol show node` reports the spec's types and counts, and at submission slurmctld tells
the types apart by count: a job may ask for as many devices of a profile as a node has, not
one more, and 1g.5gb and 1g.5gb+me are counted apart (a name that is another's prefix is
another type; slurm.gres_type_clash). What is not proven: that slurmd with NVML finds these
devices on a MIG GPU, names them so, or that a job runs on one (no NVML, no MIG GPU here).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from estate.model.slurm import node_lines
from estate.verify import slurm_view
from tests.live_slurm.conftest import lab_on_each_release, unregistered

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).with_name("mig.yaml")
NO_NVML = ("slurm.plugin_not_in_release", "slurm.gres_autodetect")
CLASH = ("slurm.gres_type_clash", "node_classes[3].gpus[1].model")
lab = lab_on_each_release(SPEC, controllers_only=True, accept=frozenset({NO_NVML, CLASH}))


def _kinds(lab, node: str) -> dict[str, int]:
    """GRES type -> count the spec gives a node."""
    line = next(ln for ln in node_lines(lab.estate) if node in ln.hostlist)
    return {k.type: k.count for k in line.kinds}


def test_slurmctld_runs_without_any_slurmd(lab):
    ctl = lab.slurm.controllers[0]
    said = lab.run(ctl, ["slurmctld", "-V"]).stdout
    assert said.startswith(f"slurm-wlm {lab.slurm.version}."), said
    assert lab.pids(ctl, "slurmctld")
    assert all(not lab.pids(n, "slurmd") for n in lab.workers())


def test_scontrol_reports_the_spec_mig_types_and_counts(lab):
    view = lab.view()
    assert _kinds(lab, "gpu1") == {"3g.20gb": 2, "2g.10gb": 2, "1g.5gb": 2, "1g.5gb+me": 2}
    want = ",".join(f"gpu:{t}:{n}" for t, n in _kinds(lab, "gpu1").items())
    assert view.nodes["gpu1"]["Gres"] == want
    assert view.nodes["gpu2"]["Gres"] == "gpu:a100:2"
    left = [m for m in slurm_view.compare(lab.estate, view) if not unregistered(m)]
    # gpu3's clash is the last test's
    assert [(m.subject, m.field) for m in left] == [("node gpu3", "Gres")], left


def _submit(lab, gres: str):
    """sbatch a job asking for gres. slurmctld tests it against the nodes' configured GRES
    at submission and refuses what no node could ever give (a held job is not tested: a
    --hold submission of gpu:1g.5gb:3 was accepted, measured on 22.05 and 24.11). An
    accepted job pends (no slurmd), and is cancelled."""
    proc = lab.run(lab.client(), ["sbatch", "--parsable", "-o", "/dev/null",
                                  f"--gres={gres}", "--wrap", "true"], check=False)
    if proc.returncode == 0:
        lab.run(lab.client(), ["scancel", proc.stdout.strip().split(";")[0]])
    return proc


@pytest.mark.parametrize("gres", ["gpu:1g.5gb:2", "gpu:1g.5gb+me:2", "gpu:3g.20gb:2",
                                  "gpu:a100:2"])
def test_a_job_may_ask_for_what_a_node_has(lab, gres):
    proc = _submit(lab, gres)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("gres", ["gpu:1g.5gb:3", "gpu:1g.5gb+me:3", "gpu:3g.20gb:3",
                                  "gpu:1g.5g:1", "gpu:a100:3"])
def test_one_more_or_a_prefix_of_a_type_is_refused(lab, gres):
    """1g.5gb and 1g.5gb+me have two devices each: taken for one type they would have four;
    1g.5g (a prefix of both) is no type at all."""
    proc = _submit(lab, gres)
    assert proc.returncode != 0, proc.stdout
    assert "Requested node configuration is not available" in proc.stderr, proc.stderr


def test_the_spec_has_exactly_the_accepted_findings(lab):
    from estate.pipeline import build
    result = build(SPEC, accept=lab.accept)
    assert {(f.id, f.path) for f in result.findings} == lab.accept


@pytest.mark.parametrize("asked", ["v100s", "s100v"])
def test_two_names_with_one_number_are_one_type(lab, asked):
    """gpu3 has 2 v100s and 2 s100v (slurm.gres_type_clash). slurmctld adds the counts of
    names with one number under the first (gres_add_type): scontrol shows gpu:v100s:4, and
    a job may ask for 4 devices of either name, only 5 is refused."""
    line = next(ln for ln in node_lines(lab.estate) if "gpu3" in ln.hostlist)
    assert line.gres == "gpu:v100s:2,gpu:s100v:2"
    assert lab.view().nodes["gpu3"]["Gres"] == "gpu:v100s:4"
    assert _submit(lab, f"gpu:{asked}:4").returncode == 0
    refused = _submit(lab, f"gpu:{asked}:5")
    assert "Requested node configuration is not available" in refused.stderr, refused
