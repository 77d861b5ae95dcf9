"""One side of `estate diff`: a spec rendered (in a forked child where it can be), or a tree
read back from its MANIFEST.json, as its files and who installs them."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from estate import fork
from estate.findings import Finding, Severity
from estate.spec.hostlist import Hostlist, HostlistError

NONE = Hostlist()


# --- one side: a rendered estate ---------------------------------------------------------

@dataclass
class File:
    content: bytes | None          # None: not read yet (a manifest's file, read on demand)
    consumers: Hostlist
    mode: str = "0644"
    owner: str = "root"
    sha256: str = ""
    where: Path | None = None      # the file on disk, for a manifest's side

    def digest(self) -> str:
        if not self.sha256:
            self.sha256 = hashlib.sha256(self.bytes()).hexdigest()
        return self.sha256

    def bytes(self) -> bytes:
        if self.content is None:
            self.content = self.where.read_bytes() if self.where else b""
        return self.content


@dataclass
class Roles:
    controllers: Hostlist = NONE
    slurmd: Hostlist = NONE
    login: Hostlist = NONE


@dataclass
class Side:
    label: str
    files: dict[str, File] = field(default_factory=dict)
    version: str = ""
    roles: Roles = field(default_factory=Roles)
    partitions: dict[str, Hostlist] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.severity is Severity.ERROR for f in self.findings) and \
            bool(self.files or self.version)


def prepare(spec_path: str | Path) -> tuple[Side, object | None]:
    """The spec loaded and resolved, with the gate's findings (the limits that bound
    rendering; the other validators are `estate check`'s); no Estate where it fails."""
    from estate.check import check_gate, has_errors
    from estate.pipeline import internal_error
    from estate.spec.load import load
    from estate.spec.resolved import Estate
    side = Side(str(spec_path))
    try:
        loaded = load(spec_path)
        side.findings = list(loaded.findings)
        if loaded.spec is None:
            return side, None
        estate = Estate(loaded.spec, loaded.files)
        gate = check_gate(estate, loaded.source.locate)
        side.findings += gate
        if has_errors(gate):
            return side, None
    except Exception as exc:  # noqa: BLE001 - reported as a finding, as build does
        side.findings.append(internal_error(exc, "diff load"))
        return side, None
    describe(side, estate)
    return side, estate


def describe(side: Side, estate) -> None:
    """What the diff reads of a spec besides its files: its release, roles, partitions."""
    side.version = estate.spec.slurm.version
    side.roles = Roles(Hostlist.from_names(estate.spec.slurm.controllers),
                       estate.role_hosts("slurm_worker"), estate.role_hosts("slurm_login"))
    from estate.model import model
    side.partitions = {p.name: p.members.hostlist() for p in model(estate).partitions}


def built_side(label: str, estate, artifacts) -> Side:
    """A side from a spec already rendered (estate apply's build), as render_part gives
    its files."""
    side = Side(label, {p: File(a.content, a.consumers, f"{a.mode:04o}", a.owner)
                        for p, a in artifacts.items()})
    describe(side, estate)
    return side


def render_part(side: Side, estate, source: str, modules=None) -> dict[str, File] | None:
    """Files of the builders in `modules` (default all); None, with a finding on the
    side, where rendering fails. Never raises on bad input."""
    from estate.pipeline import internal_error
    from estate.render import assemble, render_each
    from estate.render.templates import RenderError
    try:
        artifacts = assemble(render_each(estate, source, modules))
    except RenderError as exc:
        side.findings.append(Finding("render.unsafe_value", Severity.ERROR, "<root>",
                                     str(exc), "change the spec value the message names"))
        return None
    except Exception as exc:  # noqa: BLE001
        side.findings.append(internal_error(exc, "diff render"))
        return None
    return {p: File(a.content, a.consumers, f"{a.mode:04o}", a.owner)
            for p, a in artifacts.items()}


def render_side(spec_path: str | Path, source: str | None = None) -> Side:
    """The spec rendered without its validators; source: the name the files' headers
    carry (the new spec's, so that two spec files differ only where their contents do)."""
    side, estate = prepare(spec_path)
    if estate is not None:
        side.files = render_part(side, estate, source or str(spec_path)) or {}
    return side


def _warm() -> None:
    """Import the builders before a fork, so that the two processes do not both import
    them (on a busy machine the second core is not free)."""
    from estate.render import _builders
    for _ in _builders():
        pass


def _in_child(fn):
    """fn() in a forked child where that is usable, else None (then the caller runs it)."""
    from estate.pipeline import debugging
    if not fork.usable() or debugging():
        return None
    try:
        return fork.Forked(fn)
    except OSError:
        return None


def _joined(child, fallback):
    try:
        return child.join()
    except fork.ChildLost:
        return fallback()


def read_tree(directory: Path) -> Side:
    """The tree `estate render` (or apply) wrote: MANIFEST.json and its files, read only
    where a hash differs."""
    from estate.render.artifacts import MANIFEST
    side = Side(str(directory))
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        side.findings.append(Finding(
            "diff.no_manifest", Severity.ERROR, "<root>",
            f"{directory / MANIFEST} cannot be read: {exc}",
            f"pass the directory `estate render SPEC --out DIR` wrote (it holds {MANIFEST})"))
        return side
    for path, m in manifest.items():
        try:
            consumers = Hostlist.parse(m.get("consumers", ""))
        except HostlistError:
            consumers = NONE
        side.files[path] = File(None, consumers, m.get("mode", "0644"), m.get("owner", "root"),
                                m.get("sha256", ""), directory / path)
    return side


def both_sides(old: Path, new: Path) -> tuple[Side, Side]:
    """Both specs rendered, each time from the specs as they are now: the old one in a
    forked child while the new one renders here."""
    old_side, old_estate = prepare(old)
    new_side, new_estate = prepare(new)
    if old_estate is None or new_estate is None:
        return old_side, new_side
    _warm()

    def old_files():
        return render_part(old_side, old_estate, str(new)), old_side.findings
    child = _in_child(old_files)
    try:
        new_side.files = render_part(new_side, new_estate, str(new)) or {}
    except BaseException:
        if child is not None:
            child.cancel()
        raise
    files, old_side.findings = _joined(child, old_files) if child else old_files()
    old_side.files = files or {}
    return old_side, new_side


def new_side_split(spec: Path) -> Side:
    side, estate = prepare(spec)
    return side if estate is None else split_render(side, estate, spec)


# What the child renders when one side is rendered on two cores. Not the pipeline's
# CHILD_BUILDERS (network, slurm): its child also runs the validators, which a diff does
# not. At 10,000 nodes (bench/bench_diff.py) network and slurm took the child 0.027 s and
# the rest the parent 0.065 s; with monitoring and storage instead, 0.043 and 0.049 s.
SPLIT_CHILD = frozenset({"estate.render.monitoring", "estate.render.storage"})


def split_render(side: Side, estate, spec: Path) -> Side:
    """The spec rendered on two cores: SPLIT_CHILD's builders in a forked child, the
    others here."""
    from estate.render import BUILDERS
    _warm()
    theirs = set(SPLIT_CHILD)

    def child_files():
        return render_part(side, estate, str(spec), theirs), side.findings
    child = _in_child(child_files)
    mine = render_part(side, estate, str(spec),
                       {m for m, _ in BUILDERS} - (theirs if child else set()))
    files, found = _joined(child, child_files) if child else ({}, [])
    side.findings += [f for f in found if f not in side.findings]
    if mine is None or files is None:
        return side
    side.files = {**mine, **files}
    return side
