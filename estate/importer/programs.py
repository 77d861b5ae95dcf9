"""The site's programs slurm.conf names (Prolog, Epilog, ResumeProgram, SuspendProgram).

The spec brings such programs along as files next to it (types.RelativeFile), installed
byte for byte; slurm.conf gives absolute paths on the site's machines. Where the import
runs on such a machine and can read a program, it is copied next to the written spec
(ImportReport.files) and the spec names the copy; elsewhere the line is reported. Cloud nodes
need both power-saving programs: without them they are imported as ordinary nodes and
that is reported on their NodeName line, since slurmctld could never power them up.
"""
from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Callable

from estate.importer.parse import ConfLine
from estate.importer.report import ImportReport

HOOKS = {"prolog": "prolog", "epilog": "epilog"}
POWER = {"resumeprogram": "resume_program", "suspendprogram": "suspend_program"}
POWER_NUMBERS = {"suspendtime": "suspend_time", "resumetimeout": "resume_timeout",
                 "suspendtimeout": "suspend_timeout", "resumerate": "resume_rate",
                 "suspendrate": "suspend_rate"}
KEYS = frozenset(HOOKS) | frozenset(POWER) | frozenset(POWER_NUMBERS)
Readable = Callable[[str], bool]


def readable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.R_OK)


def _copy(line: ConfLine, report: ImportReport, file: str, can_read: Readable) -> str | None:
    """The relative name the spec gives the program's copy, or None (reported)."""
    path = line.name
    if not path.startswith("/") or "," in path or not can_read(path):
        report.drop(file, line.number, line.text, f"{path} cannot be read here: run "
                    "`estate import` on a node that has it (it is then copied next to the "
                    "spec), or copy it next to the spec and name it in the spec")
        return None
    name = f"hooks/{PurePosixPath(path).name}"
    report.files[name] = path
    return name


def programs(lines: list[ConfLine], report: ImportReport, file: str,
             can_read: Readable = readable) -> tuple[dict, dict | None]:
    """(slurm.hooks, slurm.power_saving or None) from the source's lines."""
    found = {ln.keyword: ln for ln in lines if ln.keyword in KEYS}
    hooks = {field: name for key, field in HOOKS.items() if key in found
             if (name := _copy(found[key], report, file, can_read))}
    power: dict[str, str | int] = {field: name for key, field in POWER.items() if key in found
             if (name := _copy(found[key], report, file, can_read))}
    if set(power) != set(POWER.values()):
        for key in POWER_NUMBERS:
            if key in found:
                report.drop(file, found[key].number, found[key].text, "power saving needs "
                            "both ResumeProgram and SuspendProgram next to the spec")
        return hooks, None
    for key, field in POWER_NUMBERS.items():
        if key in found and found[key].name.isdigit():
            power[field] = int(found[key].name)
        elif key in found:
            report.drop(file, found[key].number, found[key].text, "the spec takes a "
                        "number of seconds (or nodes per minute) here")
    return hooks, power


def no_cloud(defs, report: ImportReport, file: str) -> None:
    """Cloud nodes as ordinary ones where the import has no power saving for them."""
    for d in defs:
        if d.state == "cloud":
            d.state = "unknown"
            report.change(file, d.line.number, f"State=CLOUD (NodeName={d.line.name})",
                          "written as an ordinary node: slurmctld powers cloud nodes up "
                          "with ResumeProgram, which the import could not bring along")
