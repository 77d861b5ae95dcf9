"""What real Slurm does with the configurations Estate's messages describe, read from
slurm_conf/refusals.json (issue 48).

Every validator or importer message that says what Slurm does (refuses to start,
refuses the job, drains the node, or silently does something else) takes its sentence
from that table, and tests/live_slurm/test_slurm_refusals.py runs each entry's files
against real slurmctld (and slurmd or sbatch where the claim is about nodes or jobs) on
every release Estate renders for, asserting that Slurm does what the entry says.
"""
from __future__ import annotations

import json
from functools import lru_cache

from estate import paths
from estate.catalogue import SLURM_SUITES

TABLE = paths.SLURM_CONF / "refusals.json"
# What an entry says Slurm does: it stops at the files, exits on a later step (a
# reconfigure), refuses a job, drains a node, or takes the files and does something the
# spec's author may not expect ("silently ...", "loads it").
REFUSES_TO_START, EXITS, REFUSES_THE_JOB, DRAINS = ("refuses to start", "exits",
                                                   "refuses the job", "drains the node")
@lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads(TABLE.read_text())


def head() -> str:
    """The slurm.conf lines every entry's files come after (a controller, cons_tres)."""
    return _table()["head"]


def ids() -> list[str]:
    return [e["id"] for e in _table()["refusals"]]


def releases(refusal_id: str) -> list[str]:
    """The releases the entry holds for (its 'only', else every release Estate renders)."""
    return list(_entry(refusal_id).get("only", sorted(SLURM_SUITES)))


def _entry(refusal_id: str) -> dict:
    for e in _table()["refusals"]:
        if e["id"] == refusal_id:
            return e
    raise KeyError(f"no entry '{refusal_id}' in {TABLE.name}")


def entry(refusal_id: str, version: str | None = None) -> dict:
    """The entry, with what `version` does differently folded in (its 'releases')."""
    e = dict(_entry(refusal_id))
    if version is not None:
        e.update(e.pop("releases", {}).get(version, {}))
    e.pop("releases", None)
    e.setdefault("says", [])
    e.setdefault("shows", [])
    e.setdefault("hides", [])
    return e


def sentence(refusal_id: str, version: str | None = None) -> str:
    """What a message says Slurm does (the sentence the live tier holds to Slurm)."""
    return entry(refusal_id, version)["sentence"]
