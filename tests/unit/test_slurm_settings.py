"""Slurm settings from the spec: accounts.cfg, the per-partition job defaults, the
InfiniBand MEMLOCK default, slurm.extra and the key list it is checked against."""
from __future__ import annotations

import re

import yaml

from estate.model.slurm import default_time
from estate.model.slurm_keys import MERGED, OWNED, closest, conf_keys, scheduler_options, source
from estate.render.slurm import render_slurm
from estate.spec.load import load_text
from estate.spec.model import Partition
from estate.spec.resolved import Estate
from tests.unit.checkutil import findings_for, spec_dict


def render(data: dict) -> dict[str, str]:
    loaded = load_text(yaml.safe_dump(data, sort_keys=False))
    assert loaded.spec is not None, loaded.findings
    return {a.path: a.content.decode() for a in render_slurm(Estate(loaded.spec))}


def partition_line(conf: str, name: str) -> dict[str, str]:
    line = next(l for l in conf.splitlines() if l.startswith(f"PartitionName={name} "))
    return dict(word.split("=", 1) for word in line.split())


def global_keys(conf: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"(?m)^([A-Za-z]+)=", conf)]


# --- accounts.cfg --------------------------------------------------------------------

def test_child_accounts_keep_their_qos():
    cfg = render(spec_dict("prod"))["slurm/accounts.cfg"]
    assert "Account - 'vision':Fairshare=20:QOS='normal,debug'" in cfg.splitlines()


def test_a_user_in_two_accounts_gets_one_default_account_first():
    lines = render(spec_dict("prod"))["slurm/accounts.cfg"].splitlines()
    carol = [i for i, l in enumerate(lines) if l.startswith("User - 'carol'")]
    assert len(carol) == 2
    assert [("DefaultAccount" in lines[i]) for i in carol] == [True, False]
    assert "DefaultAccount='research'" in lines[carol[0]]


def test_a_parent_account_comes_before_its_children_whatever_the_spec_order():
    data = spec_dict("prod")
    accounts = data["slurm"]["accounts"]
    accounts.insert(0, accounts.pop(1))           # vision before research
    lines = render(data)["slurm/accounts.cfg"].splitlines()
    assert lines.index("Parent - 'research'") > \
        lines.index("Account - 'research':Fairshare=60:QOS='normal,interactive,debug'")
    assert lines.index("Account - 'vision':Fairshare=20:QOS='normal,debug'") > \
        lines.index("Parent - 'research'")


# --- partitions --------------------------------------------------------------------------

def test_gpu_partitions_get_the_node_classes_share_per_gpu():
    part = partition_line(render(spec_dict("prod"))["slurm/slurm.conf"], "batch")
    # h100-8x: 2 x 56 cores x 2 threads = 224 CPUs, RealMemory 2000000, 8 GPUs
    assert (part["DefCpuPerGPU"], part["DefMemPerGPU"]) == ("28", "250000")


def test_the_spec_overrides_the_per_gpu_defaults():
    data = spec_dict("prod")
    data["slurm"]["partitions"][0] |= {"def_cpu_per_gpu": 16, "def_mem_per_gpu_mb": 128000}
    part = partition_line(render(data)["slurm/slurm.conf"], "batch")
    assert (part["DefCpuPerGPU"], part["DefMemPerGPU"]) == ("16", "128000")


def test_a_partition_mixing_node_shapes_gets_no_derived_per_gpu_defaults():
    data = spec_dict("prod")
    data["nodes"][3]["slurm"]["real_memory_mb"] = 1900000   # gpu[065-096] differ
    conf = render(data)["slurm/slurm.conf"]
    assert "DefCpuPerGPU" not in partition_line(conf, "batch")
    assert partition_line(conf, "interactive")["DefCpuPerGPU"] == "28"   # gpu[001-016] only


def part(**kw) -> Partition:
    return Partition(name="p", nodes="n1", **kw)


def test_default_time_is_max_time_capped_at_one_hour():
    assert default_time(part()) == "01:00:00"                          # INFINITE
    assert default_time(part(max_time="2-00:00:00")) == "01:00:00"
    assert default_time(part(max_time="00:30:00")) == "00:30:00"
    assert default_time(part(max_time="2-00:00:00", default_time="04:00:00")) == "04:00:00"


# --- cluster settings ----------------------------------------------------------------------

def test_infiniband_nodes_get_memlock_propagation_excepted():
    conf = render(spec_dict("prod"))["slurm/slurm.conf"]
    assert "PropagateResourceLimitsExcept=MEMLOCK" in conf.splitlines()


def test_no_infiniband_no_propagation_line_and_the_spec_can_set_it():
    data = spec_dict("prod")
    data["node_classes"][0]["nics"] = [{"name": "eth0", "speed_gbps": 100}]
    assert "PropagateResourceLimits" not in render(data)["slurm/slurm.conf"]
    data["slurm"]["propagate_resource_limits_except"] = ["MEMLOCK", "STACK"]
    assert "PropagateResourceLimitsExcept=MEMLOCK,STACK" in render(data)["slurm/slurm.conf"]


