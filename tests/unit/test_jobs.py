"""Job traffic (docs/jobs.md): the job flows of the matrix, the untracked fabric in the
rendered nftables, the jobs' TaskProlog (run here with sh, as slurmstepd runs it) and
Open MPI's parameters, and a narrowing rendered where the launchers read it."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from estate.model.destinations import destination, installer
from estate.model.flows import matrix
from estate.pipeline import build
from tests.unit.checkutil import ROOT, spec_dict

PROLOG = "slurm/hooks/task-prologs/gpu-2x/estate-task-prolog"
MCA = "slurm/openmpi/openmpi-mca-params.conf"
NARROW = {"ports": [50000, 50100], "launchers": ["openmpi", "torchrun"]}


def _build(tmp_path: Path, data: dict, files: dict | None = None):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    for name, content in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    result = build(path)
    assert result.ok, result.findings
    return result


@pytest.fixture(scope="module")
def lab():
    return build(ROOT / "stacks" / "lab.yaml")


@pytest.fixture(scope="module")
def prod():
    return build(ROOT / "stacks" / "example-prod.yaml")


def _run(script: bytes, tmp_path: Path, env: dict | None = None) -> list[str]:
    path = tmp_path / "task-prolog"
    path.write_bytes(script)
    path.chmod(0o755)
    out = subprocess.run(["sh", str(path)], env={"PATH": os.environ["PATH"], **(env or {})},
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_job_flows_join_the_workers_on_the_fabric_and_management_only(lab):
    jobs = [f for f in matrix(lab.estate).flows if f.name.startswith("job-")]
    # every port a job's user can bind; back to a launcher, the ports it is given (port 0)
    assert sorted((f.name, f.segment, f.port_text, ",".join(sorted(f.to))) for f in jobs) == [
        ("job-launcher", "management", "32768-60999", "login1"),
        ("job-tcp", "fabric", "1024-65535", "gpu1,gpu2"),
        ("job-tcp", "management", "1024-65535", "gpu1,gpu2"),
        ("job-udp", "fabric", "1024-65535", "gpu1,gpu2"),
        ("job-udp", "management", "1024-65535", "gpu1,gpu2")]
    assert all(f.sources == frozenset({"gpu1", "gpu2"}) for f in jobs)


def test_only_the_workers_ruleset_untracks_the_fabric(lab):
    for path, art in lab.artifacts.items():
        if not path.startswith("network/nftables/"):
            continue
        text = art.content.decode()
        workers = "gpu1" in art.consumers
        assert ("notrack" in text) == workers, path
        assert ('comment "job-tcp"' in text) == workers, path
    text = next(a.content.decode() for p, a in lab.artifacts.items()
                if p.startswith("network/nftables/") and "gpu1" in a.consumers)
    assert "type filter hook prerouting priority raw;" in text
    assert "type filter hook output priority raw;" in text
    pair = "ip saddr { 10.61.0.11-10.61.0.12 } ip daddr { 10.61.0.11-10.61.0.12 }"
    assert f'{pair} tcp dport 1024-65535 notrack comment "job-tcp"' in text
    # a reply comes back to an ephemeral port, a job port too: no sport rule
    assert "tcp sport" not in text
    # what the raw chains leave untracked is accepted first in input, with one rule
    body = text[text.index("chain input"):]
    assert body.index('ct state untracked counter accept comment "job-fabric"') < \
        body.index("ct state established")
    # below 1024 (ssh) stays closed between workers
    assert "tcp dport 22 " in text and "dport 1-" not in text
    # management's job traffic stays tracked: no notrack names its addresses
    assert "10.60.0.13-10.60.0.14 } ip daddr" not in text


def test_a_narrowed_ruleset_accepts_the_untracked_replies_by_source_port(tmp_path):
    data = spec_dict("lab")
    data["firewall"]["jobs"] = NARROW
    result = _build(tmp_path, data)
    text = next(a.content.decode() for p, a in result.artifacts.items()
                if p.startswith("network/nftables/") and "gpu1" in a.consumers)
    assert "tcp dport 50000-50100 notrack" in text and "tcp sport 50000-50100 notrack" in text
    # management's replies are established: nothing of management is left untracked
    assert "ip saddr { 10.60.0.13-10.60.0.14 } ip daddr" not in text
    if shutil.which("nft"):
        path = tmp_path / "workers.nft"
        path.write_text(text)
        out = subprocess.run(["nft", "-c", "-f", str(path)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


@pytest.mark.skipif(not shutil.which("nft"), reason="nft checks the syntax")
def test_every_rendered_ruleset_passes_nft_check(lab, prod, tmp_path):
    for name, result in (("lab", lab), ("prod", prod)):
        for path, art in result.artifacts.items():
            if path.startswith("network/nftables/"):
                f = tmp_path / f"{name}-{path.rsplit('/', 1)[-1]}"
                f.write_bytes(art.content)
                out = subprocess.run(["nft", "-c", "-f", str(f)], capture_output=True,
                                     text=True)
                assert out.returncode == 0, (name, path, out.stderr)


def test_the_task_prolog_sets_what_the_task_has_not(lab, tmp_path):
    art = lab.artifacts[PROLOG]
    assert (str(art.consumers), art.mode) == ("gpu[1-2]", 0o755)
    assert destination(PROLOG) == "/etc/slurm/hooks/estate-task-prolog"
    assert installer(PROLOG, ["common", "slurm_worker"]) == "slurm_worker"
    assert "TaskProlog=/etc/slurm/hooks/estate-task-prolog" in \
        lab.artifacts["slurm/slurm.conf"].content.decode().splitlines()
    assert _run(art.content, tmp_path) == [
        "export NCCL_SOCKET_IFNAME==eth2",
        "export OMPI_MCA_btl_tcp_if_include=10.61.0.0/24",
        "export OMPI_MCA_oob_tcp_if_include=10.60.0.0/24"]
    # the user's own: set (even empty) wins; an exclude list stops the include
    assert _run(art.content, tmp_path, {"NCCL_SOCKET_IFNAME": "",
                                        "OMPI_MCA_btl_tcp_if_exclude": "lo,docker0"}) == [
        "export OMPI_MCA_oob_tcp_if_include=10.60.0.0/24"]


def test_infiniband_classes_name_their_hcas(prod, tmp_path):
    art = prod.artifacts["slurm/hooks/task-prologs/h100-8x/estate-task-prolog"]
    lines = _run(art.content, tmp_path)
    assert "export NCCL_SOCKET_IFNAME==ib0" in lines
    assert "export NCCL_IB_HCA==mlx5_0,mlx5_1,mlx5_2,mlx5_3" in lines
    assert "export UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1" in lines
    assert "export OMPI_MCA_btl_tcp_if_include=10.20.0.0/20" in lines


def test_a_narrowing_reaches_torchrun_and_open_mpi(tmp_path):
    data = spec_dict("lab")
    data["firewall"]["jobs"] = NARROW
    result = _build(tmp_path, data)
    lines = _run(result.artifacts[PROLOG].content, tmp_path)
    assert {"export MASTER_PORT=50000", "export OMPI_MCA_oob_tcp_dynamic_ipv4_ports=50001-50016",
            "export OMPI_MCA_btl_tcp_port_min_v4=50017",
            "export OMPI_MCA_btl_tcp_port_range_v4=84"} <= set(lines)
    mca = result.artifacts[MCA]
    assert str(mca.consumers) == "gpu[1-2],login1"
    assert destination(MCA) == "/etc/openmpi/openmpi-mca-params.conf"
    assert installer(MCA, ["common", "slurm_login"]) == "slurm_login"
    text = mca.content.decode().splitlines()
    for line in ("oob_tcp_if_include = 10.60.0.0/24", "oob_tcp_dynamic_ipv4_ports = 50001-50016",
                 "btl_tcp_port_min_v4 = 50017", "btl_tcp_port_range_v4 = 84"):
        assert line in text
    # the last port Open MPI's transport may take is the range's last
    assert 50017 + 84 - 1 == 50100
    flows = [f for f in matrix(result.estate).flows if f.name.startswith("job-")]
    assert {f.ports for f in flows} == {(50000, 50100)}


def test_the_sites_task_prolog_runs_after_and_wins(tmp_path):
    data = spec_dict("lab")
    data["slurm"]["hooks"] = {"task_prolog": "hooks/task-prolog.sh"}
    site = b"#!/bin/sh\necho export NCCL_SOCKET_IFNAME=site0\necho export SITE=1\n"
    result = _build(tmp_path, data, {"hooks/task-prolog.sh": site})
    assert result.artifacts["slurm/hooks/task-prolog"].content == site
    conf = result.artifacts["slurm/slurm.conf"].content.decode().splitlines()
    assert [line for line in conf if line.startswith("TaskProlog=")] == [
        "TaskProlog=/etc/slurm/hooks/estate-task-prolog"]
    ours = result.artifacts[PROLOG].content
    assert ours.decode().rstrip().endswith("exec /etc/slurm/hooks/task-prolog")
    # run it against the site's script where the installed path would be
    script = ours.replace(b"/etc/slurm/hooks/task-prolog", str(tmp_path / "hooks" /
                                                                 "task-prolog.sh").encode())
    (tmp_path / "hooks" / "task-prolog.sh").chmod(0o755)
    lines = _run(script, tmp_path)
    assert lines[0] == "export NCCL_SOCKET_IFNAME==eth2"
    assert lines[-2:] == ["export NCCL_SOCKET_IFNAME=site0", "export SITE=1"]
