"""estate.verify.slurm_view on output recorded from Slurm 22.05 running stacks/lab.yaml
(the live_slurm tier checks the same against running daemons)."""
from __future__ import annotations

from pathlib import Path

import pytest

from estate.spec.load import load
from estate.spec.resolved import Estate
from estate.verify.slurm_view import (SlurmView, compare, parse_record, state_fix, time_seconds,
                                      usable)

LAB = Path(__file__).resolve().parents[2] / "stacks/lab.yaml"

NODE = ("NodeName={n} Arch=x86_64 CoresPerSocket=4  CPUAlloc=0 CPUEfctv=4 CPUTot=4 "
        "CPULoad=1.06 AvailableFeatures=a100,ib ActiveFeatures=a100,ib Gres=gpu:a100:2 "
        "NodeAddr={addr} NodeHostName={n} Version=22.05.8 OS=Linux 6.18.44-fc-v782 #1 SMP "
        "PREEMPT_DYNAMIC @0  RealMemory=7680 AllocMem=0 FreeMem=22131 Sockets=1 Boards=1 "
        "State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
        "Partitions=gpu,urgent  BootTime=2026-11-30T15:03:30 SlurmdStartTime=2026-11-30T15:12:16 "
        "CfgTRES=cpu=4,mem=7.50G,billing=4,gres/gpu=2 AllocTRES= CapWatts=n/a")
PARTITION = (
    "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES "
    "QoS=normal DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=10 Hidden=NO "
    "MaxNodes=UNLIMITED MaxTime=1-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED "
    "Nodes=gpu[1-2] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO "
    "OverTimeLimit=NONE PreemptMode=REQUEUE State=UP TotalCPUs=8 TotalNodes=2 "
    "SelectTypeParameters=NONE JobDefaults=DefCpuPerGPU=2,DefMemPerGPU=3840 DefMemPerCPU=1920 "
    "MaxMemPerNode=UNLIMITED TRES=cpu=8,mem=15G,node=2,billing=8,gres/gpu=4\n"
    "PartitionName=urgent AllowGroups=ALL DenyAccounts=vision AllowQos=normal,debug "
    "AllocNodes=ALL Default=NO QoS=N/A DefaultTime=00:20:00 DisableRootJobs=NO ExclusiveUser=NO "
    "GraceTime=0 Hidden=YES MaxNodes=UNLIMITED MaxTime=02:00:00 MinNodes=0 LLN=NO "
    "MaxCPUsPerNode=UNLIMITED Nodes=gpu[1-2] PriorityJobFactor=1 PriorityTier=2 RootOnly=NO "
    "ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=8 "
    "TotalNodes=2 SelectTypeParameters=NONE JobDefaults=DefCpuPerGPU=2,DefMemPerGPU=3840 "
    "DefMemPerCPU=1920 MaxMemPerNode=7680 TRES=cpu=8,mem=15G,node=2,billing=24,gres/gpu=4 "
    "TRESBillingWeights=CPU=1,GRES/gpu=4")
TOPOLOGY = ("SwitchName=spine1 Level=1 LinkSpeed=1 Nodes=gpu[1-2] Switches=leaf1\n"
            "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu[1-2]\n")
SINFO = "gpu1|gpu*|idle\ngpu1|urgent|idle\ngpu2|gpu*|idle\ngpu2|urgent|idle\n"


def nodes(state1="IDLE", state2="IDLE"):
    return "\n".join([NODE.format(n="gpu1", addr="10.60.0.13", state=state1),
                      NODE.format(n="gpu2", addr="10.60.0.14", state=state2)])


@pytest.fixture(scope="module")
def estate():
    return Estate(load(LAB).spec)


def test_records_keep_values_with_spaces_and_equals_signs():
    rec = parse_record(NODE.format(n="gpu1", addr="10.60.0.13", state="IDLE"))
    assert rec["OS"] == "Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0"
    assert rec["CfgTRES"] == "cpu=4,mem=7.50G,billing=4,gres/gpu=2"
    assert rec["AllocTRES"] == "" and rec["Gres"] == "gpu:a100:2"


def test_the_recorded_lab_matches_its_spec(estate):
    assert compare(estate, SlurmView.parse(nodes(), PARTITION, TOPOLOGY, SINFO)) == []


def test_every_kind_of_difference_is_reported(estate):
    view = SlurmView.parse(
        nodes(state2="IDLE+DRAIN").replace("RealMemory=7680", "RealMemory=4096", 1),
        PARTITION.replace("Default=YES", "Default=NO").replace("1-00:00:00", "12:00:00")
        .replace("DefaultTime=00:20:00", "DefaultTime=02:00:00")
        .replace("GraceTime=0 Hidden=YES", "GraceTime=0 Hidden=NO")
        .replace("PreemptMode=REQUEUE", "PreemptMode=CANCEL")
        .replace("DefCpuPerGPU=2,DefMemPerGPU=3840 DefMemPerCPU=1920 MaxMemPerNode=7680",
                 "DefCpuPerGPU=1 DefMemPerCPU=1920 MaxMemPerNode=UNLIMITED")
        .replace("AllowQos=normal,debug", "AllowQos=ALL")
        .replace("DenyAccounts=vision", "AllowAccounts=ALL"),
        TOPOLOGY.replace("Level=0 LinkSpeed=1 Nodes=gpu[1-2]", "Level=0 LinkSpeed=1 Nodes=gpu1"),
        SINFO.replace("gpu2|gpu*", "gpu2|gpu") + "gpu9|gpu*|idle\n")
    got = {(m.subject, m.field) for m in compare(estate, view)}
    assert got == {("node gpu1", "RealMemory"), ("node gpu2", "State"),
                   ("partition gpu", "Default"), ("partition gpu", "MaxTime"),
                   ("partition gpu", "PreemptMode"), ("partition urgent", "DefaultTime"),
                   ("partition urgent", "Hidden"), ("partition urgent", "JobDefaults"),
                   ("partition urgent", "MaxMemPerNode"), ("partition urgent", "AllowQos"),
                   ("partition urgent", "DenyAccounts"),
                   ("switch leaf1", "Nodes"), ("node gpu2", "sinfo partition"),
                   ("node gpu9", "sinfo partition")}