def test_extra_settings_are_written_in_slurms_spelling():
    data = spec_dict("prod")
    data["slurm"]["extra"] = {"maxjobcount": 5000, "TreeWidth": 64}
    lines = render(data)["slurm/slurm.conf"].splitlines()
    assert "MaxJobCount=5000" in lines and "TreeWidth=64" in lines


def test_extra_values_cannot_open_a_new_line_or_a_comment():
    for bad in ("1\nSlurmUser=root", "1 # x", "a b"):
        data = spec_dict("prod")
        data["slurm"]["extra"] = {"TreeWidth": bad}
        assert any(f.path == "slurm.extra.TreeWidth" for f in findings_for(data)), bad


def test_every_key_the_template_writes_is_owned():
    """slurm.extra must not set what Estate writes: every global key of the rendered
    slurm.conf (all options on) is in OWNED, so a template change cannot slip past."""
    data = spec_dict("prod")
    data["slurm"] |= {"propagate_resource_limits_except": ["MEMLOCK"],
                      "priority": {"tres": {"GRES/gpu": 1}, "flags": ["MAX_TRES"]},
                      "config_overrides": True, "extra": {}}
    keys = set()
    for d in (data, spec_dict("lab")):
        d["slurm"]["extra"] = {}
        keys |= {k.lower() for k in global_keys(render(d)["slurm/slurm.conf"])}
    assert keys - OWNED - MERGED == set()


def test_owned_keys_are_keys_slurm_knows():
    assert OWNED - set(conf_keys()) == {"include"}   # Include is a directive, not a key


def test_the_key_list_names_its_source_and_holds_what_slurm_parses():
    assert "libslurmfull.so" in source()["slurm.conf"]
    keys = conf_keys()
    assert {"clustername", "slurmctldtimeout", "nodename", "partitionname"} <= set(keys)
    assert keys["maxjobcount"] == "MaxJobCount"
    assert {"bf_continue", "bf_window", "default_queue_depth"} <= scheduler_options()
    assert closest("SlurmctldTimout", keys.values()) == "SlurmctldTimeout"


def test_scheduler_parameters_are_flags_or_numbers():
    data = spec_dict("prod")
    data["slurm"]["scheduler_parameters"] = {"bf_continue": True, "bf_window": 4320}
    assert "SchedulerParameters=bf_continue,bf_window=4320" in \
        render(data)["slurm/slurm.conf"].splitlines()
    for bad in (False, -1, "4320 x", 2.5):
        data["slurm"]["scheduler_parameters"] = {"bf_window": bad}
        assert [f.id for f in findings_for(data)
                if f.path == "slurm.scheduler_parameters.bf_window"] == \
            ["schema.scheduler_value"], bad


# --- node settings -------------------------------------------------------------------

def test_node_line_carries_valued_features_and_specialized_resources():
    data = spec_dict("lab")
    data["nodes"][2]["slurm"] |= {"features": ["a100", "CPU_GEN:ZEN3"], "core_spec_count": 1,
                                  "mem_spec_limit_mb": 1024}
    conf = render(data)["slurm/slurm.conf"]
    line = next(l for l in conf.splitlines() if l.startswith("NodeName=gpu[1-2] "))
    words = dict(w.split("=", 1) for w in line.split())
    assert (words["Features"], words["CoreSpecCount"], words["MemSpecLimit"]) == \
        ("a100,CPU_GEN:ZEN3", "1", "1024")
    # jobs get 3 of the 4 cores and 7680 - 1024 MB: the GPU defaults follow
    part = partition_line(conf, "gpu")
    assert (part["DefCpuPerGPU"], part["DefMemPerGPU"]) == ("1", "3328")


def test_a_feature_with_a_constraint_operator_is_refused():
    data = spec_dict("lab")
    data["nodes"][2]["slurm"]["features"] = ["a100|h100"]
    assert any(f.path == "nodes[2].slurm.features[0]" for f in findings_for(data))


# --- GRES ----------------------------------------------------------------------------

def _gres_lines(conf: str) -> list[str]:
    return [l for l in conf.splitlines() if l.startswith("NodeName=")]


def test_gpus_split_over_sockets_are_bound_to_their_cores():
    conf = render(spec_dict("prod"))["slurm/gres.conf"]
    assert _gres_lines(conf) == [
        "NodeName=gpu[001-128] Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-55",
        "NodeName=gpu[001-128] Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111"]


