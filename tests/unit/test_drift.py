"""estate.operate.drift.logic's comparisons on parsed inputs: output recorded from the Docker lab running
stacks/lab.yaml (Slurm 22.05: scontrol, slurmd -C, systemctl show, stat, sha256sum), an
nvidia-smi answer in its documented CSV form, and a node list in the shape of
`kubectl get nodes -o json` built from the spec. tests/lab/test_drift.py runs the same
against the live lab."""
from __future__ import annotations

import copy
import hashlib
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from estate.operate.drift import logic as d
from estate.operate.drift.logic import Finding, Fixes, DriftReport
from estate.model import kubernetes as k8s
from estate.spec.load import load
from estate.spec.resolved import Estate
from estate.verify import k8s_view
from estate.model.update_policy import policy
from estate.verify.slurm_view import Mismatch, SlurmView
from tests.unit.test_ownership import estate_of
from tests.unit.test_slurm_view import NODE, PARTITION, SINFO, TOPOLOGY, nodes

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "stacks/lab.yaml"
FIX = Fixes("stacks/lab.yaml", " --lab")
LAB_NODES = {"ctl1", "login1", "gpu1", "gpu2", "nfs1"}

# `slurmd -C` on the lab's gpu1: a 2-core container with 24 GB, emulating a 4-core node
SLURMD_C = ("NodeName=gpu1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 "
            "ThreadsPerCore=1 RealMemory=24105\nUpTime=0-03:14:46\n")
# the hardware the class describes (slurmd -C on a real gpu-2x node)
SLURMD_C_CLASS = ("NodeName=gpu1 CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 "
                  "ThreadsPerCore=1 RealMemory=7940\nUpTime=12-01:00:00\n")
SYSTEMCTL_SHOW = ("Id=slurmd.service\nLoadState=loaded\nActiveState=active\n"
                  "UnitFileState=enabled\n\n"
                  "Id=nosuch.service\nLoadState=not-found\nActiveState=inactive\n"
                  "UnitFileState=\n\n"
                  "Id=chrony.service\nLoadState=loaded\nActiveState=inactive\n"
                  "UnitFileState=enabled\n")


@pytest.fixture(scope="module")
def estate():
    return Estate(load(LAB).spec)


def lab_with(**slurm) -> Estate:
    """The lab spec with some slurm settings changed (the models are frozen)."""
    data = yaml.safe_load(LAB.read_text())
    data["slurm"].update(slurm)
    return estate_of(data)


@pytest.fixture(scope="module")
def strict():
    return lab_with(config_overrides=False)


def view(node_text: str | None = None, partitions: str = PARTITION) -> SlurmView:
    return SlurmView.parse(node_text or nodes(), partitions, TOPOLOGY, SINFO)


# --- Slurm's view ---------------------------------------------------------------------

def test_the_recorded_view_has_no_findings(estate):
    assert d.slurm_findings(estate, view(), LAB_NODES, FIX) == []


def test_memory_and_weight_changed_in_slurm_are_named_with_a_reconfigure(estate):
    gpu1 = NODE.format(n="gpu1", addr="10.60.0.13", state="IDLE") \
        .replace("RealMemory=7680", "RealMemory=6144").replace("Weight=1", "Weight=7")
    gpu2 = NODE.format(n="gpu2", addr="10.60.0.14", state="IDLE")
    found = d.slurm_findings(estate, view(gpu1 + "\n" + gpu2), LAB_NODES, FIX)
    assert {(f.node, f.what, f.expected, f.actual) for f in found} == \
        {("gpu1", "RealMemory", "7680", "6144"), ("gpu1", "Weight", "1", "7")}
    for f in found:
        assert f.status == d.DRIFT and f.aspect == "slurm"
        assert "`scontrol reconfigure` on ctl1" in f.fix
        assert "estate apply stacks/lab.yaml --limit ctl1 --lab" in f.fix
        # a restart is named after the reconfigure where the update policy classes the
        # key stronger for the release (SchedMD's manual, or Estate's measured judgement)
        stronger = policy("22.05", f"node:{f.what}").cls != "reconfigure"
        assert ("if that leaves it, `systemctl restart slurmctld` on ctl1" in f.fix) is stronger


