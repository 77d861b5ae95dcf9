"""Every Slurm plugin a rendered file names comes from a package the project installs.

Slurm loads plugins from shared objects at start-up; Debian ships some of them in packages
the daemons only recommend (auth/jwt in slurm-wlm-jwt-plugin), so an install with
--no-install-recommends that forgets one gives a daemon that dies on a fresh machine. The
plugins are collected from the rendered text itself, not from the renderer's own list, and
dpkg on this machine (where scripts/install-deps.sh ran) says which package ships each;
for a spec whose slurm.version is another release, the dpkg database of that release's
root (scripts/slurm-root.sh, which the namespace lab runs it from) says it.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from estate.catalogue import (ROLES, SLURM_SUITES, UNPACKAGED_PLUGINS, host_packages, packages,
                              plugin_file, plugin_package, root_packages)
from estate.lab.netns import release_root
from estate.model.slurm_keys import ships
from estate.pipeline import build
from estate.render.slurm import slurm_plugins

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted((ROOT / "stacks").glob("*.yaml"))
STACKS = [p for p in STACKS if not p.name.startswith("Pulumi.")]
# slurm.conf(5)/slurmdbd.conf(5)/cgroup.conf(5) keywords whose values are plugins.
PLUGIN_KEY = re.compile(r"^(\w*Type|\w*Types|TaskPlugin|CgroupPlugin|TopologyPlugin)=(.+)$",
                        re.M)
NOT_PLUGINS = {"autodetect", "none"}
SELECT_PARAMETERS = {"SelectTypeParameters"}  # ends in "Type..." but holds options


def rendered_plugins(text: str) -> set[str]:
    found = set()
    for key, value in PLUGIN_KEY.findall(text):
        if key in SELECT_PARAMETERS:
            continue
        for item in value.split(","):
            if key == "GresTypes":
                found.add(f"gres/{item}")
            elif item not in NOT_PLUGINS:
                found.add(item)
    return found


def dpkg_owner(path: str, root: str = "/") -> str:
    admin = f"{root.rstrip('/')}/var/lib/dpkg"
    res = subprocess.run(["dpkg-query", "--admindir", admin, "-S", path], capture_output=True,
                         text=True)
    assert res.returncode == 0, (f"{path} is on no package installed in {root} "
                                 f"({res.stderr.strip()}): run scripts/install-deps.sh "
                                 "(or scripts/slurm-root.sh VERSION)")
    return res.stdout.split(":", 1)[0]


@pytest.fixture(scope="module", params=STACKS, ids=lambda p: p.stem)
def stack(request):
    result = build(request.param)
    assert result.ok, [f.as_dict() for f in result.findings if f.severity.value == "error"]
    return result


def test_renderer_lists_every_plugin_it_prints(stack):
    declared = slurm_plugins(stack.estate)
    for name in ("slurm.conf", "cgroup.conf", "slurmdbd.conf"):
        art = stack.artifacts.get(f"slurm/{name}")
        if art is None:
            continue
        assert rendered_plugins(art.content.decode()) <= set(declared[name]), name


def test_plugin_packages_are_installed_by_the_project(stack):
    root = release_root(stack.estate.spec.slurm.version)
    installed = set(host_packages() if root == "/" else root_packages())
    for conf, plugins in slurm_plugins(stack.estate).items():
        for plugin in plugins:
            owner = dpkg_owner(plugin_file(plugin), root)
            assert owner == plugin_package(plugin), \
                f"{plugin}: dpkg says {owner}, estate.catalogue says {plugin_package(plugin)}"
            assert owner in installed, f"{plugin} ({conf}) needs {owner}: add it to the catalogue"
            for role in ROLES.values():
                if conf in role.loads:
                    assert owner in packages(role.name), \
                        f"role {role.name} loads {conf}, whose {plugin} needs {owner}"


def test_the_jwt_plugin_is_found_by_dpkg():
    # The case that broke a fresh machine: the test above must see it.
    assert dpkg_owner(plugin_file("auth/jwt")) == "slurm-wlm-jwt-plugin"


@pytest.mark.parametrize("version", sorted(SLURM_SUITES))
def test_plugins_the_catalogue_calls_unpackaged_are_on_no_package(version):
    """gpu/nvml (gres.conf AutoDetect=nvml): dpkg finds no package with it on either
    release, and the release's key file, which slurm.plugin_not_in_release reads, agrees."""
    root = release_root(version)
    for plugin in UNPACKAGED_PLUGINS:
        res = subprocess.run(["dpkg-query", "--admindir", f"{root.rstrip('/')}/var/lib/dpkg",
                              "-S", plugin_file(plugin).rsplit("/", 1)[1]],
                             capture_output=True, text=True)
        assert res.returncode != 0, f"{plugin} ships in {res.stdout.strip()} on {version}"
        assert not Path(root, plugin_file(plugin).lstrip("/")).exists()
        assert not ships(version, plugin)
