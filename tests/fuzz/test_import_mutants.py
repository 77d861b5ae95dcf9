"""Property (issue 30 §1): every configuration the importer's tests hold
(tests/data/slurm-sites/), mutated (keys removed, lines removed, hosts renamed, unknown
hosts added to the topology), imports to a spec `estate check` finds no error in, or the
import fails with an ImportFailed that names the file and the line.

Hypothesis draws the mutants (derandomized: the same ones every run, so a failure
replays); ESTATE_IMPORT_EXAMPLES sets how many.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estate.importer.mapping import ImportFailed, Sources, import_slurm
from estate.importer.parse import logical_lines
from estate.pipeline import build

SITES = Path(__file__).resolve().parents[1] / "data" / "slurm-sites"
CONFS = sorted(p for p in SITES.glob("*.conf")
               if not p.name.endswith((".topology.conf", ".gres.conf")))
EXAMPLES = int(os.environ.get("ESTATE_IMPORT_EXAMPLES", "1000"))
OBJECTS = ("nodename=", "partitionname=", "nodeset=", "switchname=")


def _sidecar(conf: Path, kind: str) -> str | None:
    path = conf.with_name(f"{conf.stem}.{kind}.conf")
    return path.read_text() if path.exists() else None


def _lines(text: str) -> list[str]:
    return [whole for _, whole in logical_lines(text)]


def remove_key(data, lines: list[str]) -> list[str]:
    """One key=value of an object line, or a whole global line."""
    i = data.draw(st.integers(0, len(lines) - 1))
    tokens = lines[i].split()
    if lines[i].lower().startswith(OBJECTS) and len(tokens) > 1:
        j = data.draw(st.integers(1, len(tokens) - 1))
        lines[i] = " ".join(tokens[:j] + tokens[j + 1:])
    else:
        del lines[i]
    return lines


def remove_line(data, lines: list[str]) -> list[str]:
    del lines[data.draw(st.integers(0, len(lines) - 1))]
    return lines


def rename_hosts(data, lines: list[str]) -> list[str]:
    """A NodeName line's hosts under another prefix (the lines naming them are not
    changed: partitions and switches then name hosts no line defines)."""
    nodes = [i for i, ln in enumerate(lines) if re.match(r"(?i)nodename=(?!default\b)", ln)]
    if nodes:
        i = data.draw(st.sampled_from(nodes))
        lines[i] = re.sub(r"(?i)^nodename=", "NodeName=renamed-", lines[i])
    return lines


def unknown_switch_members(data, lines: list[str]) -> list[str]:
    """Hosts no NodeName line defines, in a switch's Nodes= or in a new leaf."""
    leaves = [i for i, ln in enumerate(lines) if re.search(r"(?i)\bnodes=", ln)]
    if leaves and data.draw(st.booleans()):
        i = data.draw(st.sampled_from(leaves))
        lines[i] = re.sub(r"(?i)\bnodes=(\S+)", r"Nodes=\1,ghost[1-3]", lines[i])
    else:
        lines.append("SwitchName=ghostleaf Nodes=ghost[4-6]")
    return lines


SLURM_MUTATIONS = (remove_key, remove_line, rename_hosts)


def _errors(doc: dict) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return [f"{f.id}: {f.message} [{f.path}]" for f in build(path, render=False).findings
                if f.severity.value == "error"]


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.data())
def test_mutated_sites_import_clean_or_fail_on_a_line(data):
    conf = data.draw(st.sampled_from(CONFS), label="site")
    slurm = _lines(conf.read_text())
    topology = _sidecar(conf, "topology")
    topo = _lines(topology) if topology else None
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        if topo is not None and data.draw(st.booleans()):
            topo = unknown_switch_members(data, topo)
        elif slurm:
            slurm = data.draw(st.sampled_from(SLURM_MUTATIONS))(data, slurm)
    text = "\n".join(slurm) + "\n"
    src = Sources(text, gres=_sidecar(conf, "gres"),
                  topology="\n".join(topo) + "\n" if topo is not None else None,
                  slurm_name=conf.name)
    try:
        doc, _ = import_slurm(src)
    except ImportFailed as exc:
        assert re.match(rf"^{re.escape(conf.name)}|^topology\.conf|^gres\.conf", str(exc)), exc
        assert exc.line >= 0 and exc.file, exc
        return
    errors = _errors(doc)
    assert not errors, f"{conf.name} mutated:\n{text}\n" + "\n".join(errors)