def test_a_processor_count_names_the_restart_22_05_asks_after_the_reconfigure(estate):
    """slurm.conf(5) 22.05: changing a node's processor count needs slurmctld and slurmd
    restarted; drift names the reconfigure first and that restart as the fallback."""
    gpu1 = NODE.format(n="gpu1", addr="10.60.0.13", state="IDLE").replace("CPUTot=4", "CPUTot=2")
    gpu2 = NODE.format(n="gpu2", addr="10.60.0.14", state="IDLE")
    [f] = d.slurm_findings(estate, view(gpu1 + "\n" + gpu2), LAB_NODES, FIX)
    assert f.what == "CPUTot" and d.policy_key(Mismatch("node gpu1", "CPUTot", "", "")) == \
        "node:CPUs"
    assert f.fix.endswith("if that leaves it, `systemctl restart slurmctld` on ctl1, then "
                          "slurmd on gpu1 (slurm.conf(5) default, 22.05: restart_all)")
    [f] = d.slurm_findings(lab_with(version="24.11"), view(gpu1 + "\n" + gpu2), LAB_NODES,
                           FIX)
    assert "if that leaves it" not in f.fix
    # only the nodes asked about
    assert d.slurm_findings(estate, view(gpu1 + "\n" + gpu2), {"gpu2"}, FIX) == []


def test_a_partition_difference_is_the_controllers(estate):
    changed = PARTITION.replace("MaxTime=1-00:00:00", "MaxTime=2-00:00:00", 1)
    [f] = d.slurm_findings(estate, view(partitions=changed), LAB_NODES, FIX)
    assert (f.node, f.what, f.actual) == ("ctl1", "partition gpu MaxTime", "2-00:00:00")
    assert "`scontrol reconfigure` on ctl1" in f.fix and "if that leaves it" not in f.fix
    assert d.slurm_findings(estate, view(partitions=changed), {"gpu1"}, FIX) == []


def test_a_node_missing_from_slurm_needs_a_restart_before_23_11(estate):
    only_gpu1 = NODE.format(n="gpu1", addr="10.60.0.13", state="IDLE")
    found = [f for f in d.slurm_findings(estate, view(only_gpu1), LAB_NODES, FIX)
             if f.what == "presence"]
    assert [f.node for f in found] == ["gpu2"]
    assert "`systemctl restart slurmctld` on ctl1, then slurmd on gpu2" in found[0].fix
    assert "require restarting both the slurmctld daemon and the slurmd" in found[0].fix
    [f] = [f for f in d.slurm_findings(lab_with(version="24.11"), view(only_gpu1), LAB_NODES,
                                       FIX)
           if f.what == "presence"]
    assert "scontrol reconfigure" in f.fix and "restart" not in f.fix
    gpu1 = NODE.format(n="gpu1", addr="10.60.0.13", state="IDLE").replace("Weight=1", "Weight=7")
    [f] = d.slurm_findings(lab_with(version="24.11"), view(gpu1 + "\n" + NODE.format(
        n="gpu2", addr="10.60.0.14", state="IDLE")), LAB_NODES, FIX)
    assert f.what == "Weight" and "restart" not in f.fix    # reconfigure-class from 23.11


def test_a_down_node_gets_slurm_views_own_fix(estate):
    text = nodes(state2="DOWN+NOT_RESPONDING")
    [f] = d.slurm_findings(estate, view(text), LAB_NODES, FIX)
    assert (f.node, f.what) == ("gpu2", "State")
    assert "start slurmd on gpu2" in f.fix


# --- hardware -------------------------------------------------------------------------

def test_slurmd_c_is_parsed():
    hw = d.parse_slurmd_c(SLURMD_C)
    assert hw["CPUs"] == "2" and hw["RealMemory"] == "24105" and "UpTime" not in hw


def test_emulated_hardware_is_tolerated_under_config_overrides(estate):
    found = d.hardware_findings(estate, "gpu1", d.parse_slurmd_c(SLURMD_C))
    assert {(f.what, f.expected, f.actual) for f in found} == {
        ("CPUs", "4", "2"), ("CoresPerSocket", "4", "2"),
        ("RealMemory", "about 8192 MB (class gpu-2x)", "24105 MB")}
    assert {f.status for f in found} == {d.TOLERATED}
    assert "config_overrides" in found[0].fix


