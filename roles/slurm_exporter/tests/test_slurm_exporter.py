"""slurm_exporter: running unprivileged, listening where its flow says, and serving the
contract's metrics with what Slurm reports."""
from __future__ import annotations

import json
import shlex

ROLE = "slurm_exporter"


def _config(ctx, node) -> dict:
    path = next(p for p in ctx.nodes[node].consumes if p.startswith("monitoring/slurm-exporter/"))
    return json.loads(ctx.rendered(path))


def test_running_as_a_dynamic_user(host, node):
    svc = host.service("estate-slurm-exporter")
    assert svc.is_running and svc.is_enabled
    users = host.run("ps -o user= -C python3").stdout.split()
    assert users and "root" not in users, users


def test_serves_every_metric_of_the_contract(host, node, ctx):
    config = _config(ctx, node)
    fetch = ("import sys, urllib.request; "
             "print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())")
    out = host.run(shlex.join(["python3", "-c", fetch, f"http://{config['listen']}/metrics"]))
    assert out.rc == 0, out.stderr
    names = {line.split()[2] for line in out.stdout.splitlines() if line.startswith("# TYPE")}
    assert {m["name"] for m in config["metrics"]} <= names
    # the nodes Slurm has: every worker counted in some state
    nodes = [line for line in out.stdout.splitlines() if line.startswith("slurm_nodes{")]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in nodes) > 0, nodes
