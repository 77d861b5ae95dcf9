"""Every entry of slurm_conf/refusals.json on real Slurm, on every release it holds for
(22.05 from the host, 24.11 from the Debian 13 root): the message sentences Estate's
validators and importer take from that table (estate/model/slurm_refusals.py) say what
Slurm does, and this holds Slurm to them.

Each entry's files (after the table's head) go to one slurmctld in its own namespaces, as
tests/live_slurm/test_import_roundtrip.py runs it (its harness: paths, user, munge socket);
the entry's probe then runs against it: scontrol, sbatch (as root, or as nobody where the
claim is about users), or a slurmd for node n1 on the controller's loopback where the
claim is about what a registering node gets. All of a release's entries run at once, one
namespace each, so that the tier pays for the slowest entry, not the sum.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from estate.catalogue import HOST_SUITE, SLURM_SUITES
from estate.lab.netns import release_root
from estate.model.slurm_refusals import EXITS, REFUSES_TO_START, entry, head, ids, releases
from tests.live_slurm.test_import_roundtrip import _slurmctld, munge  # noqa: F401 (fixture)

pytestmark = pytest.mark.live_slurm
CASES = [(i, v) for i in ids() for v in releases(i)]
PARALLEL = 4        # namespaces at once (each a slurmctld, at most a second or two of CPU)
DIED = 3            # the harness script's exit status where slurmctld exits before it answers


def conf_of(e: dict) -> str:
    """The head's lines (less the keys the entry sets itself), then the entry's slurm.conf."""
    conf = e["files"]["slurm.conf"]
    keys = {k.lower() for k in re.findall(r"^(\w+)=", conf, re.M)}
    kept = [ln for ln in head().splitlines() if ln.split("=", 1)[0].lower() not in keys]
    return "\n".join(kept) + "\n" + conf


def _run(e: dict, base: Path, sock: Path, release: tuple[str, str]):
    run = base / f"{release[0]}-{e['id']}"
    files = {k: v for k, v in e["files"].items() if k not in ("slurm.conf", "topology.conf")}
    proc = _slurmctld(conf_of(e), e["files"].get("topology.conf"), run, sock, release,
                      e.get("probe", "$in_root scontrol -o show node; "
                                     "$in_root scontrol -o show partition"), files)
    logs = "".join(p.read_text(errors="replace") for p in sorted(run.glob("*.log")))
    return proc, logs


@pytest.fixture(scope="module")
def outcomes(munge):
    """version -> entry id -> (the harness's process, slurmctld's and slurmd's logs): each
    release's entries run together on first use."""
    # readable by nobody (the probes that submit as a user): not below pytest's 0700 dirs
    base = Path(tempfile.mkdtemp(prefix="estate-refusals.", dir="/tmp"))
    base.chmod(0o755)
    done: dict[str, dict] = {}

    def of(version: str) -> dict:
        if version not in done:
            if SLURM_SUITES[version] != HOST_SUITE and shutil.which("debootstrap") is None:
                pytest.skip(f"Slurm {version} runs from a debootstrapped root: needs "
                            "debootstrap")
            release = (version, release_root(version))
            said = subprocess.run(["chroot", release[1], "slurmctld", "-V"],
                                  capture_output=True, text=True).stdout
            assert said.startswith(f"slurm-wlm {version}."), said
            todo = [entry(i, version) for i, v in CASES if v == version]
            with ThreadPoolExecutor(PARALLEL) as pool:
                results = pool.map(lambda e: _run(e, base, munge, release), todo)
                done[version] = dict(zip((e["id"] for e in todo), results))
        return done[version]

    yield of
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("refusal,version", CASES, ids=[f"{i}-{v}" for i, v in CASES])
def test_slurm_does_what_the_table_says(refusal, version, outcomes):
    e = entry(refusal, version)
    proc, logs = outcomes(version)[refusal]
    said = proc.stdout + proc.stderr + logs
    if e["does"] == REFUSES_TO_START:
        assert proc.returncode == DIED, f"slurmctld ran on:\n{e['files']}\n{proc.stdout}"
    elif e["does"] == EXITS:     # the harness finds no slurmctld to stop after the probe
        assert proc.returncode != 0 and "kill: No such process" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0, f"slurmctld did not run: {proc.stderr}\n{logs[-3000:]}"
    for text in e["says"]:
        assert text in said, f"Slurm did not say {text!r}:\n{proc.stdout}\n{proc.stderr}\n" \
                             f"{logs[-3000:]}"
    for pattern in e["shows"]:
        assert re.search(pattern, proc.stdout, re.M), f"{pattern!r} not in:\n{proc.stdout}"
    for pattern in e["hides"]:
        assert not re.search(pattern, proc.stdout, re.M), f"{pattern!r} in:\n{proc.stdout}"
