"""The validator registry: every check has a stable id, a severity and a domain.

A validator is a function ``(ctx) -> Iterable[Problem]`` registered with
``@validator(...)``. It yields ``Problem(path, message, hint)``; the registry
turns those into findings carrying the validator's id and severity, and the
file position of the path. Spec validators see the resolved estate; artifact
validators (``stage="artifacts"``) also see what was rendered. Gate validators
(``stage="gate"``) run first: an error there (a spec too large to check in bounded
time) stops the spec stage.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Protocol

from estate.findings import Finding, Severity
from estate.spec.resolved import Estate


class Problem(NamedTuple):
    path: str
    message: str
    hint: str = ""
    loc: tuple = ()  # spec location for file:line:col; derived from path when empty


Problems = Iterable[Problem]   # what a validator yields (or returns)


class ArtifactContext(Protocol):
    """What an artifact validator sees: the estate and what was rendered of it
    (estate.render's Artifacts, untyped here: no validator imports a renderer)."""

    @property
    def estate(self) -> Estate: ...

    @property
    def artifacts(self) -> Any: ...


@dataclass(frozen=True)
class Validator:
    id: str
    severity: Severity
    domain: str
    stage: str
    summary: str
    func: Callable[..., Problems | None]   # (Estate) or (ArtifactContext), by stage


REGISTRY: dict[str, Validator] = {}


def validator(id: str, severity: Severity, domain: str, summary: str, stage: str = "spec"):
    def register(func):
        if id in REGISTRY:
            raise ValueError(f"duplicate validator id {id}")
        REGISTRY[id] = Validator(id, severity, domain, stage, summary, func)
        return func
    return register


def path_loc(path: str) -> tuple:
    """'nodes[3].switch' -> ('nodes', 3, 'switch')."""
    out: list = []
    for part in path.replace("]", "").split("."):
        name, *indices = part.split("[")
        if name:
            out.append(name)
        out.extend(int(i) for i in indices if i.isdigit())
    return tuple(out)


def run(stage: str, ctx, locate: Callable[[tuple], str] = lambda loc: "") -> list[Finding]:
    findings = []
    for v in REGISTRY.values():
        if v.stage != stage:
            continue
        for p in v.func(ctx) or ():
            findings.append(Finding(v.id, v.severity, p.path, p.message, p.hint,
                                    locate(p.loc or path_loc(p.path))))
    return findings


def describe() -> Iterable[Validator]:
    return sorted(REGISTRY.values(), key=lambda v: v.id)
