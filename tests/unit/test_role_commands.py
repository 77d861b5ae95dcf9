"""No value reaches a root shell on a node unquoted: a static scan of roles/ and the
cluster checks of estate/verify.

The roles (deploys and their verify suites) and estate verify's cluster checks run shell
commands as root on the nodes. This reads every Python file under roles/ and
estate/verify/ and finds the places a string becomes a
command: ``host.get_fact(Command, CMD)``, ``run(CMD)`` (the roles' wrappers, testinfra's
``host.run``/``check_output``), ``server.shell(commands=[...])``, ``StringCommand(...)``
(whose bare words pyinfra joins unquoted), what a fact's ``command()`` returns,
``probe(snippet)``, ``run_when_changed(command=...)``,
``applied(command=...)``, ``wait_until(check=...)`` and command strings an operation
yields. Every value interpolated there (f-string field, ``.format`` argument, ``+``
operand) must be

- a ``shlex.quote``/``shlex.join`` call (``QuoteString`` in a ``StringCommand``),
- a module constant holding literal text (source code, not a value),
- a local variable assigned one of these (or a command text built only from them), or
- a parameter named ``command``, ``check`` or ``snippet``: a command line the caller
  built, which the scan checks where the caller builds it.

A new command that interpolates a raw value fails here with its file and line.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the roles and the cluster checks `estate verify` runs on the nodes
ROLE_FILES = sorted([*(ROOT / "roles").rglob("*.py"), *(ROOT / "estate" / "verify").rglob("*.py")])
SNIPPET_PARAMS = {"command", "check", "snippet"}
# callee name -> (positional argument indexes, keyword names) that are command text
COMMAND_CALLS = {
    "get_fact": ((1,), ("snippet",)),
    "probe": ((0,), ("snippet",)),
    "run": ((0,), ()),
    "check_output": ((0,), ()),
    "shell": ((), ("commands",)),
    "run_when_changed": ((), ("command",)),
    "applied": ((), ("command",)),
    "wait_until": ((), ("check",)),
    "_submit": ((1,), ()),   # estate/verify/checks/test_cluster.py: a job's command line
}


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _literal(node: ast.expr) -> bool:
    """Text written in the source (a string, or an argv of strings): code, not a value."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(_literal(e) for e in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_quote_call(node: ast.expr) -> bool:
    """shlex.quote(...), shlex.join(...), or quote(...) imported from shlex."""
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Attribute):
        return node.func.attr in ("quote", "join") and getattr(node.func.value, "id", "") == \
            "shlex"
    return isinstance(node.func, ast.Name) and node.func.id == "quote"


class Scope:
    def __init__(self, module: "Scope | None", params: set[str], body: list[ast.AST]):
        self.module, self.params = module, params
        self.assigned: dict[str, list[ast.expr]] = {}
        for node in body:
            for sub in ast.walk(node) if module else [node]:
                if isinstance(sub, ast.Assign) and len(sub.targets) == 1 \
                        and isinstance(sub.targets[0], ast.Name):
                    self.assigned.setdefault(sub.targets[0].id, []).append(sub.value)
                elif isinstance(sub, ast.AugAssign) and isinstance(sub.target, ast.Name):
                    self.assigned.setdefault(sub.target.id, []).append(sub.value)


