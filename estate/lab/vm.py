"""The VM tier's machines: QEMU VMs with their own kernels, for what containers can't
do here (kernel NFS).

- The image (vagrant/vm-image/build.sh) is built once per recipe: its directory under
  .lab/vm/images/ is named by a hash of the recipe files and the baked-in ssh key.
- The network comes from the rendered lab document (lab/vagrant-nodes.json), like the
  docker lab's: one host bridge per segment (estvm-br<vlan>), one tap per VM and
  segment, the host on the management segment's gateway address. Each VM has a
  further user-mode NAT NIC: its way to the Debian mirror, as a VM's NAT interface.
- VMs run under TCG (this host's /dev/kvm does not run Debian guests), daemonized
  with a pidfile; disks are throwaway qcow2 overlays on the image.

Everything made here is named estvm*: `down()` removes exactly that (VMs by their
pidfiles, bridges and taps by name, iptables rules by their comment), and `up()`
calls it first, so a run killed half-way is cleaned by the next. A run holds
.lab/vm/lock from up to down, so a second run on the same host stops with a message
instead of tearing down the first one's VMs.

    estate lab vm up tests/vm/nfs.yaml nfs1,client1
    estate lab vm down
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from estate import paths
from estate.catalogue import packages
from estate.lab import driver
from estate.lab.driver import LabError

RECIPE = paths.VAGRANT / "vm-image"
VM_DIR = paths.work() / ".lab" / "vm"
RUN = VM_DIR / "run"
LOCK = VM_DIR / "lock"
# The image (about 2 min to build) and the key baked into it are the machine's, not the
# checkout's: a fresh clone on a machine that built them once boots at once.
CACHE = Path(os.environ.get("ESTATE_CACHE_DIR", "/var/cache/estate")) / "vm"
IMAGES = CACHE / "images"
SSH_KEY = CACHE / "ssh" / "id_ed25519"
PREFIX = "estvm"
QEMU = "qemu-system-x86_64"


class VMError(LabError):
    pass


def sh(*cmd: str, check: bool = True, timeout: int = 1200) -> subprocess.CompletedProcess:
    return driver.run(list(cmd), check=check, timeout=timeout, error=VMError, tail=30)


def missing_tools() -> list[str]:
    """Host programs the tier needs that are not installed (the reason to skip)."""
    tools = [QEMU, "qemu-img", "debootstrap", "mkfs.ext4", "ip", "iptables", "ssh-keygen"]
    return [t for t in tools if shutil.which(t) is None]


# --- image ------------------------------------------------------------------------------

def ensure_ssh_key() -> Path:
    return driver.ensure_ssh_key(SSH_KEY, "estate-vm", VMError)


# The roles the VM tier applies; their packages are baked into the image (TCG dpkg: minutes).
IMAGE_PACKAGES = ",".join(packages("common", "firewall", "storage", extras=("server", "client")))


def recipe_hash(pubkey: Path) -> str:
    h = hashlib.sha256(IMAGE_PACKAGES.encode())
    for f in sorted(RECIPE.iterdir()):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(pubkey.read_bytes())
    return h.hexdigest()[:12]


@dataclass
class Image:
    dir: Path
    built: bool  # False: reused from the cache

    @property
    def disk(self) -> Path:
        return self.dir / "root.img"

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"


def ensure_image(log=print) -> Image:
    """The image for the current recipe: reused when cached, else built (and older ones
    removed: each is a few hundred MB on a CI machine's disk)."""
    pub = Path(f"{ensure_ssh_key()}.pub")
    target = IMAGES / recipe_hash(pub)
    if (target / "root.img").is_file():
        return Image(target, built=False)
    IMAGES.mkdir(parents=True, exist_ok=True)
    log(f"vm: building image {target.name} (debootstrap, a few minutes)")
    sh(str(RECIPE / "build.sh"), str(target), str(pub), IMAGE_PACKAGES)
    for old in IMAGES.iterdir():
        if old != target:
            shutil.rmtree(old, ignore_errors=True)
    return Image(target, built=True)


# --- machines and their network, from the rendered lab document ---------------------------

@dataclass
class Nic:
    segment: str
    bridge: str
    tap: str
    mac: str
    address: str       # ADDRESS/PREFIX
    mtu: int


@dataclass
class VM:
    name: str
    index: int
    memory_mb: int
    nics: list[Nic]
    management: str    # the address the provisioner connects to
    nat_mac: str

    @property
    def pidfile(self) -> Path:
        return RUN / f"{self.name}.pid"

    @property
    def serial_log(self) -> Path:
        return RUN / f"{self.name}.serial.log"

    @property
    def overlay(self) -> Path:
        return RUN / f"{self.name}.qcow2"


@dataclass
class Segment:
    name: str
    bridge: str
    gateway: str
    prefixlen: int
    mtu: int
    host_address: bool  # the host joins the management segment only


def bridge_name(vlan: int) -> str:
    return f"{PREFIX}-br{vlan}"  # at most 12 characters (the kernel allows 15)


def plan(doc: dict, names: list[str], management: str, memory_mb: int = 1024):
    """(segments, VMs) for the named nodes of a lab document (lab/vagrant-nodes.json)."""
    by_name = {n["name"]: n for n in doc["nodes"]}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise VMError(f"no such node(s) in the rendered lab document: {', '.join(unknown)}")
    segs = {s["name"]: s for s in doc["segments"]}
    vms, used = [], {}
    for i, name in enumerate(names, start=1):
        node, mgmt = by_name[name], None
        nics: list[Nic] = []
        for net in node["networks"]:
            seg = segs[net["segment"]]
            used[seg["name"]] = Segment(seg["name"], bridge_name(seg["vlan"]), seg["gateway"],
                                        seg["prefixlen"], seg["mtu"],
                                        seg["name"] == management)
            nics.append(Nic(seg["name"], bridge_name(seg["vlan"]), f"{PREFIX}{i}-{seg['vlan']}",
                            f"52:54:00:{len(nics) + 1:02x}:{i:02x}:01",
                            f"{net['ip']}/{net['prefixlen']}", seg["mtu"]))
            if seg["name"] == management:
                mgmt = net["ip"]
        if mgmt is None:
            raise VMError(f"{name} has no address on the management segment '{management}': "
                          "the provisioner could not reach it")
        vms.append(VM(name, i, min(memory_mb, node["memory_mb"]), nics, mgmt,
                      f"52:54:00:ff:{i:02x}:01"))
    return list(used.values()), vms


def create_network(segments: list[Segment], vms: list[VM]) -> None:
    for seg in segments:
        sh("ip", "link", "add", seg.bridge, "type", "bridge")
        sh("ip", "link", "set", seg.bridge, "mtu", str(seg.mtu), "up")
        if seg.host_address:
            sh("ip", "addr", "add", f"{seg.gateway}/{seg.prefixlen}", "dev", seg.bridge)
        # dockerd's FORWARD policy is DROP and bridged frames pass through iptables here.
        for direction in ("-i", "-o"):
            sh("iptables", "-I", "FORWARD", direction, seg.bridge, "-m", "comment",
               "--comment", PREFIX, "-j", "ACCEPT")
    for vm in vms:
        for nic in vm.nics:
            sh("ip", "tuntap", "add", "dev", nic.tap, "mode", "tap")
            sh("ip", "link", "set", nic.tap, "mtu", str(nic.mtu), "master", nic.bridge, "up")


def qemu_command(vm: VM, image: Image) -> list[str]:
    nets = [f"estate.net={n.mac},{n.address},{n.mtu}" for n in vm.nics]
    nets.append(f"estate.net={vm.nat_mac},dhcp")
    cmdline = " ".join(["console=ttyS0", "root=/dev/vda", "rw", "panic=-1",
                        f"systemd.hostname={vm.name}", *nets])
    cmd = [QEMU, "-name", f"{PREFIX}-{vm.name},process={PREFIX}-{vm.name}",
           "-accel", "tcg", "-m", str(vm.memory_mb), "-smp", "1",
           "-kernel", str(image.kernel), "-initrd", str(image.initrd), "-append", cmdline,
           "-drive", f"file={vm.overlay},if=virtio,format=qcow2",
           "-object", "rng-random,id=rng0,filename=/dev/urandom",
           "-device", "virtio-rng-pci,rng=rng0",
           "-display", "none", "-monitor", "none", "-serial", f"file:{vm.serial_log}",
           "-no-reboot", "-daemonize", "-pidfile", str(vm.pidfile)]
    for k, nic in enumerate(vm.nics):
        cmd += ["-netdev", f"tap,id=n{k},ifname={nic.tap},script=no,downscript=no",
                "-device", f"virtio-net-pci,netdev=n{k},mac={nic.mac}"]
    cmd += ["-netdev", "user,id=nat", "-device", f"virtio-net-pci,netdev=nat,mac={vm.nat_mac}"]
    return cmd


def boot(vm: VM, image: Image) -> None:
    sh("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image.disk),
       str(vm.overlay))
    sh(*qemu_command(vm, image))


def _alive(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return f"{PREFIX}-".encode() in cmdline and QEMU.encode() in cmdline


def _pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def wait_for_ssh(vms: list[VM], timeout: float = 300) -> None:
    """Each VM's sshd answering on its management address (where pyinfra connects); QEMU
    exiting ends the wait at once."""
    by_name = {vm.name: vm for vm in vms}

    def gone(name: str) -> bool:
        pid = _pid(by_name[name].pidfile)
        return pid is None or not _alive(pid)
    driver.wait_for_ssh([(vm.name, vm.management) for vm in vms], timeout,
                        why=lambda name: "\n" + serial_tail(by_name[name]), gone=gone,
                        error=VMError, poll=1)


def serial_tail(vm: VM, lines: int = 25) -> str:
    try:
        text = vm.serial_log.read_text(errors="replace")
    except OSError:
        return f"(no serial log at {vm.serial_log})"
    return f"last lines of {vm.serial_log}:\n" + "\n".join(text.splitlines()[-lines:])


# --- up and down -------------------------------------------------------------------------

def hold_lock() -> int:
    """The tier's lock (an open fd; released when closed or the process ends)."""
    return driver.hold(LOCK, "run of the VM tier", VMError)


def release(fd: int) -> None:
    os.close(fd)  # closing the last fd drops the flock


@dataclass
class Lab:
    image: Image
    segments: list[Segment]
    vms: list[VM]
    timings: dict[str, float] = field(default_factory=dict)
    lock: int | None = None

    def vm(self, name: str) -> VM:
        return next(v for v in self.vms if v.name == name)

    def close(self, log=print) -> dict[str, list[str]]:
        """down(), then let other runs have the host; returns what was left behind."""
        try:
            return down(log)
        finally:
            if self.lock is not None:
                release(self.lock)
                self.lock = None


def up(doc: dict, names: list[str], management: str, log=print) -> Lab:
    """Lock, clean leftovers, then image, network, VMs, ssh. Cleans up if a step fails."""
    timings = {}
    t0 = time.monotonic()
    segments, vms = plan(doc, names, management)
    lock = hold_lock()
    try:
        down(log)
        image = ensure_image(log)
        timings["image" if image.built else "image (cached)"] = round(time.monotonic() - t0, 1)
        t = time.monotonic()
        RUN.mkdir(parents=True, exist_ok=True)
        create_network(segments, vms)
        for vm in vms:
            boot(vm, image)
        log(f"vm: booting {', '.join(v.name for v in vms)} under TCG, waiting for ssh")
        wait_for_ssh(vms)
        timings["boot to ssh"] = round(time.monotonic() - t, 1)
    except BaseException:
        Lab(None, segments, vms, lock=lock).close(log)
        raise
    return Lab(image, segments, vms, timings, lock)


def leftovers() -> dict[str, list[str]]:
    """What of the tier is on this host: live VMs, links, iptables rules."""
    pids = [f.stem for f in RUN.glob("*.pid") if (p := _pid(f)) and _alive(p)] \
        if RUN.exists() else []
    links = [l.split(":")[1].strip().split("@")[0]
             for l in sh("ip", "-o", "link", "show").stdout.splitlines()
             if l.split(":")[1].strip().startswith(PREFIX)]
    rules = [l for l in sh("iptables-save", "-t", "filter").stdout.splitlines()
             if f"--comment {PREFIX}" in l]
    return {"vms": pids, "links": links, "iptables": rules}


def _stop(pid: int, timeout: float = 10) -> None:
    os.kill(pid, signal.SIGTERM)  # QEMU exits on SIGTERM; the disk is a throwaway overlay
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def down(log=print) -> dict[str, list[str]]:
    """Remove the tier's VMs (by pidfile), taps, bridges and iptables rules; return leftovers."""
    import shlex
    for pidfile in RUN.glob("*.pid") if RUN.exists() else []:
        pid = _pid(pidfile)
        if pid and _alive(pid):
            log(f"vm: stopping {pidfile.stem} (pid {pid})")
            _stop(pid)
        pidfile.unlink(missing_ok=True)
    for overlay in RUN.glob("*.qcow2") if RUN.exists() else []:
        overlay.unlink()
    left = leftovers()
    for link in sorted(left["links"], key=lambda n: "-br" in n):  # taps before bridges
        sh("ip", "link", "del", link, check=False)
    for rule in left["iptables"]:
        args = shlex.split(rule)
        sh("iptables", "-D", *args[1:], check=False)  # "-A CHAIN ..." -> "-D CHAIN ..."
    return leftovers()


# --- command line -------------------------------------------------------------------------

def lab_from_spec(spec: Path, render_dir: Path, names: list[str], log=print) -> Lab:
    from estate.provision.inventory import management_segment
    from estate.lab.vagrant import lab_document
    from estate.pipeline import render_to
    result = render_to(spec, render_dir)
    return up(lab_document(render_dir), names, management_segment(result.estate), log)
