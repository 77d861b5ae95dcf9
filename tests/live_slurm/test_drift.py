"""`estate drift`'s Slurm half on real slurmctld, on both releases Estate renders for (the
host's 22.05 and 24.11 from its Debian 13 root): a node's memory lowered in Slurm and a
weight changed with `scontrol update` are findings on those nodes, with the fix the
release needs; putting the rendered slurm.conf back alone leaves slurmctld's view as it
was (what `estate apply` does when only the installed copy drifted), and the
`scontrol reconfigure` the fix names restores it. The file, service and hardware halves
need nodes with ssh: tests/lab/test_drift.py.

`scontrol update` refuses RealMemory on both releases ("Update of this parameter is not
supported"), shown here: memory changes through slurm.conf and a reconfigure."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from estate.operate.drift import logic as d
from estate.model.update_policy import policy
from tests.live_slurm.conftest import lab_on_each_release

pytestmark = pytest.mark.live_slurm

SPEC = Path(__file__).with_name("drift.yaml")
lab = lab_on_each_release(SPEC)
FIX = d.Fixes("drift.yaml")


def reconfigure(lab, ctl: str, timeout: float = 30) -> None:
    """`scontrol reconfigure` until slurmctld takes it: a just-restarted 24.11 slurmctld
    resets the first connection (seen in tests/live_slurm/test_handoff.py)."""
    end = time.monotonic() + timeout
    while (ans := lab.run(ctl, ["scontrol", "reconfigure"], check=False)).returncode:
        assert time.monotonic() < end, ans.stdout + ans.stderr
        time.sleep(1)


def findings(lab) -> list[d.Finding]:
    selected = {n.name for n in lab.nodes()}
    return d.slurm_findings(lab.estate, lab.view(), selected, FIX)


def settle(lab, until, timeout: float = 60) -> list[d.Finding]:
    """Findings once until(findings) holds: 24.11's reconfigure restarts slurmctld, and
    its nodes are UNKNOWN until they register again."""
    end = time.monotonic() + timeout
    while True:
        found = findings(lab)
        if until(found) or time.monotonic() > end:
            return found
        time.sleep(0.5)


def test_memory_and_weight_drift_is_named_and_the_named_fix_restores_it(lab):
    ctl, [gpu1, gpu2] = lab.slurm.controllers[0], lab.workers()
    assert findings(lab) == []
    conf = lab.host_path(ctl, "/etc/slurm/slurm.conf")
    rendered = conf.read_bytes()
    refused = lab.run(ctl, ["scontrol", "update", f"nodename={gpu1}", "realmemory=2048"],
                      check=False)
    assert refused.returncode != 0
    assert "Update of this parameter is not supported" in refused.stdout + refused.stderr
    try:
        assert b"RealMemory=3072" in rendered
        conf.write_bytes(rendered.replace(b"RealMemory=3072", b"RealMemory=2048"))
        reconfigure(lab, ctl)
        want = {(gpu1, "RealMemory"), (gpu2, "RealMemory"), (gpu1, "Weight")}
        got = lambda fs: {(f.node, f.what) for f in fs}   # noqa: E731
        # reconfigure on 24.11 restarts slurmctld, which may reset an update: after it
        settle(lab, lambda fs: {(gpu1, "RealMemory"), (gpu2, "RealMemory")} <= got(fs))
        lab.run(ctl, ["scontrol", "update", f"nodename={gpu1}", "weight=7"])
        found = settle(lab, lambda fs: got(fs) == want)
        assert got(found) == want, found
        by = {(f.node, f.what): f for f in found}
        assert (by[(gpu1, "RealMemory")].expected, by[(gpu1, "RealMemory")].actual) == \
            ("3072", "2048")
        for f in found:
            assert f.aspect == "slurm" and f.status == d.DRIFT
            assert f"`scontrol reconfigure` on {ctl}" in f.fix
            # a restart after it only where the update policy classes the key stronger
            # (22.05's manual does for node changes; Estate's judgements may say otherwise)
            stronger = policy(lab.slurm.version, f"node:{f.what}").cls != "reconfigure"
            assert ("if that leaves it" in f.fix) is stronger, f.fix

        conf.write_bytes(rendered)      # what `estate apply` restores: the file alone
        time.sleep(1)
        assert got(findings(lab)) == want   # slurmctld still runs on what it read
    finally:
        conf.write_bytes(rendered)
        reconfigure(lab, ctl)
    assert settle(lab, lambda fs: fs == []) == []
    lab.wait_workers(time.monotonic() + 30)