def test_a_hardware_mismatch_is_drift_whose_fix_is_the_spec(strict):
    found = d.hardware_findings(strict, "gpu1", d.parse_slurmd_c(SLURMD_C))
    assert {f.status for f in found} == {d.DRIFT}
    assert all(f.fix.startswith("change the spec: node class gpu-2x") for f in found)
    assert d.hardware_findings(strict, "gpu1", d.parse_slurmd_c(SLURMD_C_CLASS)) == []
    short = SLURMD_C_CLASS.replace("RealMemory=7940", "RealMemory=7000")
    [f] = d.hardware_findings(strict, "gpu1", d.parse_slurmd_c(short))
    assert (f.what, f.expected, f.actual) == ("RealMemory", "at least 7680 MB", "7000 MB")


def test_nodes_without_a_nodename_line_have_no_hardware_to_compare(strict):
    assert d.hardware_findings(strict, "ctl1", {"CPUs": "1"}) == []


# --- files ----------------------------------------------------------------------------

MANIFEST = {"slurm/slurm.conf": {"sha256": "a" * 64, "mode": "0644", "owner": "root"},
            "slurm/slurmdbd.conf": {"sha256": "b" * 64, "mode": "0600", "owner": "slurm:slurm"},
            "common/hosts": {"sha256": "c" * 64, "mode": "0644", "owner": "root"}}
INSTALLED = [("slurm/slurm.conf", "/etc/slurm/slurm.conf"),
             ("slurm/slurmdbd.conf", "/etc/slurm/slurmdbd.conf"),
             ("common/hosts", "/etc/hosts")]


def states(**over) -> dict:
    base = {"/etc/slurm/slurm.conf": d.FileState("a" * 64, "0644", "root:root"),
            "/etc/slurm/slurmdbd.conf": d.FileState("b" * 64, "0600", "slurm:slurm"),
            "/etc/hosts": d.FileState("c" * 64, "0644", "root:root")}
    return base | over


def test_files_as_rendered_have_no_findings():
    assert d.file_findings("ctl1", INSTALLED, MANIFEST, states(), FIX) == []


def test_an_edited_file_is_told_from_one_the_spec_changed_since():
    edited = states(**{"/etc/slurm/slurm.conf": d.FileState("e" * 64, "0644", "root:root")})
    [f] = d.file_findings("ctl1", INSTALLED, MANIFEST, edited, FIX, last=MANIFEST)
    assert (f.node, f.aspect, f.what) == ("ctl1", "file", "/etc/slurm/slurm.conf")
    assert "edited on the node" in f.actual
    [f] = d.file_findings("ctl1", INSTALLED, MANIFEST, edited, FIX)
    assert "no last render" in f.actual
    assert f.fix == "estate apply stacks/lab.yaml --limit ctl1 --lab"
    last = copy.deepcopy(MANIFEST)
    last["slurm/slurm.conf"]["sha256"] = "e" * 64
    [f] = d.file_findings("ctl1", INSTALLED, MANIFEST, edited, FIX, last=last)
    assert "the spec changed since it was applied" in f.actual


def test_missing_files_modes_and_owners():
    live = states(**{"/etc/slurm/slurmdbd.conf": d.FileState("b" * 64, "0644", "root:root")})
    del live["/etc/slurm/slurm.conf"]
    found = d.file_findings("ctl1", INSTALLED, MANIFEST, live, FIX)
    assert {(f.what, f.expected, f.actual) for f in found} == {
        ("/etc/slurm/slurm.conf", f"slurm/slurm.conf (sha256 {'a' * 12})", "missing"),
        ("/etc/slurm/slurmdbd.conf mode", "0600", "0644"),
        ("/etc/slurm/slurmdbd.conf owner", "slurm:slurm", "root:root")}


def test_hosts_mode_is_dockers_in_a_container_only():
    live = states(**{"/etc/hosts": d.FileState("c" * 64, "0600", "root:root")})
    assert d.file_findings("gpu1", INSTALLED, MANIFEST, live, FIX, container=True) == []
    [f] = d.file_findings("gpu1", INSTALLED, MANIFEST, live, FIX, container=False)
    assert f.what == "/etc/hosts mode"


def test_stat_and_sha256sum_output_of_this_machine_parse(tmp_path):
    """The real coreutils on this machine, argv only, a name with a space and a '|'."""
    a, b = tmp_path / "plain.conf", tmp_path / "odd name|x.conf"
    a.write_bytes(b"one\n")
    b.write_bytes(b"two\n")
    os.chmod(b, 0o600)
    paths = [str(a), str(b), str(tmp_path / "absent")]
    run = lambda argv: subprocess.run(argv, capture_output=True, text=True).stdout  # noqa: E731
    live = d.file_states(run(["stat", "-c", "%n|%a|%U|%G", "--", *paths]),
                         run(["sha256sum", "--", *paths]))
    assert set(live) == {str(a), str(b)}
    assert live[str(b)].mode == "0600"
    assert live[str(a)].sha256 == hashlib.sha256(b"one\n").hexdigest()
    assert live[str(b)].sha256 == hashlib.sha256(b"two\n").hexdigest()


