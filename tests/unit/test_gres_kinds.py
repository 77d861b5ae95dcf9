"""Several GPU kinds on one node, and MIG devices as GRES types: rendered once from the
model's GresKind, counted everywhere as all of the node's GPUs."""
from __future__ import annotations

import yaml

from estate.capacity import gpu_budget
from estate.check.ownership import _gres_gpus
from estate.model import model
from estate.model.slurm import def_per_gpu, node_lines
from estate.model.slurm_plugins import slurm_plugins
from estate.render.slurm import render_slurm
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from estate.verify.slurm_view import expected_nodes
from tests.unit.checkutil import findings_for, spec_dict

A100 = {"model": "a100", "product": "NVIDIA-A100-SXM4-80GB", "count": 4, "memory_gb": 80}
T4 = {"model": "t4", "product": "Tesla-T4", "count": 2, "memory_gb": 16}


def estate_of(data: dict) -> Estate:
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "<test>")
    assert loaded.spec is not None, loaded.findings
    return Estate(loaded.spec)


def files(est: Estate) -> dict[str, list[str]]:
    return {a.path: a.content.decode().splitlines() for a in render_slurm(est)
            if a.path in ("slurm/slurm.conf", "slurm/gres.conf")}


def mixed() -> dict:
    """prod with its H100 class as 4 A100 + 2 T4 per node (2 sockets of 56 cores)."""
    data = spec_dict("prod")
    data["node_classes"][0]["gpus"] = [A100, T4]
    return data


def test_two_kinds_render_one_gres_item_each_and_gres_conf_per_kind_and_socket():
    out = files(estate_of(mixed()))
    node = next(ln for ln in out["slurm/slurm.conf"] if ln.startswith("NodeName=gpu[001-"))
    assert " Gres=gpu:a100:4,gpu:t4:2 " in node
    gres = [ln for ln in out["slurm/gres.conf"] if ln.startswith("NodeName=gpu[001-")]
    assert gres == [
        "NodeName=gpu[001-128] Name=gpu Type=a100 File=/dev/nvidia[0-1] Cores=0-55",
        "NodeName=gpu[001-128] Name=gpu Type=a100 File=/dev/nvidia[2-3] Cores=56-111",
        "NodeName=gpu[001-128] Name=gpu Type=t4 File=/dev/nvidia4 Cores=0-55",
        "NodeName=gpu[001-128] Name=gpu Type=t4 File=/dev/nvidia5 Cores=56-111"]


def test_a_kind_the_sockets_do_not_divide_gets_one_line_without_cores():
    data = mixed()
    data["node_classes"][0]["gpus"][1] = {**T4, "count": 1}
    gres = files(estate_of(data))["slurm/gres.conf"]
    assert "NodeName=gpu[001-128] Name=gpu Type=t4 File=/dev/nvidia4" in gres


def test_everything_that_counts_gpus_counts_every_kind():
    est = estate_of(mixed())
    line = next(ln for ln in node_lines(est) if "gpu001" in ln.hostlist)
    assert line.gres_count == 6 and _gres_gpus(line.gres) == 6
    # DefCpuPerGPU: 224 CPUs over 6 GPUs; DefMemPerGPU: RealMemory over 6
    assert def_per_gpu(est, node_lines(est))["interactive"] == (224 // 6, 2000000 // 6)
    budget = gpu_budget(est).as_dict()
    assert budget["partitions"]["batch"]["by_model"] == {"a100": 512, "t4": 256}
    assert budget["planes"]["slurm"] == 768
    assert model(est).group("gpu001").gpus_by_model == {"a100": 4, "t4": 2}
    # what verify expects scontrol to show
    assert expected_nodes(est)["gpu001"]["Gres"] == "gpu:a100:4(S:0-1),gpu:t4:2(S:0-1)"


def test_an_untyped_node_of_two_kinds_is_one_gpu_item():
    data = mixed()
    for g in data["nodes"][2:6]:
        g["slurm"]["gres_typed"] = False
    out = files(estate_of(data))
    assert any(" Gres=gpu:6 " in ln for ln in out["slurm/slurm.conf"])
    assert "NodeName=gpu[001-128] Name=gpu File=/dev/nvidia[0-2] Cores=0-55" in \
        out["slurm/gres.conf"]


def test_the_single_kind_form_and_a_list_of_one_render_the_same():
    one = spec_dict("prod")
    listed = spec_dict("prod")
    listed["node_classes"][0]["gpus"] = [listed["node_classes"][0]["gpus"]]
    assert files(estate_of(one)) == files(estate_of(listed))


def mig(data: dict, layout: dict) -> dict:
    data["node_classes"][0]["gpus"].update(mig=True, mig_profiles=layout)
    data["slurm"]["gres_autodetect"] = "nvml"
    return data


def test_mig_profiles_are_gres_types_counted_over_the_gpus_and_nvml_finds_them():
    est = estate_of(mig(spec_dict("prod"), {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}))
    out = files(est)
    node = next(ln for ln in out["slurm/slurm.conf"] if ln.startswith("NodeName=gpu[001-"))
    assert " Gres=gpu:3g.40gb:8,gpu:2g.20gb:8,gpu:1g.10gb:16 " in node
    assert out["slurm/gres.conf"][1] == "AutoDetect=nvml"
    assert not [ln for ln in out["slurm/gres.conf"] if "File=" in ln]   # NVML says them
    # DefCpuPerGPU shares the CPUs over the 32 MIG devices a job can ask for
    assert def_per_gpu(est, node_lines(est))["batch"][0] == 224 // 32
    # the budget still counts physical GPUs
    assert gpu_budget(est).as_dict()["planes"]["slurm"] == 1024
    assert "gpu/nvml" in slurm_plugins(est)["gres.conf"]


def test_a_fitting_mig_layout_has_only_the_release_finding():
    data = mig(spec_dict("prod"), {"1g.10gb": 7})
    ids = {f.id for f in findings_for(data) if f.severity.value == "error"}
    # Debian's packages have no gpu/nvml: the one error left, and the reason MIG waits
    assert ids == {"slurm.plugin_not_in_release"}
    f = next(f for f in findings_for(data) if f.id == "slurm.plugin_not_in_release")
    assert f.path == "slurm.gres_autodetect" and "gpu/nvml" in f.message
    assert "NVML" in f.hint and "--with-nvml" in f.hint


def test_verify_leaves_the_sockets_of_nvml_gres_to_the_driver():
    from estate.verify.slurm_view import SlurmView, _compare_nodes
    data = spec_dict("prod")
    est = estate_of(data)
    exp = expected_nodes(est)["gpu001"]
    row = {**exp, "Gres": "gpu:h100:8(S:0)", "State": "IDLE",
           "Partitions": "batch,interactive"}
    view = SlurmView({"gpu001": row}, {}, {}, set())
    assert [m.field for m in _compare_nodes(est, view) if m.subject == "node gpu001"] == ["Gres"]
    data["slurm"]["gres_autodetect"] = "nvml"
    est = estate_of(data)
    assert not [m for m in _compare_nodes(est, view)
                if m.subject == "node gpu001" and m.field == "Gres"]
