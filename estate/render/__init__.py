"""Rendering: pure functions from the resolved estate to artifacts.

One builder module per component (slurm, kubernetes, lab, ...); ``render_all``
collects them. Rendering does no I/O beyond reading templates; writing happens
in ``artifacts.write_tree``.
"""
from __future__ import annotations

import importlib
from typing import Collection

from estate.render.artifacts import Artifact, Artifacts, write_tree
from estate.spec.resolved import Estate

# (module, function) pairs; a builder whose module is not there yet is skipped
# only if the module itself is missing, never on errors inside it.
BUILDERS = [
    ("estate.render.slurm", "render_slurm"),
    ("estate.render.bridge", "render_bridge"),
    ("estate.render.kubernetes", "render_kubernetes"),
    ("estate.render.lab", "render_lab"),
    ("estate.render.network", "render_network"),
    ("estate.render.identity", "render_identity"),
    ("estate.render.storage", "render_storage"),
    ("estate.render.monitoring", "render_monitoring"),
    ("estate.render.dcgm_exporter", "render_dcgm_exporter"),
    ("estate.render.certificates", "render_certificates"),
    ("estate.render.reframe", "render_reframe"),
]

__all__ = ["Artifact", "Artifacts", "assemble", "render_all", "render_each", "write_tree"]


def _builders(modules: Collection[str] | None = None):
    for module, func in BUILDERS:
        if modules is not None and module not in modules:
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        yield module, getattr(mod, func)


def render_each(estate: Estate, source: str = "",
                modules: Collection[str] | None = None) -> dict[str, list[Artifact]]:
    """Each builder's artifacts by its module name, for `modules` (default: every builder):
    the pipeline renders some builders in a child process and the rest in the parent."""
    return {module: list(build(estate, source)) for module, build in _builders(modules)}


def assemble(parts: dict[str, list[Artifact]]) -> Artifacts:
    """One tree from render_each's parts, in BUILDERS' order, as render_all makes it."""
    out = Artifacts()
    for module, _ in BUILDERS:
        for artifact in parts.get(module, ()):
            out.add(artifact)
    return out


def render_all(estate: Estate, source: str = "") -> Artifacts:
    return assemble(render_each(estate, source))
