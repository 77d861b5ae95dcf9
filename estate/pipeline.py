"""The one pipeline every driver runs: load, check, render, check the artifacts.

The CLI, the Pulumi program and the lab all call ``build``; none of them has
its own path from spec to files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from estate import fork
from estate.check import check_artifacts, check_gate, check_spec, has_errors
from estate.findings import Finding, Severity, sort_findings
from estate.render import BUILDERS, Artifacts, assemble, render_all, render_each
from estate.render.templates import RenderError
from estate.spec.load import Loaded, Source, load
from estate.spec.resolved import Estate


@dataclass
class Build:
    loaded: Loaded
    estate: Estate | None = None
    artifacts: Artifacts | None = None
    findings: list[Finding] = field(default_factory=list)
    # (finding id, path) a caller renders despite, knowingly: only the controllers-only
    # lab of tests/live_slurm/test_mig_ctld.py (a slurmd plugin no slurmd there loads, and
    # a clash it shows slurmctld making)
    accepted: frozenset[tuple[str, str]] = frozenset()

    @property
    def blocking(self) -> list[Finding]:
        return blocking(self.findings, self.accepted)

    @property
    def ok(self) -> bool:
        return self.artifacts is not None and not has_errors(self.blocking)


def blocking(findings: list[Finding], accepted: frozenset) -> list[Finding]:
    """The findings a caller did not accept ((id, path)): those that stop rendering."""
    return [f for f in findings if (f.id, f.path) not in accepted]


def debugging() -> bool:
    """--debug (or ESTATE_DEBUG=1): let an unexpected exception through with its traceback."""
    return os.environ.get("ESTATE_DEBUG", "") not in ("", "0")


def internal_error(exc: BaseException, stage: str) -> Finding:
    """An exception Estate did not expect, as a finding: a bug, never the user's fault alone."""
    import traceback   # only for a bug: not on every command's start
    frame = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" at {Path(frame[0].filename).name}:{frame[0].lineno}" if frame else ""
    return Finding("internal.error", Severity.ERROR, "<root>",
                   f"{stage} failed unexpectedly: {type(exc).__name__}: {str(exc)[:200]}{where}",
                   "this is a bug in Estate: rerun with --debug (or ESTATE_DEBUG=1) for the "
                   "traceback and report it with the spec")


class NotRendered(RuntimeError):
    """The spec has errors, so nothing was written; the message lists the first of them."""


def render_to(spec_path: str | Path, out: Path) -> Build:
    """Build and write the tree into `out` atomically, for drivers that go on to apply it;
    NotRendered (out left as it was) when the spec has errors."""
    from estate.render import write_tree
    result = rendered(spec_path)
    write_tree(result.artifacts, out)
    return result


def rendered(spec_path: str | Path) -> Build:
    """The spec built and rendered, not written; NotRendered when it has errors."""
    result = build(spec_path)
    if not result.ok:
        errors = [f for f in result.findings if f.severity is Severity.ERROR]
        raise NotRendered(f"{spec_path} has {len(errors)} error(s); see `estate check "
                          f"{spec_path}`:\n" +
                          "\n".join(f"  {f.path}: {f.message}" for f in errors[:10]))
    return result


