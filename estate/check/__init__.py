"""Checking: schema first, then every registered validator, then artifact checks.

Importing the domain modules registers their validators.
"""
from __future__ import annotations

import importlib
from functools import lru_cache

from estate.check.registry import REGISTRY, Problem, run, validator
from estate.findings import Finding, Severity, has_errors, sort_findings

__all__ = ["Finding", "Severity", "Problem", "validator", "check_gate", "check_spec",
           "check_artifacts", "has_errors", "REGISTRY", "load_domains"]

# The domain modules that hold each stage's validators, where a stage needs fewer than all
# of them: `estate check` runs the gate before it forks, then the spec stage in the child
# and the artifact checks in the parent, so each process imports what its own stage runs
# (importing every domain before the fork cost 0.025-0.035 s of a 0.45 s check, on both
# processes' path). The spec stage imports all of them. tests/unit/test_check_stages.py
# holds this table to what the modules register.
STAGE_DOMAINS = {
    "gate": ("nodes",),
    "artifacts": ("cni", "kubernetes_addons", "kubernetes_artifacts", "kubernetes_ha",
                  "kubernetes_mig", "kubernetes_quota", "kubernetes_rbac", "ownership"),
}
_LOADED: set[str] = set()


def load_domains(stage: str | None = None) -> None:
    """Import the estate.check.<domain> modules of `stage` (default: every one) so that
    their validators register."""
    for name in STAGE_DOMAINS.get(stage) or all_domains():
        if name not in _LOADED:
            importlib.import_module(f"estate.check.{name}")
            _LOADED.add(name)


@lru_cache(maxsize=1)
def all_domains() -> tuple[str, ...]:
    import pkgutil   # the spec stage's, in the forked child: 2 ms off the path before it

    import estate.check as pkg
    return tuple(m.name for m in pkgutil.iter_modules(pkg.__path__)
                 if m.name != "registry")


def check_gate(estate, locate=lambda loc: "") -> list[Finding]:
    """The limits (hosts, expansion) without which the other checks, and rendering, are
    unbounded: run first, and nothing else runs on an error here."""
    load_domains("gate")
    return sort_findings(run("gate", estate, locate))


def check_spec(estate, locate=lambda loc: "", gate: bool = True) -> list[Finding]:
    """Every spec validator; gate=False when the caller has run check_gate already."""
    load_domains()
    gated = check_gate(estate, locate) if gate else []
    if has_errors(gated):
        return gated
    return sort_findings(gated + run("spec", estate, locate))


def check_artifacts(ctx, locate=lambda loc: "") -> list[Finding]:
    """ctx is an estate.render.RenderContext-like object: .estate and .artifacts."""
    load_domains("artifacts")
    return sort_findings(run("artifacts", ctx, locate))
