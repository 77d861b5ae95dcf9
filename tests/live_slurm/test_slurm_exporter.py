"""Estate's Slurm exporter on real Slurm, on every release: what it computes from squeue,
sinfo and sdiag equals what Slurm is doing (an idle cluster, a GPU job running under its
account and partition, a job pending for Resources), and its exposition parses."""
from __future__ import annotations

import json
import time

import pytest

from estate.render.monitoring import SLURM_EXPORTER_CONFIG
from estate.telemetry import slurm_exporter as exporter
from tests.live_slurm.conftest import ROOT, lab_on_each_release

pytestmark = pytest.mark.live_slurm

lab = lab_on_each_release(ROOT / "stacks/lab.yaml")


def config(lab) -> dict:
    return json.loads(lab.artifacts[f"{SLURM_EXPORTER_CONFIG}ctl1.json"].content)


def scrape(lab) -> dict:
    """The samples, with the Slurm clients run where the exporter runs: the controller."""
    ctl = lab.slurm.controllers[0]
    return exporter.collect(lambda argv: lab.run(ctl, argv).stdout, config(lab)["node_states"])


def wait(lab, what, timeout: float = 60):
    end = time.monotonic() + timeout
    while not (got := what()) and time.monotonic() < end:
        time.sleep(0.5)
    return got


def test_an_idle_cluster(lab):
    got = scrape(lab)
    assert got["slurm_nodes"][("idle", "gpu")] == 2
    assert got["slurm_nodes"][("idle", "urgent")] == 2     # a hidden partition too
    assert got["slurm_nodes"][("down", "gpu")] == 0
    assert got["slurm_gpus_total"] == {("gpu",): 4, ("urgent",): 4}
    assert got["slurm_scheduler_cycle_seconds"][()] >= 0


def test_a_running_gpu_job_and_a_pending_one_under_their_account(lab):
    first = lab.as_user("alice", ["sbatch", "--parsable", "-o", "/dev/null", "-A", "research",
                                  "-p", "gpu", "-N2", "--exclusive", "--gres=gpu:2",
                                  "--wrap", "sleep 60"], check=True).stdout.strip()
    second = lab.as_user("alice", ["sbatch", "--parsable", "-o", "/dev/null", "-A", "research",
                                   "-p", "gpu", "-N1", "--wrap", "true"], check=True).stdout.strip()
    try:
        got = wait(lab, lambda: (s := scrape(lab))["slurm_jobs"].get(
            ("running", "gpu", "research", "alice")) and s["slurm_jobs_pending"] and s)
        assert got, "the job never showed as running"
        assert got["slurm_gpus_allocated"][("gpu", "research")] == 4
        assert (first.split(";")[0], "gpu", "research", "alice") in got["slurm_job_info"]
        assert got["slurm_nodes"][("allocated", "gpu")] == 2
        (reason, part, account), = got["slurm_jobs_pending"]
        assert (part, account) == ("gpu", "research") and reason in ("Resources", "Priority")
        assert 0 <= got["slurm_job_pending_seconds_max"][(reason, "gpu", "research")] < 120
    finally:
        lab.run(lab.client(), ["scancel", first.split(";")[0], second.split(";")[0]])


def test_the_exposition_parses_into_the_contract(lab):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    ctl = lab.slurm.controllers[0]
    registry = CollectorRegistry()
    registry.register(exporter.SlurmCollector(config(lab),
                                              run=lambda argv: lab.run(ctl, argv).stdout))
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(registry).decode())}
    for m in config(lab)["metrics"]:
        assert m["name"] in families
        for sample in families[m["name"]].samples:
            assert set(sample.labels) == set(m["labels"]), (m["name"], sample.labels)


def test_the_prolog_and_epilog_keep_the_dcgm_job_mapping(lab):
    """Estate's Prolog writes the job's ID into one file per GPU it holds (the DCGM
    exporter's HPC job mapping), and its Epilog takes it out again."""
    from estate.model.monitoring import JOB_MAP_DIR
    job = lab.as_user("alice", ["sbatch", "--parsable", "-o", "/dev/null", "-A", "research",
                                "-p", "gpu", "-w", "gpu1", "--gres=gpu:2", "--wrap", "sleep 30"],
                      check=True).stdout.strip().split(";")[0]
    mapped = lab.host_path("gpu1", JOB_MAP_DIR)
    try:
        got = wait(lab, lambda: sorted(p.name for p in mapped.glob("[0-9]*")
                                       if job in p.read_text().split()), 30)
        assert got == ["0", "1"], f"the job's GPUs in {JOB_MAP_DIR}: {got}"
    finally:
        lab.run(lab.client(), ["scancel", job])
    left = wait(lab, lambda: not any(job in p.read_text().split()
                                     for p in mapped.glob("[0-9]*")), 30)
    assert left, f"job {job} is still in {JOB_MAP_DIR} after its end"
