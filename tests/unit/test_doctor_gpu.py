"""estate doctor's NVIDIA driver precondition on GPU nodes, through a fake runner: loaded or
not, old or new enough, GPUs the driver sees against the spec, and the lab's emulated GPUs
reported as such (not failed, not silently skipped)."""
from __future__ import annotations

import pytest
import yaml

from estate.doctor import ERROR, WARNING, Proc, doctor_nodes
from estate.model import nvidia
from estate.pipeline import build
from tests.unit.test_doctor import LAB, FakeRunner, every_package, plugin_files, spec_variant

PROC_TEXT = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Tue Jul  1 00:00:00 UTC "
             "2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
OPEN_TEXT = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  "
             "(dvs-builder@U16-I3-B03-4-3)  Thu Aug 29 00:00:00 UTC 2024\n")


class GpuRunner(FakeRunner):
    """A node whose driver answers (or not) through /proc and nvidia-smi."""

    def __init__(self, estate, proc=None, smi=None, smi_rc=0, smi_err=""):
        files = plugin_files(estate)
        if proc is not None:
            files[nvidia.VERSION_FILE] = proc
        super().__init__(every_package(), files=files)
        self.smi, self.smi_rc, self.smi_err = smi, smi_rc, smi_err

    def run(self, argv):
        if argv[0] == "nvidia-smi":
            self.calls.append(argv)
            return Proc(self.smi_rc, self.smi or "", self.smi_err)
        return super().run(argv)


@pytest.fixture(scope="module")
def lab():
    result = build(LAB)
    assert result.ok
    return result


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The lab with its GPUs declared real: gpu[1-2] have 2 (class gpu-2x), k8s2 has 1."""
    def unmark(d):
        for c in d["node_classes"]:
            if c.get("gpus"):
                c["gpus"]["emulated"] = False
    result = build(spec_variant(tmp_path_factory.mktemp("real"), unmark))
    assert result.ok
    return result


def driver_checks(result, runner, limit):
    return [c for c in doctor_nodes(result.estate, result.artifacts, lambda need: runner,
                                    limit=limit) if c.id.startswith("doctor.gpu")]


def test_lab_gpus_are_reported_as_emulated_and_gpu_less_nodes_are_not_asked(lab):
    runner = GpuRunner(lab.estate, smi_rc=127, smi_err="nvidia-smi: not found")
    checks = doctor_nodes(lab.estate, lab.artifacts, lambda need: runner)
    gpu = [c for c in checks if c.id == "doctor.gpu_driver"]
    assert sorted(c.target for c in gpu) == ["gpu1", "gpu2", "k8s2"]
    assert all(c.ok and "marked emulated in node_classes[" in c.message for c in gpu)
    assert not [c for c in runner.calls if c[0] == "nvidia-smi"]   # not even probed


def test_no_driver_fails_naming_the_host_and_the_fix(real):
    runner = GpuRunner(real.estate, smi_rc=127, smi_err="sh: 1: nvidia-smi: not found")
    [check] = driver_checks(real, runner, "gpu1")
    assert (check.status, check.severity, check.target) == ("FAIL", ERROR, "gpu1")
    assert check.message.startswith("gpu1 declares 2 GPU(s)")
    assert "no NVIDIA driver is loaded" in check.message and "nvidia-smi: not found" in \
        check.message
    assert "nvidia-driver" in check.fix and ">= 535" in check.fix


def test_an_old_driver_fails(real):
    runner = GpuRunner(real.estate, proc=PROC_TEXT.format(v="525.147.05"),
                       smi="525.147.05\n525.147.05\n")
    [check] = driver_checks(real, runner, "gpu1")
    assert check.status == "FAIL" and "525.147.05" in check.message
    assert "older than the minimum 535" in check.message


@pytest.mark.parametrize("proc", [PROC_TEXT, OPEN_TEXT])
def test_a_new_enough_driver_passes(real, proc):
    runner = GpuRunner(real.estate, proc=proc.format(v="535.261.03"),
                       smi="535.261.03\n535.261.03\n")
    [check] = driver_checks(real, runner, "gpu1")
    assert check.ok and check.message == "gpu1: NVIDIA driver 535.261.03 loaded"


def test_nvidia_smi_answers_where_proc_does_not(real):
    runner = GpuRunner(real.estate, smi="550.54.15\n")
    [check] = driver_checks(real, runner, "k8s2")
    assert check.ok and "550.54.15" in check.message


def test_fewer_gpus_than_declared_is_a_warning(real):
    runner = GpuRunner(real.estate, proc=PROC_TEXT.format(v="535.261.03"), smi="535.261.03\n")
    checks = driver_checks(real, runner, "gpu2")
    assert [(c.id, c.status) for c in checks] == [("doctor.gpu_driver", "ok"),
                                                  ("doctor.gpu_count", "warn")]
    assert checks[1].severity == WARNING and "sees 1 GPU(s)" in checks[1].message


def test_version_parsers():
    assert nvidia.proc_version(PROC_TEXT.format(v="535.261.03")) == "535.261.03"
    assert nvidia.proc_version(OPEN_TEXT.format(v="560.35.03")) == "560.35.03"
    assert nvidia.proc_version("") is None and nvidia.proc_version(None) is None
    assert nvidia.smi_versions("535.261.03\n\nNo devices were found\n") == ["535.261.03"]
    assert nvidia.new_enough("535.43.02") and not nvidia.new_enough("470.256.02")


def test_emulated_is_the_labs_explicit_mark():
    data = yaml.safe_load(LAB.read_text())
    marked = [c["name"] for c in data["node_classes"] if (c.get("gpus") or {}).get("emulated")]
    with_gpus = [c["name"] for c in data["node_classes"] if c.get("gpus")]
    assert marked == with_gpus and marked
    prod = yaml.safe_load((LAB.parent / "example-prod.yaml").read_text())
    assert not [c for c in prod["node_classes"] if (c.get("gpus") or {}).get("emulated")]


def test_typhas_port_must_be_free_on_kubernetes_nodes(lab):
    """5473 (calico-typha, 0x1561) taken by another process fails; by Typha itself passes."""
    tcp = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
           "timeout inode\n   0: 00000000:1561 00000000:0000 0A 00000000:00000000 00:00000000 "
           "00000000  0 0 1\n")
    for owner, status in (("nginx", "FAIL"), ("calico-typha", "ok")):
        runner = GpuRunner(lab.estate)
        runner.files["/proc/net/tcp"] = tcp
        base = runner.run

        def run(argv, base=base, owner=owner):
            if argv[0] == "ss":
                return Proc(0, f'LISTEN 0 4096 *:5473 *:* users:(("{owner}",pid=1,fd=3))\n')
            return base(argv)
        runner.run = run
        checks = doctor_nodes(lab.estate, lab.artifacts, lambda need: runner, limit="k8s2")
        port = [c for c in checks if c.id == "doctor.port" and "5473" in c.message]
        assert [c.status for c in port] == [status], [c.message for c in port]
