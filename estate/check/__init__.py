"""Checking: schema first, then every registered validator, then artifact checks.

Importing the domain modules registers their validators.
"""
from __future__ import annotations

import importlib
import pkgutil

from estate.check.findings import Finding, Severity, has_errors, sort_findings
from estate.check.registry import REGISTRY, Problem, run, validator

__all__ = ["Finding", "Severity", "Problem", "validator", "check_gate", "check_spec",
           "check_artifacts", "has_errors", "REGISTRY", "load_domains"]

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


def check_gate(estate, locate=lambda loc: "") -> list[Finding]:
    """The limits (hosts, expansion) without which the other checks, and rendering, are
    unbounded: run first, and nothing else runs on an error here."""
    load_domains()
    return sort_findings(run("gate", estate, locate))


def check_spec(estate, locate=lambda loc: "", gate: bool = True) -> list[Finding]:
    """Every spec validator; gate=False when the caller has run check_gate already."""
    gated = check_gate(estate, locate) if gate else []
    if has_errors(gated):
        return gated
    return sort_findings(gated + run("spec", estate, locate))


def check_artifacts(ctx, locate=lambda loc: "") -> list[Finding]:
    """ctx is an estate.render.RenderContext-like object: .estate and .artifacts."""
    load_domains()
    from estate.check.kubernetes_schema import small_parses_kept
    with small_parses_kept(getattr(ctx, "source", "")):
        return sort_findings(run("artifacts", ctx, locate))
