"""`estate handoff` without a cluster: the overlay the loader merges (estate.spec.
handoff_overlay), the refusals before anything changes, and the step logic (estate.operate.handoff.logic).

The steps' logic (deadline policies, resuming) is driven here by a scripted SlurmSide that
answers as scontrol and squeue print: it proves the handoff's decisions, not Slurm's
behaviour, which tests/live_slurm/test_handoff.py proves on real slurmctld and slurmd."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from estate.capacity import gpu_budget
from estate.cli import app
from estate.operate.handoff.logic import Options, handoff, proposed_overlay, read_overlay, write_overlay
from estate.operate.handoff.cli import parse_duration
from estate.pipeline import build
from estate.spec import handoff_overlay as ov
from estate.spec.load import load
from tests.unit.checkutil import ROOT

LIVE = ROOT / "tests" / "live_slurm" / "handoff.yaml"
LAB = ROOT / "stacks" / "lab.yaml"


@pytest.fixture
def spec(tmp_path) -> Path:
    out = tmp_path / "handoff.yaml"
    shutil.copy(LIVE, out)
    return out


def four_workers(tmp_path: Path) -> Path:
    """The live spec with gpu[1-4] (a group split in its middle) and a switch naming them."""
    data = yaml.safe_load(LIVE.read_text())
    data["nodes"][1]["hosts"] = "gpu[1-4]"
    data["slurm"]["partitions"][0]["nodes"] = "gpu[1-4]"
    data["slurm"]["partitions"].append({"name": "two", "nodes": "gpu2"})
    data["topology"] = {"switches": [{"name": "leaf1", "nodes": "gpu[1-4],ctl1"}]}
    out = tmp_path / "four.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def lend(spec: Path, **nodes) -> None:
    write_overlay(spec, ov.Overlay(nodes={h: ov.Lent(**e) for h, e in nodes.items()}))


def addresses(estate) -> dict:
    return {(n, s.name): estate.address(n, s.name) for n in estate.nodes
            for s in estate.spec.segments}


# --- the overlay -------------------------------------------------------------------------

def test_without_an_overlay_the_spec_loads_as_written(spec):
    assert not ov.path_for(spec).exists()
    loaded = load(spec)
    assert loaded.findings == [] and loaded.spec.nodes[1].hosts == "gpu[1-2]"


def test_a_lent_worker_moves_plane_roles_partitions_and_quota(spec):
    before = build(spec).estate
    lend(spec, gpu2={"plane": "kubernetes", "tenant": "serve"})
    result = build(spec)
    assert result.ok, [f for f in result.findings if f.severity.value == "error"]
    est = result.estate
    assert est.group_of("gpu2").plane == "kubernetes"
    assert est.group_of("gpu2").roles == ["k8s_worker"]
    assert est.group_of("gpu1").plane == "slurm"
    assert est.spec.slurm.partitions[0].nodes == "gpu1"
    assert est.spec.kubernetes.tenants[0].gpus == {"a100": 2}
    assert addresses(est) == addresses(before)       # no node changes address
    budget = gpu_budget(est).as_dict()
    assert budget["planes"] == {"slurm": 2, "kubernetes": 2}
    assert budget["kubernetes_unassigned"] == {"a100": 0}
    note = [f for f in result.findings if f.id == "spec.handoff_overlay"]
    assert len(note) == 1 and note[0].severity.value == "info" and "gpu2" in note[0].message


def test_a_group_split_in_its_middle_keeps_every_address_and_hostlist(tmp_path):
    four = four_workers(tmp_path)
    before = build(four).estate
    lend(four, gpu2={"plane": "kubernetes", "tenant": "serve"},
         gpu3={"plane": "kubernetes", "tenant": "serve"})
    est = build(four).estate
    hosts = [g.hosts for g in est.spec.nodes]
    assert hosts == ["ctl1", "gpu1", "gpu[2-3]", "gpu4", "k8s1"]
    assert addresses(est) == addresses(before)
    assert est.spec.slurm.partitions[0].nodes == "gpu[1,4]"
    assert est.spec.slurm.partitions[1].nodes is None     # its only node left
    assert est.spec.topology.switches[0].nodes == "gpu[1,4],ctl1"


def test_findings_in_later_groups_keep_their_line(tmp_path):
    four = four_workers(tmp_path)
    data = yaml.safe_load(four.read_text())
    data["nodes"][2]["class"] = "no-such-class"          # k8s1, after the split group
    four.write_text(yaml.safe_dump(data, sort_keys=False))
    plain = {f.id: f.location for f in build(four).findings}
    lend(four, gpu2={"plane": "kubernetes", "tenant": "serve"})
    merged = {f.id: f.location for f in build(four).findings}
    unknown = [i for i in plain if "class" in i]
    assert unknown and all(merged[i] == plain[i] for i in unknown)


def test_handing_back_removes_the_entry_and_an_empty_overlay(spec):
    lend(spec, gpu2={"plane": "kubernetes", "tenant": "serve"})
    assert ov.path_for(spec).exists()
    new = proposed_overlay(spec, ["gpu2"], "slurm", Options())
    assert new.nodes == {}
    write_overlay(spec, new)
    assert not ov.path_for(spec).exists()


@pytest.mark.parametrize("text,where", [
    ("nodes: {gpu2: {plane: kubernetes, colour: red}}\n", "nodes.gpu2.colour"),
    ("nodes: {gpu2: {plane: mars}}\n", "nodes.gpu2.plane"),
    ("nodes: [oops\n", "<root>"),
])
def test_a_broken_overlay_stops_the_spec_with_its_file(spec, text, where):
    ov.path_for(spec).write_text(text)
    loaded = load(spec)
    assert loaded.spec is None
    assert any(f.path == where and str(ov.path_for(spec)) in f.location
               for f in loaded.findings), loaded.findings


def test_an_overlay_entry_for_a_controller_is_an_error(spec):
    ov.path_for(spec).write_text("nodes: {ctl1: {plane: kubernetes}}\n")
    loaded = load(spec)
    assert loaded.spec is None
    assert any(f.id == "spec.handoff_overlay" and "only a node whose one role" in f.message
               for f in loaded.findings)


def test_a_proposed_overlay_is_seen_only_inside_its_block(spec):
    new = ov.Overlay(nodes={"gpu2": ov.Lent(plane="kubernetes", tenant="serve")})
    with ov.proposed(spec, new):
        assert build(spec).estate.group_of("gpu2").plane == "kubernetes"
    assert build(spec).estate.group_of("gpu2").plane == "slurm"
    assert not ov.path_for(spec).exists()


def test_lent_to_slurm_joins_the_named_partitions_and_leaves_the_quota(tmp_path):
    data = yaml.safe_load(LIVE.read_text())
    data["nodes"].append({"hosts": "kgpu1", "class": "gpu-2x", "plane": "kubernetes",
                          "roles": ["k8s_worker"], "rack": "r1",
                          "addresses": {"management": "auto", "service": "auto"}})
    data["kubernetes"]["tenants"][0]["gpus"] = {"a100": 2}
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert build(path).ok
    lend(path, kgpu1={"plane": "slurm", "partitions": ["gpu"], "tenant": "serve"})
    result = build(path)
    assert result.ok, [f for f in result.findings if f.severity.value == "error"]
    est = result.estate
    assert est.group_of("kgpu1").roles == ["slurm_worker"]
    assert est.spec.slurm.partitions[0].nodes == "gpu[1-2],kgpu1"
    assert est.spec.kubernetes.tenants[0].gpus == {}


# --- refusals: nothing changes --------------------------------------------------------------

class Untouchable:
    """A plane the handoff must not reach: any use fails the test."""
    where = "nowhere"

    def __getattr__(self, name):
        raise AssertionError(f"the handoff reached a plane ({name}) though it was refused")


def refused(result) -> str:
    assert not result.ok and result.steps[-1].status == "refused", result.as_dict()
    return result.steps[-1].detail


def test_refused_when_the_quotas_would_not_add_up(spec):
    why = refused(handoff(spec, ["gpu2"], "kubernetes", Untouchable(), Untouchable()))
    assert "boundaries.tenant_gpus_unassigned" in why and "--tenant" in why
    assert not ov.path_for(spec).exists()


def test_refused_for_a_node_that_is_not_a_worker(spec):
    why = refused(handoff(spec, ["ctl1"], "kubernetes", Untouchable(), Untouchable()))
    assert "slurm_controller" in why


def test_refused_for_an_unknown_node_and_plane(spec):
    assert "not a node" in refused(handoff(spec, ["gpu9"], "kubernetes", Untouchable(),
                                           Untouchable()))
    assert "--to must be" in refused(handoff(spec, ["gpu2"], "mars", Untouchable(),
                                             Untouchable()))


def test_refused_when_the_spec_lacks_an_api_address(tmp_path):
    data = yaml.safe_load(LIVE.read_text())
    data["nodes"][1]["addresses"] = {"management": "auto"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    why = refused(handoff(path, ["gpu2"], "kubernetes", Untouchable(), Untouchable(),
                          Options(tenant="serve")))
    assert "kubernetes.api_address" in why


def test_a_dry_run_checks_and_lists_the_steps_without_reaching_a_plane(spec):
    result = handoff(spec, ["gpu2"], "kubernetes", Untouchable(), Untouchable(),
                     Options(tenant="serve", dry_run=True))
    assert result.ok and {s.status for s in result.steps[1:]} == {"planned"}
    assert result.before["planes"]["slurm"] == 4 and result.after["planes"]["slurm"] == 2
    assert not ov.path_for(spec).exists()


# --- the steps, against a scripted Slurm ------------------------------------------------------

class Done:
    def __init__(self, rc=0, out="", err=""):
        self.returncode, self.stdout, self.stderr = rc, out, err


class ScriptedSlurm:
    """Answers as scontrol/squeue print, from a little state the test sets: the node's
    state and reason, the jobs on it, and whether it is still defined."""
    where = "script"

    def __init__(self, jobs=("7",), requeue_ends=True):
        self.state, self.reason, self.defined = "MIXED", "", True
        self.jobs, self.calls, self.requeue_ends = list(jobs), [], requeue_ends
        self.ticks = 0

    def run(self, argv):
        self.calls.append(argv)
        if argv[:3] == ["scontrol", "show", "node"]:
            if not self.defined:
                return Done(1, "", f"Node {argv[3]} not found")
            return Done(0, f"NodeName={argv[3]} State={self.state} Partitions=gpu "
                           f"Reason={self.reason}\n")
        if argv[:2] == ["scontrol", "update"]:
            self.state += "+DRAIN"
            self.reason = argv[-1].split("=", 1)[1]
            return Done()
        if argv[0] == "squeue":
            return Done(0, "\n".join(self.jobs))
        if argv[:2] == ["scontrol", "requeue"] or argv[0] == "scancel":
            if self.requeue_ends:
                self.jobs = []
            return Done()
        if argv[:3] == ["scontrol", "show", "partition"]:
            nodes = "gpu1" if not self.defined else "gpu[1-2]"
            return Done(0, f"PartitionName=gpu Nodes={nodes} State=UP\n")
        raise AssertionError(argv)

    def apply_controllers(self, spec):
        self.defined = False
        return "applied"

    def stop_slurmd(self, host):
        return f"{host}: stopped"

    def start_slurmd(self, host, spec):
        return f"{host}: started"


class NoCluster:
    def unavailable(self):
        return "no cluster (test)"


def test_at_the_deadline_stop_leaves_the_node_drained(spec):
    slurm = ScriptedSlurm()
    result = handoff(spec, ["gpu2"], "kubernetes", slurm, NoCluster(),
                     Options(tenant="serve", deadline_s=0, at_deadline="stop", poll_s=0))
    assert [s.status for s in result.steps] == ["done", "done", "waiting"]
    assert "DRAIN" in slurm.state and not ov.path_for(spec).exists()
    # run again once the job is gone: it resumes, drain already done
    slurm.jobs = []
    again = handoff(spec, ["gpu2"], "kubernetes", slurm, NoCluster(),
                    Options(tenant="serve", poll_s=0))
    st = {s.name: s.status for s in again.steps}
    assert again.ok and st["drain"] == "already" and st["wait"] == "already"
    assert st["overlay"] == "done" and st["kubernetes"] == "skipped" and st["kueue"] == "skipped"
    assert read_overlay(spec)[0].nodes["gpu2"].plane == "kubernetes"


@pytest.mark.parametrize("policy,verb", [("requeue", ["scontrol", "requeue", "7"]),
                                         ("cancel", ["scancel", "7"])])
def test_at_the_deadline_requeue_or_cancel(spec, policy, verb):
    slurm = ScriptedSlurm()
    result = handoff(spec, ["gpu2"], "kubernetes", slurm, NoCluster(),
                     Options(tenant="serve", deadline_s=0, at_deadline=policy, poll_s=0))
    assert result.ok, result.as_dict()
    assert verb in slurm.calls
    assert f"{policy}d 7" in next(s.detail for s in result.steps if s.name == "wait")


def test_a_node_still_in_a_partition_after_apply_fails_the_step(spec):
    slurm = ScriptedSlurm(jobs=())
    slurm.apply_controllers = lambda spec: "applied"     # the node stays defined
    result = handoff(spec, ["gpu2"], "kubernetes", slurm, NoCluster(),
                     Options(tenant="serve", poll_s=0))
    assert not result.ok
    assert result.steps[-1].name == "controllers" and "still in partitions" in \
        result.steps[-1].detail and "run the same handoff again" in result.steps[-1].detail


def test_the_kubernetes_half_prints_the_pools_labels_and_taints(spec):
    result = handoff(spec, ["gpu2"], "kubernetes", ScriptedSlurm(jobs=()), NoCluster(),
                     Options(tenant="serve", poll_s=0))
    detail = next(s.detail for s in result.steps if s.name == "kubernetes")
    assert detail.startswith("no cluster (test); it would run: estate apply")
    assert "kubectl uncordon gpu2" in detail
    assert "estate.io/gpu-pool=a100" in detail and "kubectl taint --overwrite node gpu2" in detail


# --- the command ----------------------------------------------------------------------------

@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200),
                                          ("none", None)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_the_command_dry_run_shows_the_gpus_moving(spec):
    out = CliRunner().invoke(app, ["handoff", str(spec), "gpu2", "--to", "kubernetes",
                                   "--tenant", "serve", "--dry-run"])
    assert out.exit_code == 0, out.output
    assert "GPUs: plane slurm: 4 -> 2 GPUs" in out.output
    assert "GPUs: tenant serve: 0 -> 2 GPUs" in out.output


def test_the_command_refuses_with_exit_1(spec):
    out = CliRunner().invoke(app, ["handoff", str(spec), "gpu2", "--to", "kubernetes"])
    assert out.exit_code == 1 and "refused" in out.output


def test_interrupted_after_the_overlay_a_second_run_finishes(spec):
    """The controllers' step fails once (an unreachable controller, say): the overlay is
    written and the node drained, nothing else; the same command again goes on from
    there, finding the earlier steps done."""
    from estate.operate.handoff.logic import StepError
    slurm = ScriptedSlurm(jobs=())

    def unreachable(spec):
        raise StepError("ssh ctl1: no answer within 120 s")
    slurm.apply_controllers = unreachable
    first = handoff(spec, ["gpu2"], "kubernetes", slurm, NoCluster(),
                    Options(tenant="serve", poll_s=0))
    assert not first.ok and first.steps[-1].name == "controllers"
    assert "resumes here" in first.steps[-1].detail
    assert read_overlay(spec)[0].nodes["gpu2"].plane == "kubernetes"
    del slurm.apply_controllers            # reachable again
    second = handoff(spec, ["gpu2"], "kubernetes", slurm, NoCluster(),
                     Options(tenant="serve", poll_s=0))
    st = {s.name: s.status for s in second.steps}
    assert second.ok, second.as_dict()
    assert st["drain"] == "already" and st["overlay"] == "already" and st["controllers"] == "done"
    third = handoff(spec, ["gpu2"], "kubernetes", slurm, NoCluster(),
                    Options(tenant="serve", poll_s=0))
    assert third.ok and {s.name: s.status for s in third.steps}["drain"] == "already"
    assert "not a Slurm node" in third.steps[1].detail


def test_one_handoff_of_a_spec_at_a_time(spec):
    from estate.operate.handoff.logic import locked
    with locked(spec):
        why = refused(handoff(spec, ["gpu2"], "kubernetes", Untouchable(), Untouchable(),
                              Options(tenant="serve")))
    assert "another estate handoff" in why


def test_a_reason_with_a_control_character_is_refused(spec):
    why = refused(handoff(spec, ["gpu2"], "kubernetes", Untouchable(), Untouchable(),
                          Options(tenant="serve", reason="drain\x1b[31m")))
    assert why.startswith("--reason:")


def test_to_slurm_without_a_cluster_lists_cordon_drain_leave_delete(spec):
    write_overlay(spec, ov.Overlay(nodes={"gpu2": ov.Lent(plane="kubernetes",
                                                          tenant="serve")}))
    slurm = ScriptedSlurm(jobs=())
    slurm.defined = False
    slurm.state = "IDLE"
    slurm.start_slurmd = lambda host, spec: (setattr(slurm, "defined", True), "started")[1]
    result = handoff(spec, ["gpu2"], "slurm", slurm, NoCluster(), Options(poll_s=0))
    assert result.ok, result.as_dict()
    detail = result.steps[1].detail
    order = ["kubectl cordon gpu2", "kubectl drain gpu2 --ignore-daemonsets",
             "kubeadm reset -f", "kubectl delete node gpu2"]
    assert all(o in detail for o in order)
    assert [detail.index(o) for o in order] == sorted(detail.index(o) for o in order)
    assert not ov.path_for(spec).exists()
