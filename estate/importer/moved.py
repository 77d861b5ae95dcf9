"""Line keys Slurm renamed (PartitionName's Shared, NodeName's Procs): read under their
current names, each rename reported as changed (slurm_conf/keys/moved.json)."""
from __future__ import annotations

from estate.importer.parse import ConfLine
from estate.importer.report import ImportReport
from estate.model.slurm_keys import moved


def renamed(line: ConfLine, params: dict, table: str, version: str, report: ImportReport,
            file: str) -> dict:
    """params (lowercase key -> (key as written, value)) with renamed keys under their
    new names; a key given both ways keeps the new one, as Slurm's parser does."""
    gone = moved(table, version)
    out = {k: v for k, v in params.items() if k not in gone}
    for key, (written, value) in params.items():
        if (entry := gone.get(key)) is None:
            continue
        out.setdefault(entry["to"].lower(), (entry["to"], value))
        report.change(file, line.number, f"{written}={value} ({line.pairs[0][0]}="
                      f"{line.name})", f"written as {entry['to']}={value}: {entry['says']}")
    return out
