"""estate import ends in a spec that checks clean (issue 30 §1): what Slurm moved is
translated as Slurm moved it, for the spec's release (slurm_conf/keys/moved.json, held
here to every release's key tables); accounts and QOS that slurm.conf only names become
spec accounts and QOS, or slurmdbd's own with --accounting; topology members no node
defines are dropped as slurmctld drops them; every difference is reported on its line."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from estate.catalogue import NEXT_SUITES, SLURM_SUITES
from estate.cli import app
from estate.importer.accounts import Accounting, read
from estate.importer.mapping import Sources, import_slurm
from estate.model.slurm_keys import (KEYS_DIR, conf_keys, moved, next_versions,
                                     scheduler_options)
from estate.pipeline import build

RELEASES = sorted(SLURM_SUITES)
TABLES = RELEASES + next_versions()    # and the next suite's release (keys only)
TABLE = json.loads((KEYS_DIR / "moved.json").read_text())
BASE = ("ClusterName=x\nSlurmctldHost=head\nNodeName=n[1-4] CPUs=4 RealMemory=4000\n"
        "PartitionName=p Nodes=n[1-4] Default=YES\n")


def _check_errors(doc: dict) -> list[str]:
    """The error ids `estate check` reports on the written spec."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return [f.id for f in build(path, render=False).findings
                if f.severity.value == "error"]


@pytest.mark.parametrize("release", TABLES)
def test_moved_table_agrees_with_the_release_key_tables(release):
    """A renamed key's new name is a key of every release it applies to; a moved option
    is no longer a documented SchedulerParameters option there."""
    keys = conf_keys(release)
    for name, entry in moved("keys", release).items():
        assert "to" not in entry or entry["to"].lower() in keys, name
        for line in entry.get("values", {}).values():
            assert not line or line.split("=")[0].lower() in keys, (name, line)
    for name, entry in moved("SchedulerParameters", release).items():
        assert name not in scheduler_options(release) and entry["to"].lower() in keys, name


def test_preempt_options_move_only_from_23_02():
    assert "preempt_youngest_first" in scheduler_options("22.05")
    assert "preempt_youngest_first" not in moved("SchedulerParameters", "22.05")
    assert moved("SchedulerParameters", "24.11")["preempt_youngest_first"]["as"] == \
        "youngest_first"


@pytest.mark.parametrize("release", RELEASES)
def test_kill_invalid_depend_becomes_dependency_parameters(release):
    text = BASE + ("SchedulerParameters=bf_continue,kill_invalid_depend,max_depend_depth=5,"
                   "preempt_youngest_first\nDependencyParameters=disable_remote_singleton\n")
    doc, report = import_slurm(Sources(text), version=release)
    extra = doc["slurm"]["extra"]
    assert extra["DependencyParameters"] == \
        "kill_invalid_depend,max_depend_depth=5,disable_remote_singleton"
    assert doc["slurm"]["scheduler_parameters"]["bf_continue"] is True
    changed = {d.text for d in report.dropped if d.kind == "changed"}
    assert {"SchedulerParameters kill_invalid_depend",
            "SchedulerParameters max_depend_depth=5"} <= changed
    if release == "22.05":
        assert doc["slurm"]["scheduler_parameters"]["preempt_youngest_first"] is True
    else:
        assert extra["PreemptParameters"] == "youngest_first"
        assert "SchedulerParameters preempt_youngest_first" in changed
    assert _check_errors(doc) == []


def test_removed_keys_become_what_slurm_says_replaces_them():
    text = BASE + ("FastSchedule=2\nAccountingStoreJobComment=YES\nSbcastParameters=Compression=lz4\n"
                   "AccountingStorageLoc=/var/log/slurm/acct\nSelectType=select/cons_res\n"
                   "SelectTypeParameters=CR_Core,CR_ALLOCATE_FULL_SOCKET\n")
    doc, report = import_slurm(Sources(text), version="24.11")
    slurm = doc["slurm"]
    assert slurm["config_overrides"] is True
    assert slurm["extra"] == {"AccountingStoreFlags": "job_comment",
                              "BcastParameters": "Compression=lz4"}
    assert slurm["select_type_parameters"] == ["CR_Core"]
    kinds = {d.line: d.kind for d in report.dropped}
    assert kinds == {5: "changed", 6: "changed", 7: "changed", 8: "dropped", 9: "changed",
                     10: "changed"}
    assert "safe to remove" in next(d.reason for d in report.dropped if d.line == 8)
    assert _check_errors(doc) == []


