"""The site's node hooks: scripts next to the spec, read with it, installed byte for byte
on every worker, named in slurm.conf; a missing or escaping file is an error at its path."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from estate.pipeline import build
from estate.model.destinations import destination, installer
from tests.unit.checkutil import spec_dict

SCRIPT = b"#!/bin/sh\nlogger -t prolog \"job $SLURM_JOB_ID\"\n"


def _spec(tmp_path: Path, hooks: dict) -> Path:
    data = spec_dict("lab")
    data["slurm"]["hooks"] = hooks
    path = tmp_path / "site" / "spec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _ids(result) -> dict[str, str]:
    return {f.path: f.id for f in result.findings}


def test_hooks_are_installed_on_workers_and_named_in_slurm_conf(tmp_path):
    spec = _spec(tmp_path, {"prolog": "hooks/prolog.sh", "prolog_flags": ["Alloc", "Serial"],
                            "health_check": {"program": "hooks/nhc", "interval": 60,
                                             "node_state": ["IDLE", "MIXED"]},
                            "reboot_program": "/usr/sbin/reboot"})
    (spec.parent / "hooks").mkdir()
    (spec.parent / "hooks/prolog.sh").write_bytes(SCRIPT)
    (spec.parent / "hooks/nhc").write_bytes(b"#!/bin/sh\nexit 0\n")
    result = build(spec)
    assert result.ok, result.findings
    prolog = result.artifacts["slurm/hooks/prolog"]
    assert (prolog.content, prolog.mode, str(prolog.consumers)) == (SCRIPT, 0o755, "gpu[1-2]")
    assert destination(prolog.path) == "/etc/slurm/hooks/prolog"
    assert installer(prolog.path, ["common", "slurm_worker"]) == "slurm_worker"
    conf = result.artifacts["slurm/slurm.conf"].content.decode().splitlines()
    # the lab monitors GPU workers: Estate's prolog keeps the DCGM job mapping, then execs
    # the site's (estate.render.slurm.JOB_MAP_HOOKS)
    ours = result.artifacts["slurm/hooks/estate-prolog"]
    assert ours.content.decode().rstrip().endswith("exec /etc/slurm/hooks/prolog")
    assert (ours.mode, str(ours.consumers)) == (0o755, "gpu[1-2]")
    assert "Epilog=/etc/slurm/hooks/estate-epilog" in conf
    for line in ("Prolog=/etc/slurm/hooks/estate-prolog", "PrologFlags=Alloc,Serial",
                 "HealthCheckProgram=/etc/slurm/hooks/healthcheck", "HealthCheckInterval=60",
                 "HealthCheckNodeState=IDLE,MIXED", "RebootProgram=/usr/sbin/reboot"):
        assert line in conf
    assert "exec" not in result.artifacts["slurm/hooks/estate-epilog"].content.decode()


def test_a_missing_hook_file_is_an_error_at_its_path(tmp_path):
    result = build(_spec(tmp_path, {"epilog": "hooks/epilog.sh"}))
    assert _ids(result).get("slurm.hooks.epilog") == "spec.companion_file"
    assert not result.ok and result.artifacts is None


def test_a_hook_outside_the_specs_directory_is_refused(tmp_path):
    outside = tmp_path / "secret"
    outside.write_bytes(b"root:x:0:0\n")
    spec = _spec(tmp_path, {"prolog": "link"})
    os.symlink(outside, spec.parent / "link")
    assert _ids(build(spec)).get("slurm.hooks.prolog") == "spec.companion_file"
    spec = _spec(tmp_path, {"prolog": "../secret"})
    assert _ids(build(spec)).get("slurm.hooks.prolog") is not None   # the type refuses '..'
    spec = _spec(tmp_path, {"prolog": "/etc/shadow"})
    assert _ids(build(spec)).get("slurm.hooks.prolog") is not None


def test_a_directory_is_not_a_hook(tmp_path):
    spec = _spec(tmp_path, {"prolog": "hooks"})
    (spec.parent / "hooks").mkdir()
    assert _ids(build(spec)).get("slurm.hooks.prolog") == "spec.companion_file"
    shutil.rmtree(spec.parent / "hooks")


# --- shared controller state (HA) ----------------------------------------------------

def test_ha_state_is_mounted_before_slurmctld(tmp_path):
    from estate.catalogue import PHASES, phases
    from estate.provision.inventory import runtime_facts
    result = build(Path(__file__).resolve().parents[2] / "stacks/example-prod.yaml")
    assert result.ok, result.findings
    dropin = result.artifacts["slurm/systemd/slurmctld-state.conf"]
    assert str(dropin.consumers) == "ctl[1-2]"
    assert "RequiresMountsFor=/var/spool/slurmctld\n" in dropin.content.decode()
    assert destination(dropin.path) == \
        "/etc/systemd/system/slurmctld.service.d/estate-state.conf"
    assert installer(dropin.path, ["slurm_controller"]) == "slurm_controller"
    assert runtime_facts(result.estate)["slurm_state_mount"] == "/var/spool/slurmctld"
    # estate apply mounts the state before the controllers start; otherwise storage is last
    assert [p for p, _ in phases(True)][:2] == ["storage", "storage_mounts"]
    assert phases(False) == PHASES and PHASES[-1][0] == "storage_mounts"
    exports = result.artifacts["storage/exports/nfs1.exports"].content.decode()
    line = next(l for l in exports.splitlines() if l.startswith("/export/slurmctld "))
    assert line.split()[1:] == ["10.40.0.11(rw,sync,no_subtree_check,no_root_squash)",
                                "10.40.0.12(rw,sync,no_subtree_check,no_root_squash)"]


def test_one_controller_needs_no_shared_state():
    from estate.provision.inventory import runtime_facts
    result = build(Path(__file__).resolve().parents[2] / "stacks/lab.yaml")
    assert "slurm/systemd/slurmctld-state.conf" not in result.artifacts
    assert "slurm_state_mount" not in runtime_facts(result.estate)


# --- power saving --------------------------------------------------------------------

def test_cloud_nodes_are_powered_by_the_sites_programs_on_the_controllers(tmp_path):
    data = spec_dict("lab")
    data["nodes"][2]["slurm"]["state"] = "cloud"
    data["slurm"]["power_saving"] = {"resume_program": "power/up", "suspend_program":
                                     "power/down", "suspend_time": 900}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "power").mkdir()
    (tmp_path / "power/up").write_bytes(b"#!/bin/sh\nipmitool power on\n")
    (tmp_path / "power/down").write_bytes(b"#!/bin/sh\nipmitool power off\n")
    result = build(spec)
    assert result.ok, result.findings
    up = result.artifacts["slurm/ctld-hooks/resume"]
    assert (str(up.consumers), up.mode, destination(up.path)) == \
        ("ctl1", 0o755, "/etc/slurm/hooks/resume")
    assert installer(up.path, ["slurm_controller"]) == "slurm_controller"
    conf = result.artifacts["slurm/slurm.conf"].content.decode().splitlines()
    for line in ("ResumeProgram=/etc/slurm/hooks/resume", "SuspendProgram=/etc/slurm/hooks/suspend",
                 "SuspendTime=900",
                 # merged with the shared estate's privacy, once (22.05 reads cloud)
                 "PrivateData=accounts,jobs,usage,users,cloud"):
        assert line in conf
    assert not [l for l in conf if l.startswith("SuspendExcNodes=")]   # every worker is cloud
    node = next(l for l in conf if l.startswith("NodeName=gpu[1-2] "))
    assert node.endswith(" State=CLOUD")
    (tmp_path / "power/down").unlink()
    assert _ids(build(spec)).get("slurm.power_saving.suspend_program") == "spec.companion_file"


def test_reported_states_against_the_declared_ones():
    from estate.verify.slurm_view import as_declared
    assert as_declared("CLOUD", "IDLE+CLOUD+POWERED_DOWN")
    assert as_declared("CLOUD", "ALLOCATED+CLOUD+POWERING_UP")
    assert as_declared("CLOUD", "IDLE")
    assert not as_declared("CLOUD", "DOWN+CLOUD+POWERED_DOWN")
    assert not as_declared("UNKNOWN", "IDLE+CLOUD+POWERED_DOWN")
    assert as_declared("FUTURE", "FUTURE") and not as_declared("FUTURE", "IDLE")
