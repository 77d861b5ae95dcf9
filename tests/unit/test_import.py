"""estate import: the parser's edge cases, the mapping onto the spec, the report (nothing
dropped silently) and the command (atomic write, --strict)."""
from __future__ import annotations

import yaml
from typer.testing import CliRunner

from estate.cli import app
from estate.importer.mapping import Sources, import_slurm
from estate.importer.parse import logical_lines, parse
from estate.importer.roundtrip import report_differences
from estate.spec.model import Spec

BASIC = """\
ClusterName=demo   # trailing comment
SlurmctldHost=head(10.1.0.1)
selecttypeparameters=CR_Core_Memory
MaxJobCount=20000
NodeName=DEFAULT Sockets=2 CoresPerSocket=16 \\
    ThreadsPerCore=2 RealMemory=190000
NodeName=cn[001-004] NodeAddr=10.1.0.[11-14]
NodeName=cn[005-006] NodeAddr=10.1.0.[15-16]
NodeName=gpu[1-2] Gres=gpu:a100:4 TmpDisk=1000
PartitionName=DEFAULT MaxTime=2-00:00:00 State=UP
PartitionName=batch Nodes=cn[001-006] Default=YES
PartitionName=gpu Nodes=gpu[1-2] Shared=NO
"""


def _import(text: str, **kw):
    return import_slurm(Sources(text, **kw))


def test_comments_and_continuation_lines():
    lines = logical_lines("a=1 # x\n# whole\nb=2 \\\n  c=3\nd=\\#4\n")
    assert lines == [(1, "a=1"), (3, "b=2    c=3"), (5, "d=#4")]


def test_keys_are_case_insensitive_and_quotes_kept_together():
    line = parse('PARTITIONNAME=p nodes=n1 AllowGroups="a,b"\n')[0]
    assert line.keyword == "partitionname"
    assert line.params()["allowgroups"] == ("AllowGroups", "a,b")


def test_include_is_reported_with_its_line():
    _, report = _import("ClusterName=x\nInclude /etc/slurm/nodes.conf\nNodeName=n1\n")
    assert [(d.line, d.text) for d in report.dropped] == [(2, "Include /etc/slurm/nodes.conf")]


def test_node_defaults_and_one_class_for_identical_lines():
    doc, _ = _import(BASIC)
    classes = {c["name"]: c for c in doc["node_classes"]}
    assert classes["c64-m190000"] == {"name": "c64-m190000", "sockets": 2,
                                      "cores_per_socket": 16, "threads_per_core": 2,
                                      "memory_mb": 190000}
    groups = [g for g in doc["nodes"] if g["class"] == "c64-m190000"]
    assert [g["hosts"] for g in groups] == ["cn[001-004]", "cn[005-006]"]
    assert groups[1]["addresses"] == {"management": "10.1.0.15"}


def test_partition_default_line_and_unknown_partition_key_reported():
    doc, report = _import(BASIC)
    parts = {p["name"]: p for p in doc["slurm"]["partitions"]}
    assert parts["gpu"]["max_time"] == "2-00:00:00" and parts["batch"]["default"] is True
    assert any(d.line == 12 and d.text.startswith("Shared=NO") for d in report.dropped)


def test_unknown_settings_go_to_extra_or_the_report():
    doc, report = _import(BASIC + "FooBar=1\nTaskPlugin=task/affinity\n")
    assert doc["slurm"]["extra"] == {"MaxJobCount": "20000"}
    assert doc["slurm"]["select_type_parameters"] == ["CR_Core_Memory"]
    dropped = {d.line: d.reason for d in report.dropped}
    assert "not a slurm.conf key" in dropped[13]
    assert "Estate writes this key itself" in dropped[14]
    assert any(d.line == 9 and d.text.startswith("TmpDisk") for d in report.dropped)