def test_renamed_line_keys_are_read_under_their_new_names():
    text = ("ClusterName=x\nSlurmctldHost=head\nNodeName=n[1-2] Procs=8 RealMemory=4000\n"
            "PartitionName=p Nodes=n[1-2] Shared=EXCLUSIVE Default=YES\n")
    doc, report = import_slurm(Sources(text))
    assert doc["slurm"]["partitions"][0]["oversubscribe"] == "EXCLUSIVE"
    assert doc["node_classes"][0]["sockets"] * doc["node_classes"][0]["cores_per_socket"] == 8
    assert {(d.line, d.kind) for d in report.dropped if d.kind == "changed"} >= {
        (3, "changed"), (4, "changed")}


def test_a_key_only_a_newer_release_knows_names_it():
    doc, report = import_slurm(Sources(BASE + "TLSType=tls/none\n"), version="22.05")
    reason = next(d.reason for d in report.dropped if d.line == 5)
    assert "Slurm 22.05" in reason and "--slurm-version 24.11" in reason
    doc, report = import_slurm(Sources(BASE + "TLSType=tls/none\n"), version="24.11")
    assert doc["slurm"]["extra"] == {"TLSType": "tls/none"}


def test_accounts_and_qos_the_partitions_name_become_spec_ones():
    text = BASE.replace("PartitionName=p Nodes=n[1-4] Default=YES",
                        "PartitionName=p Nodes=n[1-2] Default=YES AllowAccounts=physics,bio "
                        "AllowQos=normal,long\nPartitionName=q Nodes=n[3-4] "
                        "DenyAccounts=guests QOS=part_q")
    doc, report = import_slurm(Sources(text))
    assert [a["name"] for a in doc["slurm"]["accounts"]] == ["physics", "bio", "guests"]
    assert all(a["fairshare"] == 1 for a in doc["slurm"]["accounts"])
    assert [q["name"] for q in doc["slurm"]["qos"]] == ["normal", "long", "part_q"]
    assert any("slurmdbd" in d and "--accounting" in d for d in report.defaults)
    assert _check_errors(doc) == []


def test_accounting_reads_slurmdbd_associations():
    """sacctmgr's parsable rows (as `read` asks for them) become the account tree."""
    # Account|ParentName|User|Partition|Fairshare|QOS
    out = {"associations": "root||||1|normal\nroot||root||1|normal\n"
                           "physics|root|||40|normal,long\ntheory|physics|||parent|\n"
                           "theory||alice||1|\nphysics||bob|p|1|\n",
           "qos": "normal|0||\nlong|100|2-00:00:00|gres/gpu=8,cpu=64\n"}
    asked = []

    def run(argv):
        asked.append(argv)
        return out[argv[3]]
    dbd = read("c", run)
    assert asked[0][:5] == ["sacctmgr", "-nP", "show", "associations", "cluster=c"]
    text = BASE.replace("Default=YES", "Default=YES AllowAccounts=physics,ghost")
    doc, report = import_slurm(Sources(text), accounting=dbd)
    accounts = {a["name"]: a for a in doc["slurm"]["accounts"]}
    assert accounts["physics"] == {"name": "physics", "parent": "root", "fairshare": 40,
                                   "qos": ["normal", "long"], "users": ["bob"]}
    assert accounts["theory"] == {"name": "theory", "parent": "physics", "fairshare": 1,
                                  "users": ["alice"]}
    assert accounts["ghost"] == {"name": "ghost", "fairshare": 1}
    qos = {q["name"]: q for q in doc["slurm"]["qos"]}
    assert qos["long"] == {"name": "long", "priority": 100, "max_wall": "2-00:00:00",
                           "max_gpus_per_user": 8}
    texts = {d.text for d in report.dropped}
    assert {"account theory Fairshare=parent", "association bob@physics partition=p",
            "QOS long MaxTRESPU=gres/gpu=8,cpu=64"} <= texts
    assert _check_errors(doc) == []


