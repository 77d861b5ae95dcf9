"""A lab killed half-way (pytest interrupted, machine reused) must not poison the next
run: down() (which every up() calls first) removes whatever is left."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.live_slurm.conftest import leftovers, require_live_slurm
from estate.lab.netns import BRIDGE, IPT_RULES, NS_PREFIX, down

pytestmark = pytest.mark.live_slurm


def test_down_removes_a_crashed_labs_namespaces_processes_bridge_and_rules():
    require_live_slurm(accounting=False)
    ns = NS_PREFIX + "stale"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    sleeper = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "sleep", "600"],
                               start_new_session=True)
    subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    iptables = shutil.which("iptables")
    if iptables:
        subprocess.run([iptables, "-I", "FORWARD", *IPT_RULES[0]], check=True)
    try:
        assert leftovers()
        down()
        assert leftovers() == []
        assert sleeper.wait(timeout=5) is not None
        if iptables:
            check = subprocess.run([iptables, "-C", "FORWARD", *IPT_RULES[0]],
                                   capture_output=True)
            assert check.returncode != 0, "the FORWARD rule for the bridge is still there"
    finally:
        sleeper.kill()
        down()