def test_one_socket_or_an_uneven_split_gets_no_cores():
    data = spec_dict("lab")          # gpu-2x: one socket
    assert _gres_lines(render(data)["slurm/gres.conf"]) == [
        "NodeName=gpu[1-2] Name=gpu Type=a100 File=/dev/nvidia[0-1]"]
    data["node_classes"][1] |= {"sockets": 3, "cores_per_socket": 2}
    assert "Cores=" not in render(data)["slurm/gres.conf"]


def test_shards_and_untyped_gpus():
    data = spec_dict("lab")
    data["nodes"][2]["slurm"] |= {"shards_per_gpu": 3, "gres_typed": False}
    files = render(data)
    node = next(l for l in files["slurm/slurm.conf"].splitlines()
                if l.startswith("NodeName=gpu[1-2] "))
    assert " Gres=gpu:2,shard:6 " in node
    assert "GresTypes=gpu,shard" in files["slurm/slurm.conf"].splitlines()
    assert _gres_lines(files["slurm/gres.conf"]) == [
        "NodeName=gpu[1-2] Name=gpu File=/dev/nvidia[0-1]",
        "NodeName=gpu[1-2] Name=shard Count=6"]


# --- privacy, limits at submission, dependencies (issues 38 §2, 44 §2) -------------------

def conf_value(conf: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in conf.splitlines() if line.startswith(f"{key}=")]


def test_a_shared_estate_is_private_by_default_in_slurmctld_and_slurmdbd():
    files = render(spec_dict("lab"))       # three accounts, a bridge tenant
    assert conf_value(files["slurm/slurm.conf"], "PrivateData") == ["accounts,jobs,usage,users"]
    assert conf_value(files["slurm/slurmdbd.conf"], "PrivateData") == \
        ["accounts,jobs,usage,users"]


def test_privacy_is_the_specs_own_and_cloud_merges_where_the_release_reads_it():
    data = spec_dict("lab")
    data["slurm"]["private_data"] = []
    assert conf_value(render(data)["slurm/slurm.conf"], "PrivateData") == []
    data["slurm"]["private_data"] = ["jobs"]
    data["nodes"][2]["slurm"]["state"] = "cloud"
    data["slurm"]["power_saving"] = {"resume_program": "up", "suspend_program": "down"}
    from estate.model.slurm_policy import private_data
    from estate.spec.model import Spec
    for version, want in (("22.05", ["jobs", "cloud"]), ("24.11", ["jobs"])):
        data["slurm"]["version"] = version
        assert private_data(Estate(Spec.model_validate(data))) == want


def test_one_account_and_no_tenant_is_not_private():
    data = spec_dict("lab")
    data["slurm"]["accounts"] = data["slurm"]["accounts"][:1]
    data["kubernetes"]["tenants"] = data["kubernetes"]["tenants"][:1]
    assert conf_value(render(data)["slurm/slurm.conf"], "PrivateData") == []


def test_operators_and_coordinators_are_loaded_and_others_lose_it():
    script = render(spec_dict("lab"))["slurm/accounting.sh"]
    assert "sacctmgr -i modify user where name=bob set adminlevel=Operator" in script
    assert "OPERATORS=' bob '" in script
    assert "sacctmgr -i add coordinator account=research names=alice" in script
    # kept, with the sub-account slurmdbd gives her too; any other is deleted
    assert "            research:alice) ;;\n            vision:alice) ;;\n" in script


def test_jobs_that_can_never_run_are_refused_and_dead_dependencies_end():
    data = spec_dict("lab")
    conf = render(data)["slurm/slurm.conf"]
    assert conf_value(conf, "EnforcePartLimits") == ["ALL"]
    assert conf_value(conf, "DependencyParameters") == ["kill_invalid_depend"]
    data["slurm"] |= {"enforce_part_limits": "NO", "kill_invalid_depend": False}
    conf = render(data)["slurm/slurm.conf"]
    assert conf_value(conf, "EnforcePartLimits") == ["NO"]
    assert conf_value(conf, "DependencyParameters") == []
    # slurm.extra's options for the key are kept, on one line
    data["slurm"] |= {"kill_invalid_depend": True,
                      "extra": {"DependencyParameters": "max_depend_depth=20"}}
    conf = render(data)["slurm/slurm.conf"]
    assert conf_value(conf, "DependencyParameters") == ["max_depend_depth=20,kill_invalid_depend"]


def test_the_grace_time_is_on_the_partition_whose_jobs_get_preempted():
    conf = render(spec_dict("lab"))["slurm/slurm.conf"]
    assert partition_line(conf, "gpu")["GraceTime"] == "10"
    assert "GraceTime" not in partition_line(conf, "urgent")


def test_private_data_values_per_release_come_from_the_manuals():
    from estate.model.slurm_keys import private_data, source
    assert "cloud" in private_data("22.05") and "cloud" not in private_data("24.11")
    assert {"accounts", "jobs", "usage", "users"} <= private_data("24.11")
    assert "PrivateData" in source("24.11")["PrivateData"]
