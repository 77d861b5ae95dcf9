"""estate apply follows estate diff's order (issue 31 §1): controllers first (the control
phase before the compute phase, estate.catalogue.PHASES), then the workers a change
restarts in the diff's batches, each keeping a share of every partition up; a first apply
(no tree yet) or a change that restarts no worker runs the workers at once."""
from __future__ import annotations

from estate.catalogue import PHASES
from estate.pipeline import render_to
from estate.provision import apply as apply_mod
from estate.provision.cli import worker_batches
from estate.provision.inventory import Inventory
from tests.unit.test_update_policy import max_time, variant


def more_cores(data):
    next(c for c in data["node_classes"] if c["name"] == "gpu-2x")["cores_per_socket"] = 8


def test_controllers_come_before_the_workers():
    names = [phase for phase, _ in PHASES]
    assert names.index("control") < names.index(apply_mod.BATCHED_PHASE)
    assert dict(PHASES)[apply_mod.BATCHED_PHASE][0] == "slurm_worker"


def test_workers_a_change_restarts_go_in_the_diffs_batches(tmp_path):
    last = tmp_path / "tree"
    render_to(variant(tmp_path, "old", "22.05"), last)
    new = variant(tmp_path, "new", "22.05", more_cores)
    assert worker_batches(new, last, keep_up=0.5) == [["gpu1"], ["gpu2"]]
    assert worker_batches(new, last, keep_up=0.0) == [["gpu1", "gpu2"]]


def test_apply_diffs_the_render_it_writes(tmp_path, monkeypatch):
    """estate apply renders once: the batches from its build are the spec's, and the
    spec is not rendered again for them."""
    import estate.operate.diff.logic as D
    from estate.pipeline import rendered
    last = tmp_path / "tree"
    render_to(variant(tmp_path, "old", "22.05"), last)
    new = variant(tmp_path, "new", "22.05", more_cores)
    result = rendered(new)
    monkeypatch.setattr(D, "new_side_split", lambda spec: (_ for _ in ()).throw(
        AssertionError("the spec was rendered again")))
    assert worker_batches(new, last, 0.5, result) == [["gpu1"], ["gpu2"]]


def test_no_batches_without_a_last_tree_or_a_worker_restart(tmp_path):
    assert worker_batches(variant(tmp_path, "old", "22.05"), tmp_path / "none", 0.5) is None
    last = tmp_path / "tree"
    render_to(variant(tmp_path, "old", "22.05"), last)
    assert worker_batches(variant(tmp_path, "new", "22.05", max_time), last, 0.5) == []


def test_the_compute_phase_runs_batch_after_batch(monkeypatch):
    """Which hosts each phase run gets, in what order. _run_phase (pyinfra on the nodes)
    is replaced by a recorder: this is the order alone; the lab tier's applies run the
    roles for real."""
    ran = []
    monkeypatch.setattr(apply_mod, "_run_phase",
                        lambda phase, inv, deploys, results, errors, parallel, timings:
                        ran.append((phase, [n for n, _ in inv.hosts])))
    hosts = [(n, {"estate_deploys": ["slurm_worker"]}) for n in ("gpu1", "gpu2", "gpu3")]
    hosts.append(("ctl1", {"estate_deploys": ["slurm_controller"]}))
    result = apply_mod.apply(Inventory(hosts, {}), log=lambda m: None,
                             batches=[["gpu1"], ["gpu2"]])
    assert ran == [("control", ["ctl1"]), ("compute", ["gpu1", "gpu3"]),
                   ("compute", ["gpu2"])]
    assert result.ok
    ran.clear()
    apply_mod.apply(Inventory(hosts, {}), log=lambda m: None)
    assert ran == [("control", ["ctl1"]), ("compute", ["gpu1", "gpu2", "gpu3"])]
