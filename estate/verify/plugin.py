"""The pytest plugin behind `estate verify`: suites parametrized over the nodes.

A suite module declares ``ROLE``; its tests run once per node that has that
deploy, with fixtures ``node`` (name), ``host`` (testinfra) and ``ctx``
(VerifyContext). A test taking ``artifact`` runs once per (node, artifact the
roles installed there). Results are collected per node and check for the table.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from estate.verify.context import VerifyContext

UNSUPPORTED = "unsupported here"


@dataclass
class CheckResult:
    node: str
    role: str
    check: str
    outcome: str          # passed | failed | unsupported | skipped
    detail: str = ""
    seconds: float = 0.0


class EstateVerify:
    def __init__(self, ctx: VerifyContext):
        self.context = ctx
        self.results: list[CheckResult] = []

    @pytest.fixture
    def ctx(self) -> VerifyContext:
        return self.context

    def pytest_collection_modifyitems(self, config, items):
        # A suite no selected node has parametrizes to pytest's empty set; drop those
        # items so JUnit and verify.json report the same checks.
        empty = [i for i in items if not isinstance(_node_param(i), str)
                 and "node" in getattr(getattr(i, "callspec", None), "params", {})]
        if empty:
            config.hook.pytest_deselected(items=empty)
            items[:] = [i for i in items if i not in empty]

    @pytest.fixture
    def host(self, node):
        return self.context.host(node)

    def pytest_generate_tests(self, metafunc):
        role = getattr(metafunc.module, "ROLE", None)
        if role is None or "node" not in metafunc.fixturenames:
            return
        if "artifact" in metafunc.fixturenames:
            # Every file the roles installed, each reported under the role that installs it.
            pairs = [(n, a) for n in self.context.nodes for a, _, who in self.context.artifacts_of(n)
                     if role in ("*", who)]
            metafunc.parametrize(("node", "artifact"), pairs,
                                 ids=[f"{n}:{a}" for n, a in pairs])
            return
        targets = getattr(metafunc.function, "estate_nodes", None)
        nodes = targets(self.context) if targets else self.context.with_deploy(role)
        metafunc.parametrize("node", nodes, ids=nodes)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report):
        if report.when != "call" and not (report.skipped or report.failed):
            return
        if report.when == "teardown" and not report.failed:
            return
        item = getattr(report, "_estate", None)
        if item is None:
            return
        node, role, check = item
        if report.passed:
            outcome, detail = "passed", ""
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            reason = reason.removeprefix("Skipped: ")
            outcome = "unsupported" if reason.startswith(UNSUPPORTED) else "skipped"
            detail = reason
        else:
            outcome, detail = "failed", _short(report)
        self.results.append(CheckResult(node, role, check, outcome, detail,
                                        round(report.duration, 2)))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        callspec = getattr(item, "callspec", None)
        node = callspec.params.get("node") if callspec else None
        if isinstance(node, str):  # not pytest's NOTSET: a suite no selected node has
            check = item.originalname.removeprefix("test_")
            role = getattr(item.module, "ROLE", "?")
            if "artifact" in callspec.params:
                art = callspec.params["artifact"]
                check = f"{check}:{art}"
                role = next((w for a, _, w in self.context.artifacts_of(node) if a == art), role)
            report._estate = (node, role, check)


def _node_param(item):
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("node") if callspec else None


def _short(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash else str(report.longrepr)
    return " ".join(text.split())[:300]


def on_nodes(select):
    """Decorator: run a test on the nodes select(ctx) returns instead of the role's."""
    def mark(func):
        func.estate_nodes = select
        return func
    return mark


def assert_installed_secret(host, ctx: VerifyContext, path: str, secret: str | None, *,
                            owner: str = "root", mode: int, what: str) -> None:
    """A secret file on the node: its owner, group (the owner's) and mode, and, where the
    secrets directory is given, that it is `what` (digests compared: neither the secret nor
    its digest reaches the report)."""
    f = host.file(path)
    assert f.exists, f"{path} is missing: estate apply installs {what}"
    assert (f.user, f.group, f.mode) == (owner, owner, mode), \
        f"{path} is {f.user}:{f.group} {f.mode:04o}, not {owner}:{owner} {mode:04o}"
    want = ctx.secret_sha256(secret) if secret else None
    if want:
        assert f.sha256sum == want, f"{path} is not {what}"
