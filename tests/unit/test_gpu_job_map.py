"""Estate's Prolog and Epilog on the Slurm GPU workers: the DCGM exporter's job mapping
where a GPU's index is what SLURM_JOB_GPUS names, none on workers with MIG devices (whose
numbers are slurmd's own, not a GPU's index), the site's hook run after either. The
rendered scripts run under sh here, with the map and hook directories moved into tmp."""
from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path

import yaml

from estate.model.destinations import destination, installer
from estate.model.monitoring import JOB_MAP_DIR
from estate.model.services import HOOK_DIR
from estate.pipeline import build
from tests.unit.checkutil import findings_for, keyed, spec_dict

NVML = ("slurm.plugin_not_in_release", "slurm.gres_autodetect")   # Debian's Slurm lacks it
SITE_HOOK = '#!/bin/sh\necho "{key} $SLURM_JOB_ID" >>"$(dirname "$0")/ran"\n'
MIG_LAYOUT = {"1g.5gb": 7}


def lab_with_mig(monitoring: bool = True) -> dict:
    """The lab with its Slurm workers' A100s split into MIG devices, and a worker gpu3
    with whole A100s beside them (same partitions, its own class)."""
    data = spec_dict("lab")
    whole = copy.deepcopy(data["node_classes"][1])
    whole["name"] = "gpu-2x-whole"
    data["node_classes"].append(whole)
    data["node_classes"][1]["gpus"]["mig_profiles"] = MIG_LAYOUT
    data["slurm"]["gres_autodetect"] = "nvml"
    [workers] = [g for g in data["nodes"] if g["hosts"] == "gpu[1-2]"]
    data["nodes"].append({**copy.deepcopy(workers), "hosts": "gpu3", "class": "gpu-2x-whole"})
    if not monitoring:
        del data["monitoring"]
    return data


def _build(tmp_path: Path, data: dict):
    data["slurm"]["hooks"] = {"prolog": "hooks/prolog", "epilog": "hooks/epilog"}
    spec = tmp_path / "site" / "spec.yaml"
    (spec.parent / "hooks").mkdir(parents=True)
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    for key in ("prolog", "epilog"):
        (spec.parent / "hooks" / key).write_text(SITE_HOOK.format(key=key))
    result = build(spec, accept=frozenset({NVML}))
    assert result.artifacts is not None, result.findings
    return result.artifacts


def run_hook(tmp_path: Path, content: bytes, key: str, job: str, gpus: str) -> Path:
    """Run a rendered hook as slurmd would, its map and the site's hooks under tmp_path;
    returns the map directory."""
    hooks, mapdir = tmp_path / "hooks", tmp_path / "map"
    hooks.mkdir(exist_ok=True)
    for name in ("prolog", "epilog"):
        (hooks / name).write_text(SITE_HOOK.format(key=name))
        (hooks / name).chmod(0o755)
    script = content.decode().replace(JOB_MAP_DIR, str(mapdir)).replace(HOOK_DIR, str(hooks))
    (tmp_path / key).write_text(script)
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": job, "SLURM_JOB_GPUS": gpus}
    subprocess.run(["sh", str(tmp_path / key)], env=env, check=True, timeout=10)
    return mapdir


def site_ran(tmp_path: Path) -> list[str]:
    return (tmp_path / "hooks" / "ran").read_text().splitlines()


def test_mig_workers_get_hooks_that_keep_no_map_at_the_same_installed_path(tmp_path):
    arts = _build(tmp_path, lab_with_mig())
    for name in ("estate-prolog", "estate-epilog"):
        mapped, unmapped = arts[f"slurm/hooks/{name}"], arts[f"slurm/hooks/mig/{name}"]
        assert (str(mapped.consumers), str(unmapped.consumers)) == ("gpu3", "gpu[1-2]")
        assert destination(mapped.path) == destination(unmapped.path) == \
            f"/etc/slurm/hooks/{name}"
        assert installer(unmapped.path, ["common", "slurm_worker"]) == "slurm_worker"
        assert unmapped.mode == 0o755
        assert JOB_MAP_DIR in mapped.content.decode()
        assert JOB_MAP_DIR not in unmapped.content.decode()
    assert {a.path for a in arts.for_node("gpu1") if "/hooks/" in a.path} == {
        "slurm/hooks/prolog", "slurm/hooks/epilog",
        "slurm/hooks/mig/estate-prolog", "slurm/hooks/mig/estate-epilog",
        "slurm/hooks/task-prologs/gpu-2x/estate-task-prolog"}


def test_the_mig_workers_hooks_write_no_map_and_run_the_sites(tmp_path):
    arts = _build(tmp_path / "spec", lab_with_mig())
    prolog = arts["slurm/hooks/mig/estate-prolog"].content
    mapdir = run_hook(tmp_path, prolog, "prolog", "42", "0,1")
    assert not mapdir.exists()
    epilog = arts["slurm/hooks/mig/estate-epilog"].content
    run_hook(tmp_path, epilog, "epilog", "42", "0,1")
    assert not mapdir.exists()
    assert site_ran(tmp_path) == ["prolog 42", "epilog 42"]


def test_whole_gpu_workers_hooks_keep_the_map_and_run_the_sites(tmp_path):
    arts = _build(tmp_path / "spec", lab_with_mig())
    prolog = arts["slurm/hooks/estate-prolog"].content
    mapdir = run_hook(tmp_path, prolog, "prolog", "42", "0,1")
    run_hook(tmp_path, prolog, "prolog", "43", "1")
    assert {p.name: p.read_text() for p in mapdir.iterdir()} == {"0": "42\n", "1": "42\n43\n"}
    run_hook(tmp_path, arts["slurm/hooks/estate-epilog"].content, "epilog", "42", "0,1")
    assert {p.name: p.read_text() for p in mapdir.iterdir()} == {"1": "43\n"}
    assert site_ran(tmp_path) == ["prolog 42", "prolog 43", "epilog 42"]


def test_without_mig_every_worker_keeps_the_map():
    arts = build(Path(__file__).resolve().parents[2] / "stacks/lab.yaml").artifacts
    assert str(arts["slurm/hooks/estate-prolog"].consumers) == "gpu[1-2]"
    assert not [p for p in arts if p.startswith("slurm/hooks/mig/")]


def test_mig_attribution_is_warned_at_the_layout_only_where_monitored():
    vid = "monitoring.mig_gpu_attribution"
    found = keyed(findings_for(lab_with_mig()))
    warning = found[(vid, "node_classes[1].gpus.mig_profiles")]
    assert warning.severity.value == "warning"
    assert "gpu[1-2]" in warning.message and "gpu3" not in warning.message
    assert "sacct" in warning.message
    assert [k for k in found if k[0] == vid] == [(vid, "node_classes[1].gpus.mig_profiles")]
    assert not [f for f in findings_for(spec_dict("lab")) if f.id == vid]
    assert not [f for f in findings_for(lab_with_mig(monitoring=False)) if f.id == vid]
