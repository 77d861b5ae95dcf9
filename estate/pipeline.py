"""The one pipeline every driver runs: load, check, render, check the artifacts.

The CLI, the Pulumi program and the lab all call ``build``; none of them has
its own path from spec to files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from estate.check import check_artifacts, check_spec, has_errors
from estate.check.findings import Finding, Severity, sort_findings
from estate.render import Artifacts, render_all
from estate.render.templates import RenderError
from estate.spec.load import Loaded, load
from estate.spec.resolved import Estate


@dataclass
class Build:
    loaded: Loaded
    estate: Estate | None = None
    artifacts: Artifacts | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.artifacts is not None and not has_errors(self.findings)


def build(spec_path: str | Path, render: bool = True) -> Build:
    """Check a spec and, if it is clean enough, render it. Never raises on bad input."""
    loaded = load(spec_path)
    result = Build(loaded, findings=list(loaded.findings))
    if loaded.spec is None:
        return result
    result.estate = Estate(loaded.spec)
    locate = loaded.source.locate
    result.findings += check_spec(result.estate, locate)
    if has_errors(result.findings) or not render:
        result.findings = sort_findings(result.findings)
        return result
    try:
        result.artifacts = render_all(result.estate, str(spec_path))
    except RenderError as exc:  # a value the spec types let through but a file cannot hold
        result.findings = sort_findings(result.findings + [Finding(
            "render.unsafe_value", Severity.ERROR, "<root>", str(exc),
            "change the spec value the message names (it would change the structure of a "
            "rendered file); nothing was rendered")])
        return result
    result.findings += check_artifacts(_ArtifactContext(result.estate, result.artifacts), locate)
    result.findings = sort_findings(result.findings)
    return result


@dataclass
class _ArtifactContext:
    estate: Estate
    artifacts: Artifacts
