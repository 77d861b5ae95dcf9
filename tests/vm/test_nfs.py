"""The storage role on real kernels: three QEMU VMs (TCG) from tests/vm/nfs.yaml, an NFS
server (nfs1), a Slurm-plane client (client1) and a Kubernetes-plane client (k8s1),
provisioned by `estate apply` over ssh like any machine, then checked from every side:
the exports (each to its mount clients' addresses only, root squashed), the mount units,
files crossing the share with the spec's owners, a client outside an export's list
refused, a read-only grant refusing writes, a second apply changing nothing, and
`estate verify`.

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
import yaml

from estate.lab import vm as vmlab

pytestmark = pytest.mark.vm

ROOT = Path(__file__).resolve().parents[2]
ESTATE = str(ROOT / ".venv" / "bin" / "estate")
SPEC = "tests/vm/nfs.yaml"
OUT = ROOT / "build" / "vm-nfs"
NODES = "nfs1,client1"
# The Kubernetes-plane client: no kubelet can run here (no Kubernetes server binaries in any
# reachable registry), so it gets the common and storage roles only, and the tests mount a
# tenant's PersistentVolume the way the kubelet's NFS volume plugin does.
K8S = "k8s1"
K8S_DEPLOYS = "common,storage"
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


def apply(tmp: Path, limit: str = NODES, *extra: str) -> dict:
    report = tmp / f"apply-{uuid.uuid4().hex[:6]}.json"
    estate("apply", SPEC, "--limit", limit, "--json", str(report), *extra, *connection())
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
    lab = vmlab.lab_from_spec(ROOT / SPEC, OUT, [*NODES.split(","), K8S])
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
    tmp = tmp_path_factory.mktemp("apply")
    result = apply(tmp)
    lab.timings["apply (cold)"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    # after the server's exports: the storage phase mounts, and the server must be up
    result["k8s"] = apply(tmp, K8S, "--only", K8S_DEPLOYS)
    lab.timings[f"apply {K8S} ({K8S_DEPLOYS})"] = round(time.monotonic() - t, 1)
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


def storage_address(lab, node: str) -> str:
    return next(n.address.split("/")[0] for n in lab.vm(node).nics if n.segment == "storage")


def live_exports(lab) -> dict[tuple[str, str], set[str]]:
    """(path, client) -> options, as nfs1's kernel exports them (exportfs -s)."""
    live = {}
    for line in on(lab, "nfs1", "exportfs -s").stdout.splitlines():
        path, *specs = line.split()
        for spec in specs:
            client, opts = spec[:-1].split("(", 1)
            live[(path, client)] = set(opts.split(","))
    return live


@pytest.fixture(scope="module")
def home(lab, applied, rendered):
    """The home export on both sides, with a directory of alice's made on the server (where
    root is root: with root_squash, root on a client cannot make it)."""
    text = rendered["units"]["home-shared.mount"]
    export, where = unit_field(text, "What").split(":", 1)[1], unit_field(text, "Where")
    on(lab, "nfs1", f"install -d -o alice -g research -m 0755 {export}/alice && "
                    f"install -d -m 1777 {export}/tmp")
    return {"export": export, "where": where}


def as_alice(command: str) -> str:
    return f"runuser -u alice -- sh -c {shlex.quote(command)}"


def mount_like_kubelet(lab, pv: dict, target: str, read_only: bool) -> None:
    """mount(8) as the kubelet's NFS volume plugin does: the PV's mountOptions, plus ro
    when the volume is read-only."""
    opts = [*pv["spec"].get("mountOptions", []), *(["ro"] if read_only else [])]
    src = f"{pv['spec']['nfs']['server']}:{pv['spec']['nfs']['path']}"
    on(lab, K8S, f"mkdir -p {target} && mount -t nfs -o {shlex.quote(','.join(opts))} "
                 f"{shlex.quote(src)} {target}")


