"""Render the imported spec back to slurm.conf, so the import can report what changes."""
from __future__ import annotations

from pydantic import ValidationError

from estate.importer.compare import differences
from estate.importer.report import ImportReport
from estate.render.slurm import render_slurm
from estate.spec.model import Spec
from estate.spec.resolved import Estate


def rendered_slurm_conf(doc: dict, files: dict[str, str] | None = None) -> str | None:
    """The slurm.conf the document renders, or None where it is not a valid spec (then
    `estate check` on the written file says why). files: the programs the spec names
    (ImportReport.files); slurm.conf names their installed paths, not their bytes."""
    try:
        spec = Spec.model_validate(doc)
    except ValidationError:
        return None
    for artifact in render_slurm(Estate(spec, {name: b"" for name in files or {}})):
        if artifact.path == "slurm/slurm.conf":
            return artifact.content.decode()
    return None


def report_differences(source: str, doc: dict, report: ImportReport, file: str) -> bool:
    rendered = rendered_slurm_conf(doc, report.files)
    if rendered is None:
        report.default("the written spec does not validate: run `estate check` on it")
        return False
    differences(source, rendered, report, file)
    return True
