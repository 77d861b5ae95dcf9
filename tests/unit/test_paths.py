"""estate.paths is the one place that says where Estate's data is (issue 45): no module of
estate/ finds the checkout by walking up from its own file or reaches roles/ through
sys.path. tests/unit/test_wheel.py runs the same lookups from an installed wheel."""
from __future__ import annotations

import ast
import re
import sys
import types
from pathlib import Path

import pytest

from estate import paths

ROOT = Path(__file__).resolve().parents[2]
WALKS_UP = re.compile(r"Path\(__file__\)[^\n]*\.parents?\b")


def _sources() -> list[Path]:
    return sorted((ROOT / "estate").rglob("*.py"))


def test_no_module_walks_up_from_its_own_file():
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in _sources()
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if WALKS_UP.search(line)]
    assert not offenders


def test_no_module_puts_a_directory_on_sys_path():
    offenders = []
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Attribute) and node.attr == "path" and \
                    isinstance(node.value, ast.Name) and node.value.id == "sys":
                offenders.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not offenders


def test_the_walkers_finder_finds_a_planted_walk():
    assert WALKS_UP.search('ROOT = Path(__file__).resolve().parents[2] / "k8s"')
    assert WALKS_UP.search("HERE = Path(__file__).parent")


def test_in_a_checkout_the_data_is_the_checkouts():
    assert paths.PACKAGE == ROOT / "estate"
    assert paths.TREE == ROOT
    for d in (paths.SLURM_CONF, paths.KEYS, paths.UPDATE_POLICY, paths.K8S, paths.ROLES,
              paths.VAGRANT, paths.SCRIPTS, paths.CHECKS, paths.ACCEPTANCE):
        assert d.is_dir(), d
    assert (paths.SCRIPTS / "slurm-root.sh").is_file()


def test_work_is_where_estate_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert paths.work() == tmp_path


def test_role_module_imports_the_roles_as_one_package():
    tasks = paths.role_module("munge.tasks")
    import roles._lib
    assert Path(tasks.__file__).is_relative_to(paths.ROLES)
    assert Path(roles._lib.__file__).is_relative_to(paths.ROLES)
    assert paths.roles_package() is sys.modules["roles"]


def test_another_package_named_roles_is_refused(monkeypatch, tmp_path):
    other = types.ModuleType("roles")
    other.__path__ = [str(tmp_path)]
    monkeypatch.setitem(sys.modules, "roles", other)
    with pytest.raises(ImportError, match="already imported"):
        paths.role_module("munge.tasks")