@pytest.fixture(scope="module")
def granted_volume(applied) -> dict:
    """The tenant's PersistentVolume for the home export, as rendered."""
    docs = yaml.safe_load_all((OUT / "kubernetes/manifests/25-storage.yaml").read_text())
    [pv] = [d for d in docs if d and d["kind"] == "PersistentVolume"]
    return pv


def test_both_nodes_provisioned(lab, applied):
    hosts = applied["hosts"]
    assert {h: r["status"] for h, r in hosts.items()} == {"nfs1": "changed",
                                                          "client1": "changed"}, hosts
    assert {h: r["status"] for h, r in applied["k8s"]["hosts"].items()} == {K8S: "changed"}
    # the image carries the NFS packages with nfs-server disabled: the role runs it on
    # the server only
    active = "systemctl is-enabled nfs-server; systemctl is-active nfs-server"
    assert on(lab, "nfs1", active, check=False).stdout.split() == ["enabled", "active"]
    for client in ("client1", K8S):
        assert on(lab, client, active, check=False).stdout.split() == ["disabled", "inactive"]


def test_server_exports_to_its_mount_clients_only(lab, rendered):
    live = live_exports(lab)
    assert rendered["exports"], "the spec renders no exports for nfs1"
    for path in rendered["exports"]:
        assert on(lab, "nfs1", f"test -d {shlex.quote(path)}", check=False).returncode == 0
    slurm, k8s = storage_address(lab, "client1"), storage_address(lab, K8S)
    # never the whole segment: each export to the addresses of the clients that mount it
    assert set(live) == {("/export/home", slurm), ("/export/home", k8s),
                         ("/export/scratch", slurm)}, live
    assert {"rw", "root_squash"} <= live[("/export/home", slurm)]
    # the Kubernetes plane is granted home read-only: the server enforces it
    assert {"ro", "root_squash"} <= live[("/export/home", k8s)]
    assert "no_root_squash" in live[("/export/scratch", slurm)]   # with a reason in the spec


def test_client_mounts_from_server_storage_address(lab, rendered):
    assert len(rendered["units"]) == 2
    for unit, text in rendered["units"].items():
        what, where = unit_field(text, "What"), unit_field(text, "Where")
        assert what.startswith("10.163.0.5:"), what  # nfs1's storage-segment address
        assert on(lab, "client1", f"systemctl is-active {unit}").stdout.strip() == "active"
        assert on(lab, "client1", f"systemctl is-enabled {unit}").stdout.strip() == "enabled"
        src, fstype = on(lab, "client1", f"findmnt -n -o SOURCE,FSTYPE {where}").stdout.split()
        assert (src, fstype) == (what, "nfs4")
    # k8s1 mounts home only (the spec's mounts), from the same address
    text = rendered["units"]["home-shared.mount"]
    src, fstype = on(lab, K8S, "findmnt -n -o SOURCE,FSTYPE /home/shared").stdout.split()
    assert (src, fstype) == (unit_field(text, "What"), "nfs4")
    assert on(lab, K8S, "findmnt -n /scratch", check=False).stdout.strip() == ""


def test_files_cross_the_share_both_ways(lab, home):
    export, where = home["export"], home["where"]
    token = uuid.uuid4().hex
    on(lab, "client1", as_alice(f"echo {token} > {where}/alice/from-client && sync"))
    assert on(lab, "nfs1", f"cat {export}/alice/from-client").stdout.strip() == token
    on(lab, "nfs1", f"echo {token}-back > {export}/from-server && sync")
    # NFS attribute caching: a new name is looked up afresh (no negative cache on it yet)
    assert on(lab, "client1", f"cat {where}/from-server").stdout.strip() == f"{token}-back"


