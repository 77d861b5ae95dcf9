"""Checking: schema first, then every registered validator, then artifact checks.

Importing the domain modules registers their validators.
"""
from __future__ import annotations

import importlib
import pkgutil

from estate.check.findings import Finding, Severity, has_errors, sort_findings
from estate.check.registry import REGISTRY, Problem, run, validator

__all__ = ["Finding", "Severity", "Problem", "validator", "check_spec", "check_artifacts",
           "has_errors", "REGISTRY", "load_domains"]

_DOMAINS_LOADED = False


def load_domains() -> None:
    """Import every estate.check.<domain> module so its validators register."""
    global _DOMAINS_LOADED
    if _DOMAINS_LOADED:
        return
    import estate.check as pkg
    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name not in {"findings", "registry"}:
            importlib.import_module(f"estate.check.{mod.name}")
    _DOMAINS_LOADED = True


def check_spec(estate, locate=lambda loc: "") -> list[Finding]:
    load_domains()
    gate = run("gate", estate, locate)   # limits that make the other checks unbounded
    if has_errors(gate):
        return sort_findings(gate)
    return sort_findings(gate + run("spec", estate, locate))


def check_artifacts(ctx, locate=lambda loc: "") -> list[Finding]:
    """ctx is an estate.render.RenderContext-like object: .estate and .artifacts."""
    load_domains()
    return sort_findings(run("artifacts", ctx, locate))
