"""Estate runs on Python as shipped: no module of estate/ (or the entry, __main__.py)
assigns to an attribute of a standard-library module or to sys.modules, and none changes
the garbage collector's settings. Such patches break with CPython's internals, and whoever
debugs Estate would first have to rule them out (issue 45)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "estate").rglob("*.py"), ROOT / "__main__.py"])
STDLIB = frozenset(sys.stdlib_module_names)
GC_SETTINGS = frozenset({"disable", "freeze", "set_threshold", "set_debug"})
# an item of these is the process's environment, set through its own mapping: not a patch
SETTINGS = frozenset({"os.environ", "environ"})


def _stdlib_names(tree: ast.AST) -> dict[str, str]:
    """Local name -> the standard-library module it is bound to by an import."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in STDLIB:
                    out[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.split(".")[0] in STDLIB:
            for alias in node.names:   # `from re import _compiler`: a module too
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return node.targets
    return []


def _own_registrations(tree: ast.AST) -> set[int]:
    """Line numbers where a function puts a module it has just made from a spec
    (importlib.util.module_from_spec) into sys.modules, and takes it out again if its code
    fails: importlib's own recipe for importing a file as a module ("Importing a source
    file directly"), which adds a module under its own name and replaces nothing."""
    lines = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        made = {t.id for node in ast.walk(fn) if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func).endswith("module_from_spec")
                for t in node.targets if isinstance(t, ast.Name)}
        keys = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) \
                    and node.value.id in made:
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "sys.modules":
                        keys.add(ast.unparse(t.slice))
                        lines.add(node.lineno)
        for node in ast.walk(fn):
            if isinstance(node, ast.Delete) and all(
                    isinstance(t, ast.Subscript) and ast.unparse(t.value) == "sys.modules"
                    and ast.unparse(t.slice) in keys for t in node.targets):
                lines.add(node.lineno)
    return lines


def patches(source: str) -> list[str]:
    """What a module's code does to the interpreter: each assignment to an attribute (or
    item) reached from a standard-library module (but an environment variable), each
    setattr() on one, each change to sys.modules, each garbage-collector setting, and
    each import of a private module (_sre, re._compiler) that such patches reach for."""
    tree = ast.parse(source)
    stdlib = _stdlib_names(tree)
    found = [f"imports {name}, the standard library's internals" for name in stdlib.values()
             if any(part.startswith("_") and part != "__future__" for part in name.split("."))]
    own = _own_registrations(tree)
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in own and isinstance(node, (ast.Assign, ast.Delete)):
            continue
        for target in _targets(node):
            if isinstance(target, ast.Subscript) and ast.unparse(target.value) in SETTINGS:
                continue
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _root(target) in stdlib:
                found.append(f"line {node.lineno}: assigns {ast.unparse(target)}")
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id in ("setattr", "delattr") and node.args \
                and _root(node.args[0]) in stdlib:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(fn, ast.Attribute):
            owner = stdlib.get(_root(fn.value) or "")
            if owner == "gc" and fn.attr in GC_SETTINGS:
                found.append(f"line {node.lineno}: gc.{fn.attr}()")
            elif ast.unparse(fn.value).endswith("sys.modules") or \
                    (owner == "sys" and ast.unparse(fn.value) == "sys.modules"):
                if fn.attr in ("__setitem__", "setdefault", "update", "pop", "__delitem__"):
                    found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_patches_the_interpreter(path):
    assert patches(path.read_text()) == []


@pytest.mark.parametrize("source", [
    "import dataclasses\ndataclasses.exec = print",
    "import typing\ntyping.compile = compile",
    "from re import _compiler\n_compiler.compile = None",
    "import sys\nsys.modules['pydantic.plugin._loader'] = object()",
    "import sys\nsys.modules.setdefault('x', None)",
    "import gc\ngc.disable()",
    "import gc as g\ng.set_threshold(10_000)",
    "import gc\ngc.freeze()",
    "import collections\nsetattr(collections, 'eval', None)",
    "import os\nos.environ.data['X'] = '1'",
    "import _sre",
    "from re import _parser",
    "import sys, types\ndef f():\n    sys.modules['pydantic.plugin._loader'] = types.ModuleType('x')",
    "import sys, importlib.util\ndef f(spec):\n    m = importlib.util.module_from_spec(spec)\n"
    "    sys.modules['a'] = m\n    del sys.modules['b']",
])
def test_the_scan_finds_a_planted_patch(source):
    assert patches(source), source


@pytest.mark.parametrize("source", [
    "import os\nos.environ['ESTATE_DEBUG'] = '1'",   # a setting, read through its API
    "import json\nout = json.dumps({})\nout.x = 1",
    "from pathlib import Path\np = Path('x')\np.name",
    "import sys\nsys.stdout.flush()",
    # importlib's recipe: a module made from a spec, registered under its own name
    "import sys, importlib.util\ndef load(spec):\n    m = importlib.util.module_from_spec(spec)\n"
    "    sys.modules['roles'] = m\n    try:\n        spec.loader.exec_module(m)\n"
    "    except BaseException:\n        del sys.modules['roles']\n        raise",
])
def test_the_scan_leaves_ordinary_code_alone(source):
    assert patches(source) == [], source