def test_a_configless_cache_other_than_the_rendered_slurm_conf():
    assert d.conf_cache_finding("gpu1", "a" * 64, "a" * 64, "ctl1", FIX) == []
    [f] = d.conf_cache_finding("gpu1", "a" * 64, "f" * 64, "ctl1", FIX)
    assert f.what == d.CONF_CACHE and "`scontrol reconfigure` on ctl1" in f.fix
    [f] = d.conf_cache_finding("gpu1", "a" * 64, None, "ctl1", FIX)
    assert f.actual.startswith("missing")


# --- services -------------------------------------------------------------------------

def test_the_services_each_nodes_deploys_run(estate):
    from estate.provision.inventory import targets
    manifest = {}
    from estate.render import render_all
    for path, art in render_all(estate, str(LAB)).items():
        manifest[path] = {"consumers": str(art.consumers), "plane": art.plane}
    ts = {t.name: t for t in targets(estate, manifest)}
    units = lambda n: {s.unit for s in d.expected_services(ts[n].deploys, ts[n].consumes)}  # noqa: E731
    assert units("ctl1") == {"chrony", "nftables", "munge", "mariadb", "slurmdbd", "slurmctld",
                             "slurmrestd", "stunnel@slurmrestd", "prometheus-node-exporter",
                             "estate-slurm-exporter", "prometheus", "prometheus-alertmanager",
                             "estate-bridge-mint.timer", "estate-bridge-renew.timer",
                             "estate-cert-expiry.timer"}
    assert units("gpu1") == {"chrony", "nftables", "munge", "slurmd", "prometheus-node-exporter",
                             "estate-dcgm-exporter", "home-shared.mount", "models.mount"}
    assert "nfs-server" in units("nfs1") and "nfs-server" not in units("login1")
    assert {"kubelet", "containerd"} <= units("k8s2")


def test_a_stopped_service_is_drift_and_apply_is_its_fix():
    wants = [d.Service("slurmd", "slurm_worker"), d.Service("nosuch", "slurm_worker"),
             d.Service("chrony", "common", "a docker container shares the host's clock")]
    states = d.parse_systemctl_show(SYSTEMCTL_SHOW, ["slurmd", "nosuch", "chrony"])
    found = d.service_findings("gpu2", wants, states, FIX)
    assert [(f.what, f.actual, f.status) for f in found] == [
        ("nosuch", "not-found", d.DRIFT), ("chrony", "inactive", d.TOLERATED)]
    stopped = SYSTEMCTL_SHOW.replace("ActiveState=active", "ActiveState=inactive", 1) \
        .replace("UnitFileState=enabled", "UnitFileState=disabled", 1)
    found = d.service_findings("gpu2", wants[:1],
                               d.parse_systemctl_show(stopped, ["slurmd"]), FIX)
    assert [(f.what, f.expected, f.actual) for f in found] == [
        ("slurmd", "active", "inactive"), ("slurmd enabled", "enabled", "disabled")]
    assert {f.fix for f in found} == {"estate apply stacks/lab.yaml --limit gpu2 --lab"}


def test_chrony_may_stop_in_a_container_only():
    assert d.expected_services(["common"], [], "docker")[0].tolerate_stopped
    assert d.expected_services(["common"], [], None)[0].tolerate_stopped is None


# --- GPUs -----------------------------------------------------------------------------

A100 = "NVIDIA A100-SXM4-40GB, 40960\n"


def test_nvidia_smi_matching_the_class(estate):
    assert d.parse_nvidia_smi(A100 * 2) == [("NVIDIA A100-SXM4-40GB", 40960)] * 2
    assert d.gpu_findings(estate, "gpu1", d.parse_nvidia_smi(A100 * 2)) == []


