"""slurm_conf/refusals.json, the table of what Slurm does that Estate's messages quote
(the live tier runs each entry: tests/live_slurm/test_slurm_refusals.py): its entries are
well formed, every sentence a message takes from it names an entry, and no message in the
validators or the importer says what Slurm does in words of its own."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from estate.catalogue import SLURM_SUITES
from estate.model import slurm_refusals as table
from estate.model.slurm_refusals import DRAINS, EXITS, REFUSES_THE_JOB, REFUSES_TO_START

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = sorted((ROOT / "estate" / "check").glob("*.py")) + \
    sorted((ROOT / "estate" / "importer").glob("*.py"))
# What a claim about Slurm's behaviour looks like in a message string
CLAIM = re.compile(r"(slurmctld|slurmd|Slurm|daemons) (would )?(refuses?|rejects|drains|dies|"
                   r"exits|stops|ignores|silently|not start)")


def test_ids_are_unique_and_named():
    ids = table.ids()
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[a-z0-9_]+", i) for i in ids)


@pytest.mark.parametrize("refusal", table.ids())
def test_entry_says_what_slurm_does_and_how_it_is_shown(refusal):
    for version in table.releases(refusal):
        assert version in SLURM_SUITES
        e = table.entry(refusal, version)
        assert e["does"] in (REFUSES_TO_START, EXITS, REFUSES_THE_JOB, DRAINS, "loads it",
                            "preempts the job") \
            or e["does"].startswith("silently "), e["does"]
        assert e["sentence"] and "\n" not in e["sentence"]
        assert "slurm.conf" in e["files"] and e["used_by"]
        # something the live test can fail on: a refusal's words, or what the probe shows
        assert e["says"] or e["shows"], refusal
        assert e["does"] not in (REFUSES_THE_JOB, DRAINS) or "probe" in e


def test_every_sentence_a_message_takes_names_an_entry():
    used = set()
    for path in MESSAGES:
        used |= set(re.findall(r"refusal\(['\"](\w+)['\"]", path.read_text()))
        used |= set(re.findall(r"said = \"(\w+)\"", path.read_text()))
    assert used and used <= set(table.ids()), used - set(table.ids())


def _strings(path: Path) -> list[tuple[int, str]]:
    """The string literals of a module's code, with their line (docstrings and comments
    aside: those cite the table or the source)."""
    import ast
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_message_says_what_slurm_does_in_its_own_words():
    found = [f"{p.relative_to(ROOT)}:{line}: {text}" for p in MESSAGES
             for line, text in _strings(p) if CLAIM.search(text)]
    assert not found, "take the sentence from slurm_conf/refusals.json:\n" + "\n".join(found)


def test_a_release_may_differ_and_says_so():
    assert table.entry("allow_groups_unknown", "22.05")["does"] == REFUSES_THE_JOB
    assert table.entry("allow_groups_unknown", "24.11")["does"].startswith("silently ")
    assert table.sentence("allow_groups_unknown", "22.05") != \
        table.sentence("allow_groups_unknown", "24.11")
