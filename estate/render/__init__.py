"""Rendering: pure functions from the resolved estate to artifacts.

One builder module per component (slurm, kubernetes, lab, ...); ``render_all``
collects them. Rendering does no I/O beyond reading templates; writing happens
in ``artifacts.write_tree``.
"""
from __future__ import annotations

import importlib

from estate.render.artifacts import Artifact, Artifacts, write_tree
from estate.spec.resolved import Estate

# (module, function) pairs; a builder whose module is not there yet is skipped
# only if the module itself is missing, never on errors inside it.
BUILDERS = [
    ("estate.render.slurm", "render_slurm"),
    ("estate.render.kubernetes", "render_kubernetes"),
    ("estate.render.lab", "render_lab"),
    ("estate.render.network", "render_network"),
    ("estate.render.identity", "render_identity"),
    ("estate.render.storage", "render_storage"),
]

__all__ = ["Artifact", "Artifacts", "render_all", "write_tree"]


def _builders():
    for module, func in BUILDERS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        yield getattr(mod, func)


def render_all(estate: Estate, source: str = "") -> Artifacts:
    out = Artifacts()
    for build in _builders():
        for artifact in build(estate, source):
            out.add(artifact)
    return out
