"""The login nodes' seff (slurm_conf/seff.py.j2), run as rendered under Debian's python3
against a sacct on PATH that prints what 22.05's sacct printed for a lab job."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from estate.model.destinations import destination, installer
from estate.model.services import SEFF
from estate.pipeline import build

# Job 13: the ReqMem 22.05's sacct printed once just after a lab job ended ('16?', NO_VAL).
SACCT = """#!/bin/sh
if [ "$2" = 13 ]; then cat <<'X'
13|lab|alice|research|COMPLETED|0:0|1|1|00:01.900|00:00:02|16?||research|gpu
13.0|lab|||COMPLETED|0:0|1|1|00:01.800|00:00:02||52224K||
X
exit 0; fi
cat <<'X'
12|lab|alice|research|COMPLETED|0:0|1|2|00:01.500|00:00:03|1920M||research|gpu
12.batch|lab|||COMPLETED|0:0|1|2|00:00.100|00:00:03||2048K||
12.0|lab|||COMPLETED|0:0|1|1|00:01.400|00:00:02||52224K||
X
"""


@pytest.fixture(scope="module")
def seff(tmp_path_factory):
    art = build("stacks/lab.yaml").artifacts[SEFF]
    assert (str(art.consumers), art.mode) == ("login1", 0o755)
    assert destination(SEFF) == "/usr/local/bin/seff"
    assert installer(SEFF, ["common", "slurm_login"]) == "slurm_login"
    d = tmp_path_factory.mktemp("seff")
    (d / "seff").write_bytes(art.content)
    (d / "sacct").write_text(SACCT)
    os.chmod(d / "sacct", 0o755)
    return d


def _run(d, *args):
    env = dict(os.environ, PATH=f"{d}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, str(d / "seff"), *args], capture_output=True,
                          text=True, env=env)


def test_seff_reports_cpu_and_memory_efficiency(seff):
    out = _run(seff, "12")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "State: COMPLETED (exit code 0)" in lines
    # 1.5 CPU-seconds of 2 cores x 3 s; the largest step's MaxRSS (51 MiB) of 1920 MiB
    assert "CPU Efficiency: 25.00% of 00:00:06 core-walltime" in lines
    assert "Memory Utilized: 51.00 MB" in lines
    assert "Memory Efficiency: 2.66% of 1.88 GB" in lines


def test_a_memory_request_sacct_does_not_know_yet_is_said_so(seff):
    out = _run(seff, "13")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "Memory Utilized: 51.00 MB" in lines
    assert "Memory Efficiency: unknown (sacct has no memory request for the job yet)" in lines


def test_seff_refuses_what_is_not_a_job_id(seff):
    for args in ((), ("12; reboot",), ("1", "2")):
        out = _run(seff, *args)
        assert out.returncode == 2 and "usage: seff JOBID" in out.stderr
