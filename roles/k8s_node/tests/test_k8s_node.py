"""k8s_node: containerd from Debian running on the rendered config (parsed by containerd
itself), and the rendered kernel modules and sysctls in effect where the kernel allows."""
from __future__ import annotations

import shlex
import tomllib

import pytest

from estate.kubernetes_releases import CONTAINERD_MAJOR
from estate.verify.plugin import UNSUPPORTED
from roles.k8s_node.tasks import kernel_problem, rendered_modules, rendered_sysctls

ROLE = "k8s_node"


def _config(ctx, node) -> str:
    return next(p for p in ctx.nodes[node].consumes
                if p.startswith("kubernetes/containerd/") and p.endswith(".toml"))


def test_containerd_installed_running_enabled(host, node):
    assert host.package("containerd").is_installed
    svc = host.service("containerd")
    assert svc.is_running and svc.is_enabled


def test_containerd_is_the_major_the_config_is_written_for(host, node):
    """The rendered pin took containerd from its suite (a node's own Debian ships 1.x,
    which refuses the version 3 config and Kubernetes from 1.36 on)."""
    out = host.run("containerd --version")
    assert out.rc == 0, out.stderr
    assert f"containerd/v{CONTAINERD_MAJOR} {CONTAINERD_MAJOR}." in out.stdout, out.stdout


def test_containerd_parses_the_rendered_config(host, node, ctx):
    """containerd's own parser reads the installed file; its effective config keeps the
    rendered settings (the default runtime, each runtime's systemd cgroups and binary, the
    pinned sandbox image), compared as TOML values, not as text."""
    out = host.run("containerd config dump")
    assert out.rc == 0, f"containerd rejects /etc/containerd/config.toml: {out.stderr[-300:]}"
    dump = tomllib.loads(out.stdout)
    rendered = tomllib.loads(ctx.rendered(_config(ctx, node)).decode())
    assert dump["version"] == rendered["version"]
    for plugin, table in rendered["plugins"].items():
        assert _subset(table, dump["plugins"][plugin]), f"containerd does not use {plugin}"


def _subset(want, have) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and _subset(v, have[k])
                                              for k, v in want.items())
    return want == have


def test_containerd_answers_on_its_socket(host, node):
    out = host.run("ctr --address /run/containerd/containerd.sock version")
    assert out.rc == 0 and "Server:" in out.stdout, out.stderr


def test_kernel_modules_and_sysctls_in_effect(host, node, ctx):
    modules = rendered_modules(ctx.rendered("kubernetes/node/modules.conf").decode())
    sysctls = rendered_sysctls(ctx.rendered("kubernetes/node/sysctl.conf").decode())
    run = lambda command: host.run(command).stdout  # noqa: E731
    problem = kernel_problem(run, modules, sysctls)
    if problem:
        pytest.skip(f"{UNSUPPORTED}: {problem}")
    for key, want in sysctls.items():
        assert run(f"sysctl -n {shlex.quote(key)}").strip() == want, key


def test_swap_off(host, node):
    assert host.run("tail -n +2 /proc/swaps").stdout.strip() == "", "swap is on"
