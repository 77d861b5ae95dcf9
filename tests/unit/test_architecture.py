"""The layering rules of issue 9, read from the code's own imports.

Every `import` and `from ... import` in estate/, roles/ and __main__.py counts,
including those inside functions: a lazy import still ties two modules together.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ["estate", "roles"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    files = [p for top in PRODUCT for p in (ROOT / top).rglob("*.py")]
    files.append(ROOT / "__main__.py")
    return {_module_name(p): p for p in files}


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `module` imports (a `from pkg import mod` counts as pkg.mod)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node, path.name == "__init__.py")
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name in known and name != module} | \
        {name for name in found if name.split(".")[0] == "tests"}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    sources = _sources()
    known = set(sources)
    return {mod: _imports(mod, path, known) for mod, path in sources.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in graph:
                continue
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module graph with a package's __init__ edges to its own submodules left out:
    a package re-exporting its parts is not a cycle with them."""
    return {mod: {dep for dep in deps if not dep.startswith(mod + ".")}
            for mod, deps in graph.items()}


def test_the_import_graph_has_no_cycles(graph):
    assert _cycles(_package_graph(graph)) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(planted) == [["a", "b", "c"]]


def test_product_code_never_imports_tests(graph):
    offenders = {mod: sorted(d for d in deps if d.split(".")[0] == "tests")
                 for mod, deps in graph.items()}
    assert {mod: deps for mod, deps in offenders.items() if deps} == {}


def test_the_makefile_never_runs_a_test_module():
    makefile = (ROOT / "Makefile").read_text()
    # pytest runs the tests; nothing else runs a module or file of tests/ (`make golden` is
    # scripts/golden.py)
    assert "-m tests." not in makefile
    assert not re.search(r"python\S* +tests/", makefile)


def test_no_validator_imports_a_renderer(graph):
    offenders = {mod: sorted(d for d in deps if d.startswith("estate.render"))
                 for mod, deps in graph.items() if mod.startswith("estate.check")}
    assert {mod: deps for mod, deps in offenders.items() if deps} == {}


def test_the_spec_layer_imports_no_stage(graph):
    stages = ("estate.check", "estate.render", "estate.provision", "estate.verify",
              "estate.pulumi", "estate.lab")
    offenders = {mod: sorted(d for d in deps if d.startswith(stages))
                 for mod, deps in graph.items() if mod.startswith(("estate.spec", "estate.model"))}
    assert {mod: deps for mod, deps in offenders.items() if deps} == {}


def _role(module: str) -> str | None:
    """The role a module belongs to (roles.<role>...), None for roles._lib and roles.site."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "roles" and \
        parts[1] not in ("_lib", "site") else None


def test_no_role_imports_another_role(graph):
    """A role shares code through roles._lib only: a role importing another drags that
    role's deploy and its facts into every run of its own (issue 9)."""
    offenders = {mod: sorted(d for d in deps if _role(d) and _role(d) != _role(mod))
                 for mod, deps in graph.items() if _role(mod) and ".tests" not in mod}
    assert {mod: deps for mod, deps in offenders.items() if deps} == {}


def test_roles_import_no_stage(graph):
    """The roles consume the rendered tree and the model's facts; the provisioner runs them,
    so a role importing estate.provision (or any other stage) would tie the two packages
    into a cycle (issue 9: roles/_lib imported estate.provision while it loaded the roles).
    Their testinfra checks (roles/*/tests) belong to the verify stage."""
    stages = ("estate.check", "estate.render", "estate.provision", "estate.verify",
              "estate.pulumi", "estate.lab", "estate.pipeline", "estate.cli")
    offenders = {mod: sorted(d for d in deps if d.startswith(stages))
                 for mod, deps in graph.items()
                 if mod.startswith("roles") and ".tests" not in mod}
    assert {mod: deps for mod, deps in offenders.items() if deps} == {}


def _operation_part(module: str) -> str | None:
    """'estate.operate.drift.live' -> 'live'; None outside estate/operate/<op>/."""
    parts = module.split(".")
    return parts[3] if len(parts) == 4 and parts[:2] == ["estate", "operate"] else None


def test_operations_live_in_estate_operate(graph):
    """An operation's modules sit in estate/operate/<op>/ (logic.py and cli.py, live.py where
    it reaches the estate), not loose at estate/'s root as drift_cli, drift_live and
    handoff_runners once did (issue 45)."""
    loose = [mod for mod in graph if mod.count(".") == 1 and mod.startswith("estate.")
             and mod.endswith(("_cli", "_live", "_runners"))]
    assert loose == []
    ops = {m.split(".")[2] for m in graph if _operation_part(m)}
    assert ops and all({f"estate.operate.{op}.logic", f"estate.operate.{op}.cli"} <= set(graph)
                       for op in ops), ops


def test_only_the_command_line_imports_an_operations_cli(graph):
    """An operation's command is reached through estate.cli.LAZY only, so the logic and
    live modules stay usable (and testable) without the command-line framework."""
    offenders = {mod: sorted(d for d in deps if _operation_part(d) == "cli")
                 for mod, deps in graph.items() if mod != "estate.cli"}
    assert {mod: deps for mod, deps in offenders.items() if deps} == {}


def test_an_operations_logic_reaches_nothing_live(graph):
    """logic.py decides; live.py reaches the nodes: the logic imports neither its live side
    nor a command line."""
    offenders = {mod: sorted(d for d in deps if _operation_part(d) in ("live", "cli")
                             or d in ("estate.cli", "estate.commands"))
                 for mod, deps in graph.items() if _operation_part(mod) == "logic"}
    assert {mod: deps for mod, deps in offenders.items() if deps} == {}


def test_every_lazy_command_is_registered_the_one_way():
    """estate.cli.LAZY names modules with register(app), each defining its command."""
    import importlib

    from estate import cli
    for name, module in cli.LAZY.items():
        assert callable(getattr(importlib.import_module(module), "register", None)), name