def test_missing_and_unknown_nodes_are_reported(estate):
    only_gpu1 = NODE.format(n="gpu1", addr="10.60.0.13", state="IDLE")
    stray = NODE.format(n="gpu7", addr="10.60.0.99", state="IDLE")
    view = SlurmView.parse(only_gpu1 + "\n" + stray, PARTITION, TOPOLOGY, SINFO)
    assert {(m.subject, m.actual) for m in compare(estate, view)} == {
        ("node gpu2", "missing from Slurm"), ("node gpu7", "defined in Slurm")}


@pytest.mark.parametrize("state,ok", [
    ("IDLE", True), ("MIXED", True), ("ALLOCATED+COMPLETING", True), ("IDLE+DRAIN", False),
    ("DOWN*", False), ("IDLE*", False), ("INVAL", False), ("IDLE+NOT_RESPONDING", False),
    ("UNKNOWN", False), ("", False)])
def test_usable_states(state, ok):
    assert usable(state) is ok


@pytest.mark.parametrize("text,seconds", [
    ("30", 1800), ("00:30:00", 1800), ("1-00:00:00", 86400), ("24:00:00", 86400),
    ("2-12", 216000), ("1:30", 90), ("UNLIMITED", None), ("INFINITE", None)])
def test_time_limits_compare_by_value(text, seconds):
    assert time_seconds(text) == seconds


def test_a_node_that_stopped_answering_is_named_with_what_to_do(estate):
    view = SlurmView.parse(nodes(state2="IDLE+NOT_RESPONDING"), PARTITION, TOPOLOGY, SINFO)
    [m] = compare(estate, view)
    assert (m.subject, m.field, m.actual) == ("node gpu2", "State", "IDLE+NOT_RESPONDING")
    assert str(m).endswith("slurmd on gpu2 is not responding: start slurmd on gpu2 "
                           "(systemctl start slurmd), then `scontrol update nodename=gpu2 "
                           "state=resume` if it does not return by itself")


@pytest.mark.parametrize("state,says", [
    ("idle*", "not responding"), ("DOWN+NOT_RESPONDING", "not responding"),
    ("IDLE+DRAIN", "is drained"), ("DOWN", "set gpu1 DOWN"), ("INVAL", "slurmd -C"),
    ("UNKNOWN", "has not registered"),
    ("FUTURE", "")])
def test_each_unusable_state_says_what_to_do(state, says):
    fix = state_fix("gpu1", state)
    assert (says in fix) if says else fix == ""


# `scontrol show topology` of Slurm 24.11.5 (Debian 13) on tests/live_slurm/two_block.yaml
BLOCKS = ("BlockName=b1 BlockIndex=0 Nodes=gpu[1-2] BlockSize=2\n"
          "BlockName=b2 BlockIndex=1 Nodes=gpu[3-4] BlockSize=2\n"
          "AggregatedBlock=b[1-2] BlockIndex=2 Nodes=gpu[1-4] BlockSize=4\n")
TWO_BLOCK = Path(__file__).resolve().parents[2] / "tests/live_slurm/two_block.yaml"


def block_mismatches(topology: str) -> set[tuple[str, str, str, str]]:
    view = SlurmView.parse("", "", topology, "")
    return {(m.subject, m.field, m.expected, m.actual) for m in
            compare(Estate(load(TWO_BLOCK).spec), view) if m.subject.startswith("block ")}


def test_blocks_read_back_from_topology_block():
    assert block_mismatches(BLOCKS) == set()


def test_blocks_that_differ_are_named():
    other = BLOCKS.replace("Nodes=gpu[3-4] BlockSize=2", "Nodes=gpu[3-5] BlockSize=2") \
                  .replace("BlockName=b1 BlockIndex=0 Nodes=gpu[1-2] BlockSize=2",
                           "BlockName=b9 BlockIndex=0 Nodes=gpu[1-2] BlockSize=1")
    assert block_mismatches(other) == {
        ("block b1", "presence", "defined", "missing from Slurm"),
        ("block b2", "Nodes", "gpu[3-4]", "gpu[3-5]"),
        ("block b9", "presence", "not in the spec", "defined in Slurm")}
    assert ("block b1", "BlockSize", "2", "3") in block_mismatches(
        BLOCKS.replace("gpu[1-2] BlockSize=2", "gpu[1-2] BlockSize=3"))