def test_a_lost_gpu_and_another_model_are_spec_changes(estate):
    [f] = d.gpu_findings(estate, "gpu1", d.parse_nvidia_smi(A100))
    assert (f.expected, f.actual) == ("2 x NVIDIA-A100-SXM4-40GB", "1 x NVIDIA-A100-SXM4-40GB")
    assert f.fix.startswith("change the spec")
    found = d.gpu_findings(estate, "gpu1", d.parse_nvidia_smi(
        "NVIDIA A100-SXM4-80GB, 81920\n" * 2))
    assert [f.what for f in found] == ["GPUs"]
    small = d.gpu_findings(estate, "gpu1", d.parse_nvidia_smi(
        "NVIDIA A100-SXM4-40GB, 20000\n" * 2))
    assert [f.what for f in small] == ["NVIDIA A100-SXM4-40GB memory"] * 2


def test_emulated_gpus_are_skipped_with_the_reason(estate):
    f = d.gpu_skipped(estate, "gpu1")
    assert f.status == d.SKIPPED and "emulated" in f.actual


# --- Kubernetes -----------------------------------------------------------------------

def cluster(estate) -> dict:
    """A node list as the spec's Kubernetes nodes would register (Estate's own labels)."""
    items = []
    for kn in k8s.plane_nodes(estate):
        cap = {r: str(n) for r, n in k8s_view._expected_capacity(kn, estate).items()} \
            if kn.is_gpu_worker else {}
        items.append({"metadata": {"name": kn.name, "labels": dict(kn.labels)},
                      "spec": {"taints": [dict(t) for t in kn.taints]},
                      "status": {"capacity": cap}})
    return {"items": items}


def test_a_cluster_as_the_spec_says_has_no_findings(estate):
    assert d.kubernetes_findings(estate, cluster(estate), {"k8s1", "k8s2"}) == []


def test_labels_and_taints_that_drifted(estate):
    live = cluster(estate)
    k8s2 = live["items"][1]
    k8s2["metadata"]["labels"]["estate.io/gpu-pool"] = "a100"
    k8s2["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable",
                               "effect": "NoSchedule"}]     # a cordon: the cluster's own
    found = d.kubernetes_findings(estate, live, {"k8s1", "k8s2"})
    assert {(f.node, f.what, f.expected, f.actual) for f in found} == {
        ("k8s2", "label estate.io/gpu-pool", "l4", "a100"),
        ("k8s2", "taints", "nvidia.com/gpu=l4:NoSchedule", "none")}
    assert d.kubernetes_findings(estate, live, {"k8s1"}) == []
    del live["items"][0]
    [f] = d.kubernetes_findings(estate, live, {"k8s1"})
    assert (f.node, f.what, f.actual) == ("k8s1", "registered", "no")


# --- the last render, the report, JUnit -----------------------------------------------

def test_what_the_spec_changed_since_the_last_render_is_pending():
    new = {"slurm/slurm.conf": {"sha256": "a" * 64, "mode": "0644", "owner": "root",
                                "consumers": "ctl1,login1"},
           "common/hosts": {"sha256": "c" * 64, "mode": "0644", "owner": "root",
                            "consumers": "ctl1,gpu[1-2]"}}
    last = copy.deepcopy(new)
    last["slurm/slurm.conf"]["sha256"] = "e" * 64
    assert d.render_findings(new, new, LAB_NODES, "build/lab", FIX) == []
    [f] = d.render_findings(new, last, LAB_NODES, "build/lab", FIX)
    assert (f.node, f.what, f.status) == ("ctl1,login1", "slurm/slurm.conf", d.PENDING)
    assert f.fix == "estate apply stacks/lab.yaml --limit ctl1,login1 --lab"
    del new["common/hosts"]
    found = d.render_findings(new, last, {"gpu1", "gpu2"}, "build/lab", FIX)
    assert [(f.node, f.expected) for f in found] == [("gpu[1-2]", "removed by the spec")]


def report() -> DriftReport:
    r = DriftReport()
    r.add("gpu1", "file", [], 5)
    r.add("gpu2", "service", [Finding("gpu2", "service", "slurmd", "active", "inactive",
                                      FIX.apply("gpu2"))], 4)
    r.add("gpu2", "gpu", [Finding("gpu2", "gpu", "GPUs", "2", "nvidia-smi is not on gpu2", "",
                                  d.SKIPPED)], 0)
    r.add("gpu2", "hardware", [Finding("gpu2", "hardware", "CPUs", "4", "2", "none needed",
                                       d.TOLERATED)], 1)
    return r