def test_accounting_without_sacctmgr_writes_nothing(tmp_path, monkeypatch):
    conf = tmp_path / "slurm.conf"
    conf.write_text(BASE)
    monkeypatch.setenv("PATH", str(tmp_path))      # no sacctmgr on it
    out = tmp_path / "spec.yaml"
    res = CliRunner().invoke(app, ["import", str(conf), "-o", str(out), "--accounting"])
    assert res.exit_code == 1 and "sacctmgr is not installed" in res.output
    assert not out.exists()


TOPOLOGY = ("SwitchName=leaf1 Nodes=n[1-2],ghost[1-3]\nSwitchName=leaf2 Nodes=n[3-4]\n"
            "SwitchName=leaf3 Nodes=ghost[4-8]\nSwitchName=spine Switches=leaf[1-3]\n")


def test_topology_members_no_node_defines_are_dropped():
    doc, report = import_slurm(Sources(BASE, topology=TOPOLOGY))
    assert doc["topology"]["switches"] == [
        {"name": "leaf1", "nodes": "n[1-2]"}, {"name": "leaf2", "nodes": "n[3-4]"},
        {"name": "spine", "switches": ["leaf1", "leaf2"]}]
    dropped = {(d.line, d.text) for d in report.dropped if d.file == "topology.conf"}
    assert dropped == {(1, "SwitchName=leaf1 Nodes=ghost[1-3]"),
                       (3, "SwitchName=leaf3 Nodes=ghost[4-8]"), (3, "SwitchName=leaf3")}
    assert "Invalid hostnames" in next(d.reason for d in report.dropped if d.line == 1)
    assert _check_errors(doc) == []


def test_a_file_without_nodes_is_not_written(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nInclude /etc/slurm/nodes.conf\nPartitionName=p Nodes=a1\n")
    out = tmp_path / "spec.yaml"
    res = CliRunner().invoke(app, ["import", str(conf), "-o", str(out)])
    assert res.exit_code == 1 and not out.exists()
    assert f"not written: {conf}: no NodeName line defines a node" in res.output


def test_partitions_and_node_sets_lose_the_hosts_no_line_defines():
    text = BASE.replace("PartitionName=p Nodes=n[1-4] Default=YES",
                        "NodeSet=s Nodes=n[1-2],gone1\nPartitionName=p Nodes=n[3-4],gone2,s "
                        "Default=YES\nPartitionName=q Nodes=gone[3-4]")
    doc, report = import_slurm(Sources(text))
    assert doc["slurm"]["nodesets"] == [{"name": "s", "nodes": "n[1-2]"}]
    assert [(p["name"], p.get("nodes"), p.get("nodesets")) for p in doc["slurm"]["partitions"]] \
        == [("p", "n[3-4]", ["s"])]
    assert {(d.line, d.text) for d in report.dropped} >= {
        (4, "Nodes=gone1 (NodeSet=s)"), (5, "Nodes=gone2 (PartitionName=p)"),
        (6, "Nodes=gone[3-4] (PartitionName=q)")}
    assert _check_errors(doc) == []


def test_the_next_suites_release_has_its_own_table():
    """Debian forky ships Slurm 26.05 (catalogue.NEXT_SUITES): its table is read from its
    packages and differs from 24.11's (keys added and removed), so no release's answers
    are assumed from another's."""
    assert next_versions() == sorted(NEXT_SUITES) == ["26.05"]
    source = json.loads((KEYS_DIR / "next" / "26.05.json").read_text())["source"]
    assert "slurm-wlm-basic-plugins 26.05." in source["slurm.conf"]
    assert "metricstype" in conf_keys("26.05") and "metricstype" not in conf_keys("24.11")
    assert "accountingstorageloc" in conf_keys("24.11")
    assert "accountingstorageloc" not in conf_keys("26.05")
    doc, report = import_slurm(Sources(BASE + "MetricsType=metrics/openmetrics\n"),
                               version="24.11")
    assert "only Slurm 26.05 (Debian's next suite)" in report.dropped[0].reason


def test_privacy_and_submission_limits_land_in_their_typed_fields():
    text = BASE + "EnforcePartLimits=YES\nPrivateData=jobs,usage,bogus\n"
    doc, report = import_slurm(Sources(text), version="22.05")
    assert doc["slurm"]["enforce_part_limits"] == "ANY"     # YES is ANY's old spelling
    assert doc["slurm"]["private_data"] == ["jobs", "usage"]
    assert "EnforcePartLimits" not in doc["slurm"].get("extra", {})
    assert any("bogus" in d.text for d in report.dropped)
