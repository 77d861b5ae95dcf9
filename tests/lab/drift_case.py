"""`estate drift` on the Docker lab (stacks/lab.yaml through Vagrant, provisioned by the
roles): a provisioned lab has no drift; three changes made by hand - an installed
slurm.conf edited on login1, gpu1's and gpu2's memory lowered in Slurm (and gpu1's weight
changed with `scontrol update`), slurmd stopped on gpu2 - are each named with its node and
fix; after `estate apply` it reports none.

RealMemory cannot be changed with `scontrol update` (Slurm 22.05 and 24.11 refuse it:
"Update of this parameter is not supported"; the test shows the refusal), so the memory
is lowered the way an operator does it: slurm.conf on the controller, then `scontrol
reconfigure`. `estate apply` puts the file back and, since it put a config back, runs
`scontrol reconfigure` (its digest had not changed, so it would not restart slurmctld).

It runs on test_lab_cycle.py's lab, before that module takes the lab down (one cold lab
for the tier instead of two).
"""
from __future__ import annotations

import json
import subprocess
import time
import xml.etree.ElementTree as ET
from functools import partial
from pathlib import Path

from tests.lab import lab_commands
from tests.lab.lab_commands import OUT, SPEC, SSH

estate = partial(lab_commands.estate, timeout=900)
NODES = "ctl1,login1,gpu[1-2]"
CTL, LOGIN, GPU2 = "10.60.0.11", "10.60.0.12", "10.60.0.14"
APPLY = f"estate apply {SPEC} --limit {{}} --lab"


def on(addr: str, command: str, check=True) -> subprocess.CompletedProcess:
    return subprocess.run([*SSH, f"root@{addr}", command], text=True, capture_output=True,
                          timeout=120, check=check)


def drift(tmp: Path, name: str) -> tuple[int, dict, ET.Element, str]:
    report = tmp / name
    proc = estate("drift", SPEC, "--lab", "--limit", NODES, "--last", OUT,
                  "--report-dir", str(report), check=False)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    doc = json.loads((report / "drift.json").read_text())
    assert doc["ok"] is (proc.returncode == 0)
    return proc.returncode, doc, ET.parse(report / "junit.xml").getroot(), proc.stdout


def drifted(doc: dict) -> dict[tuple[str, str, str], dict]:
    return {(f["node"], f["aspect"], f["what"]): f for f in doc["findings"]
            if f["status"] == "drift"}


def wait_idle(timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = on(CTL, "sinfo -h -N -n 'gpu[1-2]' -o %T").stdout.split()
        if states and set(states) == {"idle"}:
            return
        assert time.monotonic() < deadline, f"gpu[1-2] not idle: {states}"
        time.sleep(1)


def restore() -> None:
    estate("apply", SPEC, "-o", OUT, "--lab", "--limit", NODES)
    on(CTL, "scontrol reconfigure")
    wait_idle()


def check(tmp_path) -> None:
    """The whole case, on a provisioned lab (tests/lab/test_lab_cycle.py's)."""
    rc, doc, _, out = drift(tmp_path, "before")
    assert rc == 0 and drifted(doc) == {}, out[-3000:]
    # the lab's emulation is said, not counted: 2-core containers emulate 4-core nodes
    assert {(f["node"], f["what"]) for f in doc["findings"] if f["status"] == "tolerated"
            and f["aspect"] == "hardware"} >= {("gpu1", "CPUs"), ("gpu2", "CPUs")}
    assert any(f["aspect"] == "kubernetes" and f["status"] == "skipped"
               and "ESTATE_KUBECONFIG" in f["actual"] for f in doc["findings"])
    restored = False
    try:
        on(LOGIN, "echo '# drift: edited by hand' >> /etc/slurm/slurm.conf")
        refused = on(CTL, "scontrol update nodename=gpu1 realmemory=6144", check=False)
        assert refused.returncode != 0
        assert "Update of this parameter is not supported" in refused.stderr + refused.stdout
        on(CTL, "sed -i 's/RealMemory=7680/RealMemory=6144/' /etc/slurm/slurm.conf && "
                "scontrol reconfigure && scontrol update nodename=gpu1 weight=7")
        on(GPU2, "systemctl stop slurmd")

        rc, doc, junit, out = drift(tmp_path, "drifted")
        assert rc == 1
        found = drifted(doc)
        cache = "/var/spool/slurmd/conf-cache/slurm.conf"
        assert set(found) == {
            ("login1", "file", "/etc/slurm/slurm.conf"),     # the edited file
            ("ctl1", "file", "/etc/slurm/slurm.conf"),      # where the memory was lowered
            ("gpu1", "slurm", "RealMemory"), ("gpu2", "slurm", "RealMemory"),
            ("gpu1", "slurm", "Weight"),
            # the reconfigure handed the lowered memory to the configless slurmds
            ("gpu1", "file", cache), ("gpu2", "file", cache),
            ("gpu2", "service", "slurmd")}, sorted(found)
        assert "edited on the node" in found[("login1", "file", "/etc/slurm/slurm.conf")]["actual"]
        assert found[("login1", "file", "/etc/slurm/slurm.conf")]["fix"] == APPLY.format("login1")
        assert (found[("gpu1", "slurm", "RealMemory")]["expected"],
                found[("gpu1", "slurm", "RealMemory")]["actual"]) == ("7680", "6144")
        assert "`scontrol reconfigure` on ctl1" in found[("gpu1", "slurm", "RealMemory")]["fix"]
        assert found[("gpu2", "service", "slurmd")]["fix"] == APPLY.format("gpu2")
        assert any(line.split()[:4] == ["drift", "gpu2", "service", "slurmd"]
                   for line in out.splitlines()), out[-3000:]
        suite = junit.find("testsuite")
        failed = {c.get("name") + " " + c.get("classname").split(".")[-1]
                  for c in suite.iter("testcase") if c.find("failure") is not None}
        assert failed == {"login1 file", "ctl1 file", "gpu1 slurm", "gpu2 slurm", "gpu1 file",
                          "gpu2 file", "gpu2 service"}
        assert int(suite.get("failures")) == len(failed)

        applied = estate("apply", SPEC, "-o", OUT, "--lab", "--limit", NODES, "--json",
                         str(tmp_path / "apply.json"))
        changed = {h: r["changed"] for h, r in
                   json.loads((tmp_path / "apply.json").read_text())["hosts"].items()
                   if r["changed"]}
        assert "Install slurm/slurm.conf -> /etc/slurm/slurm.conf" in changed["login1"]
        assert "Install slurm/slurm.conf -> /etc/slurm/slurm.conf" in changed["ctl1"]
        assert "slurmd on the current settings" in changed["gpu2"], applied.stdout[-2000:]

        # apply restored the files and slurmd, and reconfigured slurmctld on the configs it
        # put back (the slurm_controller role), so Slurm's view is the spec's again
        assert "Reconfigure on the configs put back" in changed["ctl1"], applied.stdout[-2000:]
        wait_idle()
        rc, doc, junit, out = drift(tmp_path, "after")
        restored = True
        assert rc == 0 and drifted(doc) == {}, out[-3000:]
        assert junit.find("testsuite").get("failures") == "0"
        assert "no drift" in out
    finally:
        if not restored:
            restore()