def test_slurm_users_file_has_the_same_owner_on_the_kubernetes_plane(lab, home,
                                                                      granted_volume):
    """Written by alice (uid 20001 in the spec) on the Slurm plane, read on the Kubernetes
    plane through the tenant's volume, mounted as the kubelet would: same owner."""
    token = uuid.uuid4().hex
    name = f"{home['where']}/alice/for-k8s-{token[:8]}"
    on(lab, "client1", as_alice(f"echo {token} > {name} && sync"))
    mount_like_kubelet(lab, granted_volume, "/mnt/pv-home", read_only=True)
    try:
        seen = f"/mnt/pv-home/alice/for-k8s-{token[:8]}"
        assert on(lab, K8S, f"cat {seen}").stdout.strip() == token
        owner = "stat -c %u:%g:%U:%G "
        want = "20001:20001:alice:research"
        assert on(lab, "client1", owner + name).stdout.strip() == want
        assert on(lab, "nfs1", owner + f"{home['export']}/alice/for-k8s-{token[:8]}"
                  ).stdout.strip() == want
        assert on(lab, K8S, owner + seen).stdout.strip() == want
    finally:
        on(lab, K8S, "umount /mnt/pv-home", check=False)


def test_root_on_a_client_is_not_root_on_the_export(lab, home):
    export, where = home["export"], home["where"]
    # root-owned directory: root on the client is nobody there, so it cannot create
    denied = on(lab, "client1", f"touch {where}/root-was-here", check=False)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied
    assert on(lab, "nfs1", f"test -e {export}/root-was-here", check=False).returncode != 0
    # where anyone may create, root's file belongs to nobody on the export, not to root
    on(lab, "client1", f"touch {where}/tmp/root-file")
    assert on(lab, "nfs1", f"stat -c %u {export}/tmp/root-file").stdout.strip() == "65534"
    assert on(lab, "client1", f"chown root {where}/tmp/root-file", check=False).returncode != 0
    # the control: scratch says no_root_squash (with a reason), and there root stays root
    scratch = on(lab, "client1", "touch /scratch/root-file && stat -c %u /scratch/root-file")
    assert scratch.stdout.strip() == "0"


def test_a_client_outside_an_exports_list_is_refused(lab):
    """scratch is mounted by client1 only: k8s1, on the same segment and a client of home,
    is not in its list. The same mount succeeds on client1."""
    mount = "mkdir -p /mnt/probe && mount -t nfs -o vers=4.2 10.163.0.5:/export/scratch /mnt/probe"
    on(lab, "client1", f"{mount} && umount /mnt/probe")
    refused = on(lab, K8S, mount, check=False)
    assert refused.returncode != 0, f"{K8S} mounted scratch: {refused.stdout}"
    assert on(lab, K8S, "findmnt -n /mnt/probe", check=False).stdout.strip() == ""
    print(f"{K8S} mounting scratch: {refused.stderr.strip()}")   # shown with pytest -rP
    # NFSv4: the server's pseudo filesystem shows a client only the exports it may mount,
    # so to k8s1 the path does not exist (the same path mounts on client1 above)
    assert "reason given by server: No such file or directory" in refused.stderr, \
        refused.stderr


def test_a_read_only_grant_refuses_writes(lab, home, granted_volume):
    assert granted_volume["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert granted_volume["spec"]["nfs"]["readOnly"] is True
    write = as_alice("echo x > {}/alice/k8s-wrote")
    # the volume as the kubelet mounts it (ro)
    mount_like_kubelet(lab, granted_volume, "/mnt/pv-home", read_only=True)
    try:
        refused = on(lab, K8S, write.format("/mnt/pv-home"), check=False)
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused
    finally:
        on(lab, K8S, "umount /mnt/pv-home", check=False)
    # and the server: mounted read-write on the node (the host's own mount unit), alice's
    # write into her own directory is still refused, because the export is ro to k8s1
    refused = on(lab, K8S, write.format(home["where"]), check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr, refused
    assert "rw" in on(lab, K8S, f"findmnt -n -o OPTIONS {home['where']}").stdout.split(",")
    assert on(lab, "nfs1", f"test -e {home['export']}/alice/k8s-wrote",
              check=False).returncode != 0
    # the control: the same write from the Slurm plane is allowed
    on(lab, "client1", write.format(home["where"]))


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
