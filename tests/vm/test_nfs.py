"""The storage role on real kernels: two QEMU VMs (TCG) from tests/vm/nfs.yaml, an NFS
server (nfs1) and a client (client1), provisioned by `estate apply` over ssh like any
machine, then checked from both sides: the exports, the mount units, files crossing
the share both ways, a second apply changing nothing, and `estate verify`.

Needs root (bridges, taps, iptables), QEMU and debootstrap (`make deps`), and the
Debian mirror (the image, and the roles' apt-get update through each VM's NAT NIC).
See tests/vm/README.md for what is in the image and the measured times.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from estate.lab import vm as vmlab

pytestmark = pytest.mark.vm

ROOT = vmlab.ROOT
ESTATE = str(ROOT / ".venv" / "bin" / "estate")
SPEC = "tests/vm/nfs.yaml"
OUT = ROOT / "build" / "vm-nfs"
NODES = "nfs1,client1"
TIMINGS = vmlab.VM_DIR / "timings.json"


def estate(*args: str, check: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([ESTATE, *args], cwd=ROOT, text=True, capture_output=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})
    if check and proc.returncode != 0:
        pytest.fail(f"estate {' '.join(args)} exited {proc.returncode}:\n"
                    f"{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}")
    return proc


def connection() -> list[str]:
    return ["-o", str(OUT), "--ssh-key", str(vmlab.SSH_KEY), "--ssh-user", "root",
            "--no-strict-host-keys"]


def apply(tmp: Path) -> dict:
    report = tmp / f"apply-{uuid.uuid4().hex[:6]}.json"
    estate("apply", SPEC, "--limit", NODES, "--json", str(report), *connection())
    return json.loads(report.read_text())


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the VM tier needs root (bridges, taps, iptables)"
    missing = vmlab.missing_tools()
    if missing:
        return f"the VM tier needs {', '.join(missing)}: run `make deps`"
    if not Path("/dev/net/tun").exists():
        return "the VM tier needs /dev/net/tun for the VMs' tap devices"
    return None


@pytest.fixture(scope="module")
def lab():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    t0 = time.monotonic()
    lab = vmlab.lab_from_spec(ROOT / SPEC, OUT, NODES.split(","))
    lab.timings["up"] = round(time.monotonic() - t0, 1)
    yield lab
    t = time.monotonic()
    left = {k: v for k, v in lab.close().items() if v}
    lab.timings["down"] = round(time.monotonic() - t, 1)
    TIMINGS.write_text(json.dumps(lab.timings, indent=2) + "\n")
    assert not left, f"the VM tier left behind {left}"


def on(lab, node: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    # one ssh connection per VM for all commands: a handshake costs a second under TCG
    ssh = ["ssh", "-q", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
           "-o", "UserKnownHostsFile=/dev/null", "-o", "ControlMaster=auto",
           "-o", "ControlPath=/tmp/estvm-ssh-%C", "-o", "ControlPersist=30",
           "-i", str(vmlab.SSH_KEY), f"root@{lab.vm(node).management}", command]
    proc = subprocess.run(ssh, text=True, capture_output=True, timeout=120)
    if check and proc.returncode != 0:
        pytest.fail(f"{node}: {command} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


@pytest.fixture(scope="module")
def applied(lab, tmp_path_factory):
    t = time.monotonic()
    result = apply(tmp_path_factory.mktemp("apply"))
    lab.timings["apply (cold)"] = round(time.monotonic() - t, 1)
    return result


@pytest.fixture(scope="module")
def rendered(applied):
    """What the spec says, read from the rendered tree the apply used."""
    manifest = json.loads((OUT / "MANIFEST.json").read_text())
    exports = [line.split()[0] for line in (OUT / "storage/exports/nfs1.exports")
               .read_text().splitlines() if line.strip() and not line.startswith("#")]
    units = {p.rsplit("/", 1)[1]: (OUT / p).read_text() for p in manifest
             if p.startswith("storage/mounts/")}
    return {"exports": exports, "units": units}


def unit_field(text: str, key: str) -> str:
    return next(l.split("=", 1)[1] for l in text.splitlines() if l.startswith(f"{key}="))


def test_both_nodes_provisioned(lab, applied):
    hosts = applied["hosts"]
    assert {h: r["status"] for h, r in hosts.items()} == {"nfs1": "changed",
                                                          "client1": "changed"}, hosts
    # the image carries the NFS packages with nfs-server disabled: the role runs it on
    # the server only
    active = "systemctl is-enabled nfs-server; systemctl is-active nfs-server"
    assert on(lab, "nfs1", active, check=False).stdout.split() == ["enabled", "active"]
    assert on(lab, "client1", active, check=False).stdout.split() == ["disabled", "inactive"]


def test_server_exports_to_storage_segment(lab, rendered):
    out = on(lab, "nfs1", "exportfs -v").stdout
    assert rendered["exports"], "the spec renders no exports for nfs1"
    for path in rendered["exports"]:
        assert any(line.startswith(path) for line in out.splitlines()), out
        assert on(lab, "nfs1", f"test -d {shlex.quote(path)}", check=False).returncode == 0
    assert "10.163.0.0/24" in out, f"exports not limited to the storage segment:\n{out}"


def test_client_mounts_from_server_storage_address(lab, rendered):
    assert len(rendered["units"]) == 2
    for unit, text in rendered["units"].items():
        what, where = unit_field(text, "What"), unit_field(text, "Where")
        assert what.startswith("10.163.0.5:"), what  # nfs1's storage-segment address
        assert on(lab, "client1", f"systemctl is-active {unit}").stdout.strip() == "active"
        assert on(lab, "client1", f"systemctl is-enabled {unit}").stdout.strip() == "enabled"
        src, fstype = on(lab, "client1", f"findmnt -n -o SOURCE,FSTYPE {where}").stdout.split()
        assert (src, fstype) == (what, "nfs4")


def test_files_cross_the_share_both_ways(lab, rendered):
    text = rendered["units"]["home-shared.mount"]
    export, where = unit_field(text, "What").split(":", 1)[1], unit_field(text, "Where")
    token = uuid.uuid4().hex
    on(lab, "client1", f"echo {token} > {where}/from-client && sync")
    assert on(lab, "nfs1", f"cat {export}/from-client").stdout.strip() == token
    on(lab, "nfs1", f"echo {token}-back > {export}/from-server && sync")
    # NFS attribute caching: a new name is looked up afresh (no negative cache on it yet)
    assert on(lab, "client1", f"cat {where}/from-server").stdout.strip() == f"{token}-back"
    # the spec's user ids are the same on both sides of the share
    on(lab, "client1", f"install -o alice -g research -m 0640 /dev/null {where}/alice-file")
    assert on(lab, "nfs1", f"stat -c %U:%G {export}/alice-file").stdout.strip() == \
        "alice:research"


def test_second_apply_changes_nothing(lab, applied, tmp_path):
    t = time.monotonic()
    result = apply(tmp_path)
    lab.timings["apply (no change)"] = round(time.monotonic() - t, 1)
    assert {h: r["changed"] for h, r in result["hosts"].items() if r["changed"]} == {}
    assert {h: r["status"] for h, r in result["hosts"].items()} == {"nfs1": "unchanged",
                                                                    "client1": "unchanged"}


def test_changed_unit_is_restarted(lab, applied, tmp_path):
    """Drift: a unit file edited on the node is put back and the mount remounted with it."""
    on(lab, "client1", "sed -i 's/^Options=.*/Options=defaults,_netdev,vers=4.1/' "
                       "/etc/systemd/system/scratch.mount && systemctl daemon-reload && "
                       "systemctl restart scratch.mount")
    assert "vers=4.1" in on(lab, "client1", "findmnt -n -o OPTIONS /scratch").stdout
    result = apply(tmp_path)
    assert result["hosts"]["client1"]["changed"], result
    assert "vers=4.2" in on(lab, "client1", "findmnt -n -o OPTIONS /scratch").stdout


def test_verify_passes(lab, applied, tmp_path):
    t = time.monotonic()
    proc = estate("verify", SPEC, "--limit", NODES, "--report-dir", str(tmp_path),
                  *connection(), check=False)
    lab.timings["verify"] = round(time.monotonic() - t, 1)
    report = json.loads((tmp_path / "verify.json").read_text())
    assert proc.returncode == 0, proc.stdout[-4000:]
    storage = [r for r in report["results"] if r["role"] == "storage"]
    assert all(r["outcome"] == "passed" for r in storage), storage
    assert {(r["node"], r["check"]) for r in storage} == {
        ("nfs1", "nfs_server_running"), ("nfs1", "exported"),
        ("nfs1", "installed_as_rendered:storage/exports/nfs1.exports"),
        ("client1", "mounted"),
        ("client1", "installed_as_rendered:storage/mounts/00/home-shared.mount"),
        ("client1", "installed_as_rendered:storage/mounts/01/scratch.mount")}
    assert not [r for r in report["results"] if r["outcome"] in ("failed", "unsupported")]