def build(spec_path: str | Path, render: bool = True,
          accept: frozenset[tuple[str, str]] = frozenset(), parallel: bool = False) -> Build:
    """Check a spec and, if it is clean enough, render it. Never raises on bad input: an
    unexpected exception in any stage becomes an internal.error finding (--debug raises).
    Findings in `accept` ((id, path)) stay in the result but do not stop rendering.
    parallel (the CLI's check and render), where estate.fork.usable(): a forked child runs
    the spec validators and renders CHILD_BUILDERS while this process renders the rest;
    the result is the serial one (tests/unit/test_fork.py), and a render of a spec the
    validators refuse is dropped."""
    result = Build(Loaded(None, Source(str(spec_path)), []), accepted=frozenset(accept))
    stage = "load"
    try:
        result.loaded = loaded = load(spec_path)
        result.findings = list(loaded.findings)
        if loaded.spec is None:
            return result
        stage = "check"
        estate = result.estate = Estate(loaded.spec, loaded.files)
        locate = loaded.source.locate
        gate = check_gate(estate, locate)   # without it, the validators and render are unbounded
        if has_errors(gate):
            result.findings = sort_findings(result.findings + gate)
            return result
        source = str(spec_path)
        ahead = (render and parallel and fork.usable() and not debugging()
                 and not has_errors(result.blocking))
        found, rendered, checked = (_ahead(estate, locate, source, result.accepted) if ahead
                                    else (check_spec(estate, locate, gate=False), None, None))
        result.findings += gate + found
        if has_errors(result.blocking) or not render:
            result.findings = sort_findings(result.findings)
            return result
        stage = "render"
        try:
            artifacts = rendered if rendered is not None else render_all(estate, source)
        except RenderError as exc:  # a value the spec types let through but a file cannot hold
            result.findings = sort_findings(result.findings + [Finding(
                "render.unsafe_value", Severity.ERROR, "<root>", str(exc),
                "change the spec value the message names (it would change the structure of "
                "a rendered file); nothing was rendered")])
            return result
        stage = "artifact check"
        result.findings += (checked if checked is not None else
                            check_artifacts(_ArtifactContext(estate, artifacts, source), locate))
        result.artifacts = artifacts
        result.findings = sort_findings(result.findings)
        return result
    except Exception as exc:  # noqa: BLE001 - the safety net; the causes are fixed where found
        if debugging():
            raise
        result.artifacts = None
        result.findings = sort_findings(result.findings + [internal_error(exc, stage)])
        return result


# What the child renders besides checking: the builders whose facts the validators derive
# anyway (the flow matrix, the Slurm node lines), which bring the child's work up to the
# parent's: the other builders and then the artifact checks, which read none of the
# child's files (tests/unit/test_fork.py), so the parent runs them before the child is
# done. The child also imports the spec stage's domain modules (estate.check.STAGE_DOMAINS)
# and is slower per instruction (its writes copy the parent's pages). At 10,000 nodes
# (bench/instructions.sh: instructions after the fork) the parent does 0.44 G and the child
# 0.37 G, and they end within 0.01 s of each other; with the storage builder in the child
# too, the child ended 0.02 s after the parent.
CHILD_BUILDERS = frozenset({"estate.render.network", "estate.render.slurm"})


def _ahead(estate: Estate, locate, source: str, accept: frozenset
           ) -> tuple[list[Finding], Artifacts | None, list[Finding] | None]:
    """The spec findings, the whole tree when the parts of both processes rendered, and
    the artifact findings; None for what must be done again in line (for the serial
    path's own result or exception)."""
    try:
        child = fork.Forked(partial(_child_half, estate, locate, source, accept))
    except OSError:   # no second process to be had (EAGAIN, ENOMEM): all of it in line
        return check_spec(estate, locate, gate=False), None, None
    try:
        mine = render_each(estate, source, {m for m, _ in BUILDERS} - CHILD_BUILDERS)
        checked = check_artifacts(_ArtifactContext(estate, assemble(mine), source), locate)
    except Exception:  # noqa: BLE001 - dropped: the spec may be refused, else done again
        mine = checked = None
    except BaseException:   # Ctrl-C: no child left behind
        child.cancel()
        raise
    found, theirs = child.join()
    if mine is None or theirs is None:
        return found, None, None
    return found, assemble({**mine, **theirs}), checked


def _child_half(estate: Estate, locate, source: str,
                accept: frozenset) -> tuple[list[Finding], dict | None]:
    """In the child: the spec validators, then CHILD_BUILDERS' part of a spec they pass.
    Its own failures come back as values: a traceback does not cross the pipe."""
    try:
        found = check_spec(estate, locate, gate=False)
    except Exception as exc:  # noqa: BLE001
        return [internal_error(exc, "check")], None
    if has_errors(blocking(found, accept)):
        return found, None
    try:
        return found, render_each(estate, source, CHILD_BUILDERS)
    except Exception:  # noqa: BLE001 - the parent renders it again and reports it
        return found, None


@dataclass
class _ArtifactContext:
    estate: Estate
    artifacts: Artifacts
    source: str = ""   # the spec's path, as the rendered headers name it