class Scan:
    def __init__(self, path: Path):
        self.path = path.relative_to(ROOT)
        self.problems: list[str] = []

    def flag(self, node: ast.AST, what: str) -> None:
        self.problems.append(f"{self.path}:{node.lineno}: {what}: "
                             f"{ast.unparse(node)[:100]}")

    # --- values interpolated into a command ------------------------------------------
    def quoted(self, node: ast.expr, scope: Scope, depth: int = 0) -> bool:
        if _is_quote_call(node):
            return True
        if isinstance(node, ast.Name):
            return self._name_ok(node.id, scope, depth)
        return False

    def _name_ok(self, name: str, scope: Scope, depth: int) -> bool:
        if name in scope.params:
            return name in SNIPPET_PARAMS
        if depth > 5:
            return False
        values = scope.assigned.get(name)
        if values:
            return all(self.quoted(v, scope, depth + 1) or self.text_ok(v, scope, depth + 1)
                       for v in values)
        if scope.module is not None and name in scope.module.assigned:
            return all(_literal(v) for v in scope.module.assigned[name])
        return False

    # --- command text --------------------------------------------------------------------
    def text_ok(self, node: ast.expr, scope: Scope, depth: int = 0) -> bool:
        if _literal(node):
            return True
        if isinstance(node, ast.JoinedStr):
            return all(self.quoted(v.value, scope, depth) for v in node.values
                       if isinstance(v, ast.FormattedValue))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.text_ok(node.left, scope, depth) and self.text_ok(node.right, scope,
                                                                          depth)
        if isinstance(node, ast.IfExp):
            return self.text_ok(node.body, scope, depth) and self.text_ok(node.orelse, scope,
                                                                          depth)
        if isinstance(node, ast.Call) and _name(node.func) == "format" \
                and isinstance(node.func, ast.Attribute):
            template_ok = (isinstance(node.func.value, ast.Constant)
                           or isinstance(node.func.value, ast.Name))
            return template_ok and all(self.quoted(a, scope, depth) for a in
                                       node.args + [k.value for k in node.keywords])
        if isinstance(node, ast.Name):
            if node.id in scope.params:
                return node.id in SNIPPET_PARAMS
            values = scope.assigned.get(node.id) or (
                scope.module.assigned.get(node.id) if scope.module else None)
            return bool(values) and depth < 5 and all(self.text_ok(v, scope, depth + 1)
                                                      for v in values)
        return self.quoted(node, scope, depth)

    def check_text(self, node: ast.expr, scope: Scope, what: str) -> None:
        items = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
        for item in items:
            if not self.text_ok(item, scope):
                self.flag(item, f"unquoted value in {what}")

    # --- StringCommand words -------------------------------------------------------------
    def word_ok(self, node: ast.expr, scope: Scope) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str)
        if isinstance(node, ast.Call) and _name(node.func) == "QuoteString":
            return True
        if isinstance(node, ast.Starred):
            return self.word_ok(node.value, scope)
        if isinstance(node, (ast.List, ast.Tuple)):
            return all(self.word_ok(e, scope) for e in node.elts)
        if isinstance(node, ast.IfExp):
            return self.word_ok(node.body, scope) and self.word_ok(node.orelse, scope)
        if isinstance(node, ast.Name) and node.id in scope.assigned:
            return all(self.word_ok(v, scope) for v in scope.assigned[node.id])
        return False

    def string_command(self, call: ast.Call, scope: Scope) -> None:
        words = call.args
        for w in words:
            if not self.word_ok(w, scope):
                self.flag(w, "StringCommand word neither a literal nor QuoteString(...)")
        if len(words) >= 3 and all(isinstance(w, ast.Constant) for w in words[:2]) \
                and [w.value for w in words[:2]] == ["sh", "-c"] \
                and isinstance(words[2], ast.Call) and words[2].args:
            self.check_text(words[2].args[0], scope, "an sh -c script")

    # --- walk ------------------------------------------------------------------------------
    def visit(self, node: ast.AST, scope: Scope) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef) and child.name == "command":
                # a pyinfra fact's command(): what it returns runs on the node
                for ret in ast.walk(child):
                    if isinstance(ret, ast.Return) and ret.value is not None:
                        params = {a.arg for a in child.args.args}
                        self.check_text(ret.value, Scope(scope.module or scope, params,
                                                         child.body), "a fact's command")
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = child.args
                params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
                body = child.body if isinstance(child.body, list) else [child.body]
                inner = Scope(scope.module or scope, params, body)
                if scope.module is not None:  # a nested function sees the enclosing locals
                    inner.assigned = {**scope.assigned, **inner.assigned}
                    inner.params |= scope.params - set(inner.assigned)
                self.visit(child, inner)
                continue
            if isinstance(child, ast.Call):
                self.call(child, scope)
            elif isinstance(child, (ast.Yield,)) and child.value is not None \
                    and isinstance(child.value, (ast.Constant, ast.JoinedStr, ast.BinOp)):
                self.check_text(child.value, scope, "a yielded command")
            self.visit(child, scope)

    def call(self, call: ast.Call, scope: Scope) -> None:
        name = _name(call.func)
        if name == "StringCommand":
            self.string_command(call, scope)
            return
        if name not in COMMAND_CALLS:
            return
        positions, keywords = COMMAND_CALLS[name]
        if name == "get_fact" and not (call.args and _name(call.args[0]) == "Command"):
            positions = ()  # another fact: only a snippet= argument is command text
        for i in positions:
            if i < len(call.args):
                self.check_text(call.args[i], scope, f"{name}(...)")
        for kw in call.keywords:
            if kw.arg in keywords:
                self.check_text(kw.value, scope, f"{name}({kw.arg}=...)")


def scan(path: Path, source: str | None = None) -> list[str]:
    source = path.read_text() if source is None else source
    tree = ast.parse(source, str(path))
    s = Scan(path)
    s.visit(tree, Scope(None, set(), tree.body))
    return s.problems


def _probe(params: str, source: str) -> list[str]:
    return scan(ROOT / "roles" / "probe.py", f"def deploy({params}):\n"
                + "".join(f"    {line}\n" for line in source.splitlines()))


@pytest.mark.parametrize("path", ROLE_FILES, ids=[str(p.relative_to(ROOT)) for p in ROLE_FILES])
def test_no_unquoted_value_in_a_role_command(path):
    assert scan(path) == []


@pytest.mark.parametrize("source", [
    'host.get_fact(Command, f"stat {path}")',
    'server.shell(commands=[f"curl {url}/Release.key"])',
    'run_when_changed(command=f"kubectl apply -f {manifest}")',
    'StringCommand("cat", tmp, ">", dest)',
    'StringCommand("sh", "-c", QuoteString(f"echo {digest} > {stamp}"))',
    'run(PROBE.format(fs=fs))',
    'host.run(f"findmnt --target {where}")',
    'def op(path):\n    yield f"rm -f {path}"',
    'probe(f"test -s {path}")',
    'host.get_fact(Probe, snippet=f"ls {path}")',
    'class Fact(FactBase):\n    def command(self, path):\n        return f"cat {path}"',
])
def test_the_scan_catches_unquoted_interpolation(source):
    assert _probe("tmp, dest, path, url, manifest, digest, stamp, fs, where", source), source


@pytest.mark.parametrize("source", [
    'host.get_fact(Command, f"stat -- {shlex.quote(path)}")',
    'StringCommand("cat", QuoteString(tmp), ">", QuoteString(dest))',
    'q = shlex.quote(stamp)\nrun(f"cat {q}")',
    'run_when_changed(command=f"kubectl apply {shlex.join(args)}")',
    'class Fact(FactBase):\n    def command(self, path):\n        return f"cat {quote(path)}"',
])
def test_the_scan_accepts_quoted_values(source):
    assert _probe("tmp, dest, path, stamp, args", source) == [], source