def test_no_addresses_no_racks_still_a_valid_spec():
    doc, report = _import("ClusterName=tiny\nControlMachine=n1\nNodeName=n[1-3] CPUs=4\n"
                          "PartitionName=all Nodes=ALL Default=YES MaxTime=UNLIMITED\n")
    spec = Spec.model_validate(doc)
    assert all(not g.addresses and g.rack is None for g in spec.nodes)
    # the controller is a compute node too: split into its own group
    assert [(g.hosts, g.roles) for g in spec.nodes] == [
        ("n1", ["slurm_controller", "slurm_worker"]), ("n[2-3]", ["slurm_worker"])]
    assert spec.nodes[0].node_class == "c4-m1" and spec.node_classes[0].sockets == 4
    assert spec.slurm.partitions[0].nodes == "n[1-3]"
    assert spec.slurm.partitions[0].max_time == "INFINITE"
    assert any("segment management" in d for d in report.defaults)


def test_nodes_all_is_reported_as_changed():
    """Nodes=ALL becomes today's node list, which dynamic nodes added later do not join
    (24.11's scontrol shows the original as NodeSets=ALL: tests/live_slurm)."""
    _, report = _import("ClusterName=tiny\nControlMachine=n1\nNodeName=n[1-3] CPUs=4\n"
                        "PartitionName=all Nodes=ALL Default=YES\nPartitionName=p Nodes=n1\n")
    assert [(d.kind, d.line, d.text) for d in report.dropped if "dynamic" in d.reason] == [
        ("changed", 4, "Nodes=ALL (PartitionName=all)")]


def test_rendered_differences_are_reported_per_source_line():
    doc, report = _import(BASIC)
    assert report_differences(BASIC, doc, report, "slurm.conf")
    changed = {(d.line, d.text) for d in report.dropped if d.kind == "changed"}
    assert (12, "PartitionName=gpu DefCpuPerGPU") in changed
    assert not any(d.line in (7, 8) for d in report.dropped)   # those nodes render the same


def test_untyped_gres_stays_untyped():
    text = "ClusterName=g\nNodeName=g1 Gres=gpu:2 CPUs=8\nPartitionName=p Nodes=g1\n"
    doc, report = _import(text)
    report_differences(text, doc, report, "slurm.conf")
    assert not [d for d in report.dropped if d.line == 2], report.dropped
    group = next(g for g in doc["nodes"] if g["hosts"] == "g1")
    assert group["slurm"]["gres_typed"] is False and group["slurm"]["gres_count"] == 2


def test_topology_and_gres_files():
    doc, report = _import(BASIC, gres="Name=gpu Type=a100 File=/dev/nvidia[0-3]\n"
                          "Name=mps Count=100\n",
                          topology="SwitchName=s1 Nodes=cn[001-006]\n"
                          "SwitchName=s2 Nodes=gpu[1-2]\nSwitchName=top Switches=s[1-2]\n")
    assert doc["slurm"]["gpu_device_path"] == "/dev/nvidia"
    assert doc["topology"]["switches"][2] == {"name": "top", "switches": ["s1", "s2"]}
    assert [(d.file, d.line) for d in report.dropped] == [("slurm.conf", 9), ("slurm.conf", 12),
                                                          ("gres.conf", 2)]


