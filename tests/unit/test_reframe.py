"""ReFrame's site configuration and Estate's checks (estate.render.reframe,
estate/acceptance/estate_checks.py, estate.verify.reframe), without Slurm: the rendered
configuration loads in ReFrame's own loader, and the quick checks run under real ReFrame
against Slurm clients that answer as the lab's did (tests/data/reframe_shims): they pass,
and a check broken on purpose fails the suite."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from estate.model import reframe as model
from estate.pipeline import build
from estate.render.reframe import CHECKS_SOURCE, render_reframe, site_configuration
from estate.render.templates import RenderError
from estate.verify import reframe as runner

ROOT = Path(__file__).resolve().parents[2]
SHIMS = ROOT / "tests" / "data" / "reframe_shims" / "slurm.py"
CLIENTS = ("sbatch", "salloc", "srun", "sacct", "sacctmgr", "scontrol")
QUICK = {"BatchStepsOnTwoNodes", "JobArray", "OneGpuPerStep", "InteractiveSalloc",
         "AccountingRecordsTheJob"}


@pytest.fixture(scope="module", params=["lab", "example-prod"])
def rendered(request, tmp_path_factory):
    result = build(ROOT / "stacks" / f"{request.param}.yaml")
    assert result.ok
    out = tmp_path_factory.mktemp(request.param)
    for art in render_reframe(result.estate, f"stacks/{request.param}.yaml"):
        (out / Path(art.path).name).write_bytes(art.content)
    return result.estate, out


def test_reframe_loads_and_validates_the_configuration(rendered):
    import reframe.core.config as config
    estate, out = rendered
    site = config.load_config(str(out / "settings.py"))
    site.validate()
    system = estate.spec.slurm.cluster_name.replace(".", "_")
    for p in estate.spec.slurm.partitions:
        site.select_subconfig(f"{system}:{p.name.replace('.', '_')}")
        assert site.get("systems/0/partitions/0/access") == [f"-p {p.name}"]
        assert site.get("systems/0/partitions/0/launcher") == "srun"
        assert site.get("systems/0/partitions/0/scheduler") == \
            ("slurm" if estate.spec.slurm.accounting else "squeue")
    site.select_subconfig(f"{system}:login")
    assert site.get("systems/0/partitions/0/scheduler") == "local"


def test_the_partitions_carry_their_gpus_and_nodes(rendered):
    estate, _ = rendered
    parts = {p["name"]: p for p in site_configuration(estate)["systems"][0]["partitions"]}
    if estate.spec.name == "lab":
        assert parts["gpu"]["extras"]["gpus_per_node"] == 2
        assert parts["gpu"]["devices"] == [{"type": "gpu", "num_devices": 2}]
        assert parts["gpu"]["extras"]["nodes"] == 2
        assert "bridge" in parts
        envs = {e["name"] for e in site_configuration(estate)["environments"]}
        assert envs == {"builtin", "openmpi"}
    login = parts["login"]["extras"]["slurm_partitions"]
    assert [p["slurm_partition"] for p in login] == [p.name for p in estate.spec.slurm.partitions]


def test_a_name_reframe_refuses_is_a_render_error():
    from estate.render.reframe import reframe_name
    assert reframe_name("a100.big", "x") == "a100_big"
    with pytest.raises(RenderError):
        reframe_name("bad\nname", "x")


def test_the_checks_ship_as_they_are(rendered):
    _, out = rendered
    assert (out / "estate_checks.py").read_bytes() == CHECKS_SOURCE.read_bytes()


def test_the_pinned_version_is_the_test_extras():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["test"]
    assert f"reframe-hpc=={model.VERSION}" in extra


def test_outcomes_read_the_last_run_of_a_report():
    report = {"runs": [{"testcases": [{"name": "A", "result": "fail", "fail_reason": "x"}]},
                       {"testcases": [{"name": "A", "result": "pass", "fail_reason": None},
                                      {"name": "B", "result": "skip",
                                       "fail_reason": "no GPUs"}]}]}
    assert runner.outcomes(report) == [runner.Outcome("A", "pass"),
                                       runner.Outcome("B", "skip", "no GPUs")]
    assert "LEFT  tag shared-fs" in runner.summary([], ("shared-fs",))


def test_the_command_passes_no_token_and_quotes_its_values():
    cmd = runner.command("lab:login", ("quick",), "/tmp/p", "/tmp/p/r.json",
                         broken=("JobArray",), names=("JobArray",))
    assert cmd.startswith("ESTATE_REFRAME_BROKEN=JobArray /opt/estate/reframe/bin/reframe")
    assert "--tag quick" in cmd and "'^(JobArray)$'" in cmd


def _quick(out: Path, tmp: Path, broken: str = "") -> dict[str, str]:
    """The quick checks under real ReFrame, the Slurm clients shimmed; check -> result."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in CLIENTS:
        if not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(SHIMS)
    steps = tmp / "steps"
    steps.mkdir(exist_ok=True)
    for f in steps.iterdir():
        f.unlink()
    report = tmp / "report.json"
    argv = [str(Path(sys.executable).parent / "reframe"), "-C", str(out / "settings.py"),
            "-c", str(out / "estate_checks.py"), "--system", "lab:login", "-r",
            "--tag", "quick", "--prefix", str(tmp / "rfm"), "--report-file", str(report),
            "--nocolor"]
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SHIM_STEPS=str(steps),
               ESTATE_REFRAME_BROKEN=broken, HOME=str(tmp), RFM_TIMESTAMP_DIRS="")
    proc = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=120)
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return {o.check: o.result for o in runner.outcomes(json.loads(report.read_text()))}


@pytest.fixture(scope="module")
def lab_rendered(tmp_path_factory):
    result = build(ROOT / "stacks" / "lab.yaml")
    out = tmp_path_factory.mktemp("lab-reframe")
    for art in render_reframe(result.estate, "stacks/lab.yaml"):
        (out / Path(art.path).name).write_bytes(art.content)
    return out


def test_the_quick_checks_pass_on_the_labs_answers(lab_rendered, tmp_path):
    assert _quick(lab_rendered, tmp_path) == dict.fromkeys(QUICK, "pass")


def test_a_check_broken_on_purpose_fails_the_suite(lab_rendered, tmp_path):
    found = _quick(lab_rendered, tmp_path, broken="InteractiveSalloc,AccountingRecordsTheJob")
    assert found == {**dict.fromkeys(QUICK, "pass"), "InteractiveSalloc": "fail",
                     "AccountingRecordsTheJob": "fail"}


def test_the_shared_stage_is_on_a_mount_every_worker_has():
    estate = build(ROOT / "stacks" / "lab.yaml").estate
    assert runner.shared_stage(estate, "login1", "alice") == "/home/shared/alice/reframe"
    assert runner.shared_stage(estate, "ctl1", "alice") is None   # mounts nothing
