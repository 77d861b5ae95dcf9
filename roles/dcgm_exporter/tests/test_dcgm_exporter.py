"""dcgm_exporter: the pinned image runs under systemd with the node's GPUs and the job map,
and serves GPU utilization where the unit says; 'unsupported here' where NVIDIA's
repository or registry cannot be reached from the node or no NVIDIA driver is loaded."""
from __future__ import annotations

import shlex

import pytest

from estate.model.monitoring import DCGM_GPU_UTIL, JOB_MAP_DIR
from estate.verify.plugin import UNSUPPORTED
from roles.dcgm_exporter.tasks import SERVICE, problems

ROLE = "dcgm_exporter"


_ASKED: dict[tuple[int, str], str | None] = {}


def unsupported_here(host, ctx, node) -> str | None:
    """Asked once per node and run: the file, service and telemetry checks all ask, and an
    unreachable repository costs each probe its timeout."""
    key = (id(ctx), node)
    if key not in _ASKED:
        found = problems(lambda command: host.run(command).stdout, ctx.runtime["dcgm_image"])
        _ASKED[key] = "; ".join(found) or None
    return _ASKED[key]


def _skip_unsupported(host, ctx, node) -> None:
    problem = unsupported_here(host, ctx, node)
    if problem:
        pytest.skip(f"{UNSUPPORTED}: {problem}")


def _listen(ctx, node) -> str:
    """The address the rendered unit passes the exporter (--address=)."""
    unit = next(p for p in ctx.nodes[node].consumes if p.startswith("monitoring/dcgm-exporter/"))
    start = next(line for line in ctx.rendered(unit).decode().splitlines()
                 if line.startswith("ExecStart="))
    return next(w.split("=", 1)[1] for w in shlex.split(start) if w.startswith("--address="))


def test_runs_the_pinned_image_with_the_job_map_read_only(host, node, ctx):
    _skip_unsupported(host, ctx, node)
    svc = host.service(SERVICE)
    assert svc.is_running and svc.is_enabled
    fmt = "{{.ImageName}} {{range .Mounts}}{{.Destination}}:{{.RW}} {{end}}"
    out = host.run(shlex.join(["podman", "inspect", "--format", fmt, SERVICE]))
    assert out.rc == 0, out.stderr
    assert out.stdout.split()[0] == ctx.runtime["dcgm_image"], out.stdout
    assert f"{JOB_MAP_DIR}:false" in out.stdout.split(), out.stdout


def test_serves_gpu_utilization_where_the_unit_listens(host, node, ctx):
    _skip_unsupported(host, ctx, node)
    fetch = ("import sys, urllib.request; "
             "print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())")
    out = host.run(shlex.join(["python3", "-c", fetch, f"http://{_listen(ctx, node)}/metrics"]))
    assert out.rc == 0, out.stderr
    assert any(line.startswith(f"{DCGM_GPU_UTIL}{{") for line in out.stdout.splitlines()), \
        out.stdout[:2000]