def test_service_users_from_passwd(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text("slurm:x:999:998::/var/lib/slurm:/bin/false\n")
    doc, report = import_slurm(Sources("ClusterName=x\nNodeName=n1\n"), passwd=passwd)
    users = {u["name"]: u["uid"] for u in doc["identity"]["users"]}
    assert users == {"slurm": 999, "munge": 64031}
    assert any("munge" in d for d in report.defaults)


def test_cli_writes_spec_with_record_and_strict_fails(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text(BASIC)
    out = tmp_path / "spec.yaml"
    res = CliRunner().invoke(app, ["import", str(conf), "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert f"changed: {conf}:12: Shared=NO (PartitionName=gpu)  -- written as OverSubscribe=NO" in text
    Spec.model_validate(yaml.safe_load(text))
    check = CliRunner().invoke(app, ["check", str(out)])
    assert check.exit_code == 0, check.output
    strict = tmp_path / "strict.yaml"
    res = CliRunner().invoke(app, ["import", str(conf), "-o", str(strict), "--strict"])
    assert res.exit_code == 1 and not strict.exists()


def test_backup_controllers_are_reported_on_their_lines():
    """A backup needs StateSaveLocation on shared storage slurm.conf does not name: the
    spec keeps the primary (so it checks clean) and the report says how to add the rest."""
    doc, report = _import("ClusterName=x\nSlurmctldHost=a\nSlurmctldHost=b\nSlurmctldHost=c\n"
                          "NodeName=n1\n")
    assert doc["slurm"]["controllers"] == ["a"]
    assert [(d.line, d.text) for d in report.dropped] == [(3, "SlurmctldHost=b"),
                                                           (4, "SlurmctldHost=c")]
    assert "storage.exports" in report.dropped[0].reason


def test_nodes_with_and_without_addresses_render_separate_lines():
    """Controllers with an address split from a NodeName line without NodeAddr: one line
    mixing both would list fewer addresses than names, which slurmctld refuses."""
    from estate.importer.roundtrip import rendered_slurm_conf
    from estate.spec import hostlist
    doc, _ = _import("ClusterName=x\nSlurmctldHost=n1(10.0.0.5)\nNodeName=n[1-4] CPUs=2\n"
                     "PartitionName=p Nodes=ALL\n")
    lines = [ln for ln in parse(rendered_slurm_conf(doc)) if ln.keyword == "nodename"]
    for line in lines:
        addr = line.params().get("nodeaddr")
        if addr:
            assert len(hostlist.expand(addr[1])) == len(hostlist.expand(line.name))
    assert sorted(ln.name for ln in lines) == ["n1", "n[2-4]"]


def test_cgroup_conf_lines_are_reported_as_estates_own():
    _, report = _import("ClusterName=x\nNodeName=n1\n",
                        cgroup="# c\nConstrainCores=yes\nConstrainRAMSpace=yes\n")
    assert [(d.file, d.line) for d in report.dropped] == [("cgroup.conf", 2),
                                                          ("cgroup.conf", 3)]


def test_features_with_values_and_specialized_resources_are_kept():
    doc, report = _import("ClusterName=x\nSlurmctldHost=head\n"
                          "NodeName=cn[1-2] Sockets=2 CoresPerSocket=8 RealMemory=64000 "
                          "Features=CPU_GEN:SKX,ib CoreSpecCount=2 MemSpecLimit=4096\n"
                          "PartitionName=p Nodes=cn[1-2] Default=YES\n")
    group = next(g for g in doc["nodes"] if g["hosts"] == "cn[1-2]")
    assert group["slurm"] == {"real_memory_mb": 64000, "features": ["CPU_GEN:SKX", "ib"],
                              "core_spec_count": 2, "mem_spec_limit_mb": 4096}
    assert not [d for d in report.dropped if "cn[1-2]" in d.text or "Feature" in d.text]
    Spec.model_validate(doc)


CLOUD = ("ClusterName=x\nSlurmctldHost=head\nResumeProgram=/opt/site/resume\n"
         "SuspendProgram=/opt/site/suspend\nSuspendTime=900\nNodeName=c[1-4] CPUs=4 "
         "State=CLOUD\nNodeName=f1 CPUs=4 State=FUTURE\n"
         "PartitionName=p Nodes=c[1-4],f1 Default=YES\n")


def test_cloud_and_future_nodes_keep_their_state_with_the_programs():
    doc, report = import_slurm(Sources(CLOUD),
                               can_read=lambda path: path.startswith("/opt/site/"))
    states = {g["hosts"]: g.get("slurm", {}).get("state") for g in doc["nodes"]}
    assert states["c[1-4]"] == "cloud" and states["f1"] == "future"
    assert doc["slurm"]["power_saving"] == {"resume_program": "hooks/resume",
                                            "suspend_program": "hooks/suspend",
                                            "suspend_time": 900}
    assert report.files == {"hooks/resume": "/opt/site/resume",
                            "hooks/suspend": "/opt/site/suspend"}
    assert not report.dropped


def test_cloud_nodes_without_their_programs_are_ordinary_and_reported():
    doc, report = import_slurm(Sources(CLOUD), can_read=lambda path: False)
    states = {g["hosts"]: g.get("slurm", {}).get("state") for g in doc["nodes"]}
    assert states["c[1-4]"] is None and states["f1"] == "future"
    assert "power_saving" not in doc["slurm"] and not report.files
    assert {(d.line, d.kind) for d in report.dropped} == {
        (3, "dropped"), (4, "dropped"), (5, "dropped"), (6, "changed")}


def test_the_programs_are_copied_next_to_the_written_spec(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    for name in ("resume", "suspend"):
        (site / name).write_text(f"#!/bin/sh\n# {name}\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text(CLOUD.replace("/opt/site", str(site)))
    out = tmp_path / "spec" / "estate.yaml"
    res = CliRunner().invoke(app, ["import", str(conf), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert (out.parent / "hooks" / "resume").read_text() == "#!/bin/sh\n# resume\n"
    check = CliRunner().invoke(app, ["check", str(out)])
    assert check.exit_code == 0, check.output


def test_nodesets_map_back_and_partitions_name_them():
    text = BASIC.replace("NodeName=gpu[1-2] Gres=gpu:a100:4 TmpDisk=1000",
                         "NodeName=gpu[1-2] Gres=gpu:a100:4 Features=a100") + (
        "NodeSet=cpus Nodes=cn[001-006]\nNodeSet=gpus Feature=a100\n"
        "NodeSet=odd Nodes=ALL\n"
        "PartitionName=mixed Nodes=cpus,gpu1 MaxTime=1:00:00\n"
        "PartitionName=all-gpus Nodes=gpus MaxTime=1:00:00\n")
    doc, report = _import(text)
    assert doc["slurm"]["nodesets"] == [{"name": "cpus", "nodes": "cn[001-006]"},
                                        {"name": "gpus", "feature": "a100"}]
    parts = {p["name"]: p for p in doc["slurm"]["partitions"]}
    assert parts["mixed"]["nodes"] == "gpu1" and parts["mixed"]["nodesets"] == ["cpus"]
    assert "nodes" not in parts["all-gpus"] and parts["all-gpus"]["nodesets"] == ["gpus"]
    assert [d.text for d in report.dropped if "node set" in d.reason] == ["NodeSet=odd Nodes=ALL"]
    spec = Spec.model_validate(doc)
    assert report_differences(text, doc, report, "slurm.conf")
    # the rendered Nodes= names the same node sets and hosts
    assert not [d for d in report.dropped if d.text.endswith(" Nodes")], report.dropped
    assert spec.slurm.nodesets[1].feature == "a100"


def test_several_gpu_types_on_a_node_become_a_class_of_gpu_kinds():
    doc, report = _import(BASIC.replace("Gres=gpu:a100:4 TmpDisk=1000",
                                        "Gres=gpu:a100:4,gpu:t4:2,gpu:a100:1"))
    cls = next(c for c in doc["node_classes"] if c["name"].endswith("-a100x4-t4x2"))
    assert [(g["model"], g["count"]) for g in cls["gpus"]] == [("a100", 4), ("t4", 2)]
    assert [d.text for d in report.dropped if d.text.startswith("Gres item")] == \
        ["Gres item gpu:a100:1"]
    spec = Spec.model_validate(doc)
    assert next(c for c in spec.node_classes if c.name == cls["name"]).gpu_count == 6
    assert report_differences(BASIC.replace("Gres=gpu:a100:4 TmpDisk=1000",
                                            "Gres=gpu:a100:4,gpu:t4:2"), doc, report, "s")
    assert not [d for d in report.dropped if d.text.endswith(" Gres")], report.dropped


def test_blanks_around_the_equals_sign_are_read_as_slurm_reads_them():
    """Slurm's key=value pattern allows blanks around '=' ("ClusterName = nsls2"); a
    quoted value keeps its own."""
    pairs = parse('ClusterName = nsls2\nFoo="a = b" Bar= 3\n')
    assert pairs[0].pairs == [("ClusterName", "nsls2")]
    assert pairs[1].pairs == [("Foo", "a = b"), ("Bar", "3")]