def test_only_drift_counts():
    r = report()
    assert not r.ok and [f.what for f in r.drifted] == ["slurmd"]
    assert r.totals() == {"compared": 10, "drift": 1, "skipped": 1, "tolerated": 1}
    r.findings = [f for f in r.findings if f.status != d.DRIFT]
    assert r.ok


def test_junit_has_a_case_per_node_and_aspect():
    suite = ET.fromstring(d.junit(report())).find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "1", "1")
    cases = {(c.get("name"), c.get("classname")): c for c in suite.iter("testcase")}
    failed = cases[("gpu2", "estate-drift.service")].find("failure")
    assert "slurmd" in failed.get("message")
    assert "--limit gpu2 --lab" in failed.text
    assert cases[("gpu2", "estate-drift.gpu")].find("skipped") is not None
    assert "tolerated" in cases[("gpu2", "estate-drift.hardware")].find("system-out").text
    assert list(cases[("gpu1", "estate-drift.file")]) == []


def test_json_lists_drift_first():
    doc = report().as_dict()
    assert doc["ok"] is False
    assert [f["status"] for f in doc["findings"]] == [d.DRIFT, d.TOLERATED, d.SKIPPED]
    assert {"node": "gpu1", "aspect": "file", "count": 5} in doc["compared"]


# --- the command ----------------------------------------------------------------------

def estate_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / ".venv/bin/estate"), *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=120)


def test_a_limit_naming_no_node_of_the_spec_fails_before_any_node_is_reached(tmp_path):
    proc = estate_cli("drift", str(LAB), "--limit", "nosuch1", "--report-dir", str(tmp_path))
    assert proc.returncode == 1
    assert "--limit names nodes the spec does not have: nosuch1" in proc.stderr
    assert not (tmp_path / "drift.json").exists()


def test_a_last_render_that_is_not_there_is_named(tmp_path):
    proc = estate_cli("drift", str(LAB), "--last", str(tmp_path / "none"),
                      "--report-dir", str(tmp_path))
    assert proc.returncode == 1
    assert "MANIFEST.json is missing" in proc.stderr


def test_the_fix_repeats_the_connection_options():
    from estate.operate.drift.cli import connect_flags
    assert connect_flags(True, None, "root") == " --lab"
    assert connect_flags(False, "/k", "ops") == " --ssh-key /k --ssh-user ops"
    assert connect_flags(False, None, "root") == ""


def test_a_node_lost_over_ssh_is_one_reach_finding(estate, tmp_path):
    """testinfra's ssh backend raises RuntimeError when ssh itself exits 255: that node is
    named unreachable with its fix, and the run goes on."""
    from estate.operate.drift import live as drift_live
    from estate.provision.inventory import Connection
    from estate.render import render_all, write_tree

    write_tree(render_all(estate, str(LAB)), tmp_path / "render")
    ctx = drift_live.VerifyContext(estate, tmp_path / "render", Connection(), tmp_path, None)

    class Lost:
        def run(self, command):
            raise RuntimeError(type("Result", (), {"stderr": "ssh: connect to host "
                                                    "10.60.0.14 port 22: No route to host"})())
    ctx._hosts["gpu2"] = Lost()
    part = drift_live.node_report(ctx, "gpu2", FIX, None)
    [f] = part[("gpu2", "reach")][0]
    assert f.status == d.DRIFT and "No route to host" in f.actual
    assert f.fix.endswith("then estate apply stacks/lab.yaml --limit gpu2 --lab")


def test_drift_lines_fit_a_200_column_terminal_and_the_json_keeps_the_reason(tmp_path,
                                                                            capsys):
    """A reason of 300 characters (an unreachable node's ssh error) is cut in the printed
    rows, so that no line is wider than 200 columns; drift.json keeps it whole."""
    import json
    from estate.operate.drift.cli import print_report
    from estate.output import Output
    reason = "unreachable (" + "ssh: connect to host 10.60.0.21 port 22: timed out " * 6 + ")"
    report = DriftReport()
    report.add("k8s1", "reach", [Finding("k8s1", "reach", "ssh", "reachable", reason,
                                         "start k8s1 or fix its network or ssh, then " * 3)], 1)
    json_path = tmp_path / "drift.json"
    json_path.write_text(json.dumps(report.as_dict()))
    print_report(report, Output.text, json_path, tmp_path / "junit.xml")
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(len(line) for line in lines[:-1]) <= 200, lines
    assert reason in json_path.read_text()

