"""The Slurm exporter's contract: it computes exactly the metrics and labels of
estate.model.monitoring.SLURM_METRICS, from the configuration Estate renders, and refuses
one it does not know. What it reads from real Slurm: tests/live_slurm/test_slurm_exporter.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from estate.model.monitoring import SLURM_METRICS
from estate.pipeline import build
from estate.render.monitoring import SLURM_EXPORTER, SLURM_EXPORTER_CONFIG, SLURM_EXPORTER_SOURCE
from estate.telemetry import slurm_exporter as exporter

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab():
    result = build(ROOT / "stacks/lab.yaml")
    assert result.ok
    return result


def test_the_exporter_computes_the_contract():
    assert exporter.KNOWN == {m.name: m.labels for m in SLURM_METRICS}


def test_the_rendered_configuration_is_the_contract_and_the_flow(lab):
    arts = lab.artifacts
    assert arts[SLURM_EXPORTER].content == SLURM_EXPORTER_SOURCE.read_bytes()
    config = json.loads(arts[f"{SLURM_EXPORTER_CONFIG}ctl1.json"].content)
    assert [m["name"] for m in config["metrics"]] == [m.name for m in SLURM_METRICS]
    # where the scrape config looks for it: ctl1's management address, the flow's port
    prom = arts["monitoring/prometheus.yml"].content.decode()
    assert config["listen"] in prom and config["listen"].startswith("10.60.0.11:")
    exporter.SlurmCollector(config)     # accepts what Estate renders


def test_a_metric_or_label_it_does_not_compute_is_refused(lab):
    config = json.loads(lab.artifacts[f"{SLURM_EXPORTER_CONFIG}ctl1.json"].content)
    for bad in ({"name": "slurm_jobs_total", "labels": ["state"]},
                {"name": "slurm_jobs", "labels": ["state", "partition", "account"]}):
        broken = dict(config, metrics=config["metrics"] + [dict(bad, kind="gauge", help="")])
        with pytest.raises(SystemExit, match=bad["name"]):
            exporter.SlurmCollector(broken)


def test_each_release_s_json_reads_alike():
    """22.05 writes states and times as plain values, 24.11 as lists and {set, number}."""
    old = {"job_state": "RUNNING", "partition": "gpu", "account": "ops", "submit_time": 100,
           "user_name": "bob", "job_id": 7, "tres_alloc_str": "cpu=8,gres/gpu:a100=2,gres/gpu=2"}
    new = dict(old, job_state=["RUNNING"], submit_time={"set": True, "number": 100})
    pend = dict(old, job_state=["PENDING"], state_reason="Resources", tres_alloc_str="",
                submit_time={"set": True, "number": 40})
    for jobs in ([old], [new]):
        got = exporter.jobs(json.dumps({"jobs": jobs + [pend]}), now=100)
        assert got["slurm_jobs"] == {("running", "gpu", "ops", "bob"): 1,
                                     ("pending", "gpu", "ops", "bob"): 1}
        assert got["slurm_gpus_allocated"] == {("gpu", "ops"): 2}   # typed entry not twice
        assert got["slurm_job_info"] == {("7", "gpu", "ops", "bob"): 1}   # running only
        assert got["slurm_job_pending_seconds_max"] == {("Resources", "gpu", "ops"): 60}


def test_nodes_count_every_state_and_strip_sinfo_marks():
    text = "gpu1|gpu*|idle~|gpu:a100:2(S:0)\ngpu2|gpu*|down*|gpu:a100:2,gpu:l4:1\n"
    got = exporter.nodes(text, ["idle", "down", "mixed"])
    assert got["slurm_nodes"] == {("idle", "gpu"): 1, ("down", "gpu"): 1, ("mixed", "gpu"): 0}
    assert got["slurm_gpus_total"] == {("gpu",): 5}
    # each node in each partition it is in: the storage alert's join to the queues
    assert got["slurm_node_partition"] == {("gpu1", "gpu"): 1, ("gpu2", "gpu"): 1}


def _clients(fail: str | None):
    import subprocess

    def run(argv):
        if argv[0] == fail:
            raise subprocess.CalledProcessError(1, argv, "", "slurm_load_jobs error: Unable "
                                                "to contact slurm controller")
        return {"squeue": '{"jobs": []}', "sinfo": "gpu1|gpu*|idle|(null)\n",
                "sdiag": ""}[argv[0]]
    return run


@pytest.mark.parametrize("fail", ["squeue", "sinfo", "sdiag"])
def test_a_slurm_it_cannot_read_is_slurm_up_0_and_no_stale_series(fail, capsys):
    """The exporter keeps answering (its target stays up) and says it cannot read Slurm:
    SlurmExporterFailing, not ScrapeTargetDown, and no queue it did not see."""
    got = exporter.collect(_clients(fail), ["idle"], now=0)
    assert got == {"slurm_up": {(): 0}}
    assert "cannot read Slurm" in capsys.readouterr().err


def test_a_slurm_it_reads_is_slurm_up_1():
    got = exporter.collect(_clients(None), ["idle"], now=0)
    assert got["slurm_up"] == {(): 1} and got["slurm_nodes"] == {("idle", "gpu"): 1}


def test_the_collector_serves_slurm_up_0_when_slurm_fails(lab):
    """Through prometheus_client, as Prometheus scrapes it: one sample, slurm_up 0."""
    prometheus_client = pytest.importorskip("prometheus_client")
    config = json.loads(lab.artifacts[f"{SLURM_EXPORTER_CONFIG}ctl1.json"].content)
    registry = prometheus_client.CollectorRegistry()
    registry.register(exporter.SlurmCollector(config, run=_clients("squeue")))
    text = prometheus_client.generate_latest(registry).decode()
    assert "\nslurm_up 0.0\n" in text
    assert not [line for line in text.splitlines()
                if line and not line.startswith(("#", "slurm_up "))]
