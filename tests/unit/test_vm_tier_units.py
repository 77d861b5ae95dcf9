"""The VM tier's pure parts: machines and network from the rendered lab document, the QEMU
command line, and the storage role's reading of rendered exports. (The VMs themselves
run in tests/vm, marker vm.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from estate.pipeline import build
from estate.render.storage import exports_file
from roles.storage.tasks import exported_paths
from estate.lab import vm as vmlab

SPEC = Path(__file__).resolve().parents[1] / "vm" / "nfs.yaml"


@pytest.fixture(scope="module")
def tier():
    result = build(SPEC)
    assert result.ok
    doc = json.loads(result.artifacts["lab/vagrant-nodes.json"].content)
    return result, doc


def test_plan_puts_each_vm_on_its_segments(tier):
    _, doc = tier
    segments, vms = vmlab.plan(doc, ["nfs1", "client1"], "management")
    assert [(s.bridge, s.host_address) for s in segments] == [("estvm-br10", True),
                                                              ("estvm-br40", False)]
    nfs1 = vms[0]
    assert nfs1.management == "10.160.0.12"
    assert [(n.bridge, n.address) for n in nfs1.nics] == [("estvm-br10", "10.160.0.12/24"),
                                                          ("estvm-br40", "10.163.0.5/24")]
    names = [n.tap for v in vms for n in v.nics] + [s.bridge for s in segments]
    assert all(len(n) <= 15 and n.startswith("estvm") for n in names)  # IFNAMSIZ; down() finds them
    macs = [n.mac for v in vms for n in v.nics] + [v.nat_mac for v in vms]
    assert len(set(macs)) == len(macs)


def test_plan_refuses_unknown_nodes_and_unreachable_ones(tier):
    _, doc = tier
    with pytest.raises(vmlab.VMError, match="nosuch"):
        vmlab.plan(doc, ["nosuch"], "management")
    with pytest.raises(vmlab.VMError, match="no address on the management segment 'storage2'"):
        vmlab.plan(doc, ["nfs1"], "storage2")


def test_qemu_command_boots_the_image_kernel_under_tcg(tier, tmp_path):
    _, doc = tier
    _, vms = vmlab.plan(doc, ["client1"], "management")
    image = vmlab.Image(tmp_path, built=False)
    cmd = vmlab.qemu_command(vms[0], image)
    assert cmd[cmd.index("-accel") + 1] == "tcg"
    assert cmd[cmd.index("-kernel") + 1] == str(tmp_path / "vmlinuz")
    append = cmd[cmd.index("-append") + 1].split()
    assert "systemd.hostname=client1" in append
    nets = [a for a in append if a.startswith("estate.net=")]
    assert nets == [f"estate.net={n.mac},{n.address},{n.mtu}" for n in vms[0].nics] + \
        [f"estate.net={vms[0].nat_mac},dhcp"]
    assert "-daemonize" in cmd and cmd[cmd.index("-pidfile") + 1].endswith("client1.pid")


def test_exported_paths_are_first_fields_of_rendered_exports(tier):
    result, _ = tier
    text = exports_file(result.estate, "nfs1").decode()
    assert exported_paths(text) == ["/export/home", "/export/scratch"]
    assert exported_paths('# c\n\n"/srv/with space" 10.0.0.0/8(rw)\n') == ["/srv/with space"]


def test_one_run_of_the_tier_at_a_time(tmp_path, monkeypatch):
    """A second run would tear down the first one's VMs (same names): it stops instead."""
    monkeypatch.setattr(vmlab, "VM_DIR", tmp_path)
    monkeypatch.setattr(vmlab, "LOCK", tmp_path / "lock")
    first = vmlab.hold_lock()
    with pytest.raises(vmlab.VMError, match=r"another run of the VM tier \(pid \d+\)"):
        vmlab.hold_lock()
    vmlab.release(first)
    vmlab.release(vmlab.hold_lock())
