"""`estate doctor`: a preflight before the first apply (after kubeadm's preflight checks).

Given a spec and a target (this host, or the spec's nodes through the inventory), it
reports one line per check, each with the fix: the packages, commands and Slurm plugins
the rendered files need (and a Slurm new enough for their keywords), the munge and JWT
keys, ports already taken, cgroup v2, nftables, the kernel's NFS, the container runtime
and, on GPU nodes, the NVIDIA driver (loaded, at estate.model.nvidia's minimum; GPUs the
spec marks emulated, as the lab's, are reported as such). It exits 1 on anything that
would make the lab or an apply fail, so `make lab` names a missing piece up front instead
of a daemon timing out two minutes later.

What a target needs is derived from the spec (render.slurm.slurm_plugins, the firewall's
flows) and the role catalogue (estate.catalogue), never listed here. Probes run through a
runner: this host (subprocess with argument lists, files under --root) or a node over ssh
(testinfra), so the same probe code checks both.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

import typer

from estate.catalogue import (CONFLICTS, HOST_ROLES, HOST_SUITE, HOST_TOOLS, ROLES, SLURM_SUITES,
                              UNPACKAGED_PLUGINS, host_packages, packages, plugin_file,
                              plugin_package)
from estate.model import nvidia
from estate.model.services import CLUSTER_CA_SEED, JWT_KEY, MUNGE_KEY, TLS_SEED, uses_jwt
from estate.model.slurm import BLOCK_TOPOLOGY
from estate.output import Output, annotation, make_console, output_option

if TYPE_CHECKING:   # read for its type only: doctor builds the estate through the pipeline
    from estate.spec.resolved import Estate

ERROR, WARNING = "error", "warning"

# --- data: what the doctor knows beyond the catalogue --------------------------------

# Commands looked for on PATH, by the Debian package that ships them: each catalogue
# service's daemon (systemd units are not named like their binaries: munge runs munged)
# and the clients the roles and labs call. Only packages the target needs are looked at;
# tests/unit/test_doctor.py holds every catalogue service to a command here.
COMMANDS: dict[str, tuple[str, ...]] = {
    "munge": ("munged",), "mariadb-server": ("mariadbd",), "slurmdbd": ("slurmdbd",),
    "slurmctld": ("slurmctld",), "slurmd": ("slurmd",), "slurmrestd": ("slurmrestd",),
    "stunnel4": ("stunnel4",), "python3": ("python3",),
    "slurm-client": ("scontrol", "srun", "sinfo", "sacctmgr"), "chrony": ("chronyd",),
    "nftables": ("nft",), "containerd": ("containerd",), "nfs-kernel-server": ("exportfs",),
    "docker.io": ("dockerd", "docker"), "vagrant": ("vagrant",), "debootstrap": ("debootstrap",),
    "prometheus": ("prometheus", "promtool"),
    "prometheus-alertmanager": ("prometheus-alertmanager", "amtool"),
    "prometheus-node-exporter": ("prometheus-node-exporter",), "podman": ("podman",),
}
# The service a catalogue role runs -> the command of COMMANDS that starts it, where the
# names differ (the unit test holds each role's services to its packages' commands).
SERVICE_COMMANDS = {"munge": "munged", "mariadb": "mariadbd", "chrony": "chronyd",
                    "nftables": "nft", "nfs-server": "exportfs",
                    "stunnel@slurmrestd": "stunnel4", "estate-slurm-exporter": "python3",
                    "estate-dcgm-exporter": "podman"}

# The oldest Slurm that accepts what the renderer writes (Slurm's RELEASE_NOTES):
# (rendered file, text in it, or None for "the file is rendered at all", oldest
# (major, minor), severity, what needs it). Configless and AuthAltTypes came in 20.02;
# topology/block (rendered where slurm.version >= 23.11 and the spec has blocks) in 23.11.
SLURM_MINIMUM = (
    ("slurm/slurm.conf", "enable_configless", (20, 2), ERROR,
     "configless slurmd (SlurmctldParameters=enable_configless)"),
    ("slurm/slurm.conf", "AuthAltTypes=", (20, 2), ERROR, "AuthAltTypes=auth/jwt"),
    ("slurm/slurm.conf", "TopologyPlugin=topology/block", BLOCK_TOPOLOGY, ERROR,
     "topology/block"),
)
SLURM_PACKAGES = ("slurmctld", "slurmd", "slurmdbd", "slurmrestd", "slurm-client")

# Groups of catalogue.HOST_TOOLS that `make lab` uses; the others serve `make test` only
# (the VM tier), so their absence is a warning.
LAB_TOOL_GROUPS = ("containers", "network")
MUNGE_KEY_MIN = 32  # munged: "Keyfile must be at least 32 bytes" (0.5.15, measured)
# Without NFS the storage role reports the node unsupported; the apply does not fail.
NFS_FIX = {True: "the storage role will report it unsupported here; the VM tier "
                 "(make test-vm) covers NFS on real kernels",
           False: "a kernel with NFS (CONFIG_NFSD, CONFIG_NFS_FS) or its modules; until "
                  "then the storage role reports the node unsupported"}
APT = "apt-get install"


# --- checks ---------------------------------------------------------------------------

@dataclass
class Check:
    id: str
    severity: str          # what a failure means: error (exit 1) or warning
    ok: bool
    message: str
    fix: str = ""
    target: str = "local"

    @property
    def status(self) -> str:
        return "ok" if self.ok else ("FAIL" if self.severity == ERROR else "warn")

    def as_dict(self) -> dict:
        return {"id": self.id, "severity": self.severity, "status": self.status.lower(),
                "target": self.target, "message": self.message, "fix": self.fix}


def failed(checks: Iterable[Check]) -> bool:
    return any(not c.ok and c.severity == ERROR for c in checks)


# --- runners: where a probe's commands and files are ----------------------------------

@dataclass
class Proc:
    rc: int
    out: str = ""
    err: str = ""


@dataclass
class FileInfo:
    size: int
    mode: int   # permission bits
    uid: int


class Unreachable(Exception):
    """The node did not answer: one error line for it, the other nodes still checked."""


class Runner(Protocol):
    def run(self, argv: list[str]) -> Proc: ...
    def read(self, path: str) -> str | None: ...
    def stat(self, path: str) -> FileInfo | None: ...
    def which(self, command: str) -> str | None: ...


class LocalRunner:
    """This host. Files are read under root (tests point it at a fake tree); commands
    always run on the real host, from argument lists, never through a shell."""

    def __init__(self, root: str | Path = "/"):
        self.root = Path(root)

    def path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def run(self, argv: list[str]) -> Proc:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            return Proc(127, "", f"{argv[0]}: command not found")
        except subprocess.TimeoutExpired:
            return Proc(124, "", f"{argv[0]}: timed out after 30 s")
        return Proc(p.returncode, p.stdout, p.stderr)

    def read(self, path: str) -> str | None:
        try:
            return self.path(path).read_text(errors="replace")
        except OSError:
            return None

    def stat(self, path: str) -> FileInfo | None:
        try:
            st = self.path(path).stat()
        except OSError:
            return None
        return FileInfo(st.st_size, st.st_mode & 0o7777, st.st_uid)

    def which(self, command: str) -> str | None:
        return shutil.which(command)


class SshRunner:
    """A node over ssh (testinfra's backend: one master connection per node). Each argv
    element is shell-quoted by testinfra, so no value is ever read as shell syntax."""

    def __init__(self, name: str, ssh_config: Path):
        import testinfra
        self.name = name
        self.host = testinfra.get_host(f"ssh://{name}", ssh_config=str(ssh_config))
        if self.run(["true"]).rc != 0:
            raise Unreachable("ssh did not run `true` there")

    def run(self, argv: list[str]) -> Proc:
        try:
            r = self.host.run(" ".join(["%s"] * len(argv)), *argv)
        except Exception as exc:  # testinfra raises RuntimeError(result) when ssh exits 255
            detail = getattr(exc.args[0], "stderr", "") if exc.args else ""
            raise Unreachable(_first_line(detail or str(exc)) or repr(exc)) from exc
        if r.rc == 255:  # ssh's own failure; no command the doctor runs exits 255
            raise Unreachable(_first_line(r.stderr) or "ssh exited 255")
        return Proc(r.rc, r.stdout, r.stderr)

    def read(self, path: str) -> str | None:
        p = self.run(["cat", path])
        return p.out if p.rc == 0 else None

    def stat(self, path: str) -> FileInfo | None:
        p = self.run(["stat", "-L", "-c", "%s %a %u", path])
        if p.rc != 0:
            return None
        size, mode, uid = p.out.split()
        return FileInfo(int(size), int(mode, 8), int(uid))

    def which(self, command: str) -> str | None:
        p = self.run(["sh", "-c", 'command -v "$1"', "sh", command])
        return (p.out.strip() or None) if p.rc == 0 else None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


# --- what a target needs (spec + catalogue) --------------------------------------------

@dataclass
class Need:
    name: str                            # "local", or the node's name
    packages: dict[str, str]             # package -> severity when it is missing
    loads: tuple[str, ...]               # rendered Slurm files whose plugins it loads
    ports: list[tuple[str, int]]         # (service, port) it will listen on
    nfs: tuple[str, ...] = ()            # kernel filesystems its storage needs (nfs, nfsd)
    kubernetes: bool = False
    lab: bool = False                    # this host: runs the labs, installs nothing itself
    address: str | None = None
    gpus: GpuNeed | None = None          # the node's GPUs, as its class declares them


@dataclass(frozen=True)
class GpuNeed:
    count: int
    emulated: bool
    where: str                           # the spec path that declares them


def _loads(roles: Iterable[str], rendered: dict) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for r in roles for f in ROLES[r].loads if f in rendered))


def _flows(estate, groups: Iterable[int]) -> list[tuple[str, int]]:
    # The flow matrix is the one list of which service listens where.
    from estate.model.flows import matrix
    from estate.model.services import DAEMON_FLOWS
    hosts = {h for gi in groups for h in estate.group_hosts[gi]}
    return list(dict.fromkeys((f.name, port) for f in matrix(estate).into(hosts)
                              if f.name in DAEMON_FLOWS
                              for port in range(f.ports[0], f.ports[1] + 1)))


def host_need(estate) -> Need:
    """This host runs the Slurm roles itself (namespace lab) and the container lab."""
    from estate.render.slurm import slurm_plugins
    required = set(packages(*HOST_ROLES)) | {p for g in LAB_TOOL_GROUPS for p in HOST_TOOLS[g]}
    services = {s for r in HOST_ROLES for s in ROLES[r].services}
    ports = [f for f in _flows(estate, range(len(estate.spec.nodes))) if f[0] in services]
    storage = estate.spec.storage.exports or estate.spec.storage.mounts
    return Need("local", {p: ERROR if p in required else WARNING for p in host_packages()},
                _loads(HOST_ROLES, slurm_plugins(estate)), ports,
                nfs=("nfs", "nfsd") if storage else (), lab=True)


def node_need(estate, target) -> Need:
    """A node of the inventory: what its deploys install and load (inventory.targets)."""
    from estate.render.slurm import slurm_plugins
    server = any(p.startswith("storage/exports/") for p in target.consumes)
    client = any(p.startswith("storage/mounts/") for p in target.consumes)
    extras = ("server",) * server + ("client",) * client
    wanted = packages(*target.deploys, extras=extras)
    return Need(target.name, dict.fromkeys(wanted, ERROR),
                _loads(target.deploys, slurm_plugins(estate)),
                _flows(estate, [estate.nodes[target.name].group]),
                nfs=("nfsd",) * server + ("nfs",) * client,
                kubernetes=any(ROLES[d].plane == "kubernetes" for d in target.deploys),
                address=target.address, gpus=_gpus(estate, target.name))


def _gpus(estate, name: str) -> GpuNeed | None:
    cls = estate.node_class(estate.group_of(name))
    if cls is None or not cls.gpu_kinds:
        return None
    index = estate.spec.node_classes.index(cls)
    # the driver sees every kind; fake devices only where every kind is emulated
    return GpuNeed(cls.gpu_count, all(k.emulated for k in cls.gpu_kinds),
                   f"node_classes[{index}].gpus")


# --- probes: one short function each, (Probe) -> checks -------------------------------

@dataclass
class Probe:
    need: Need
    runner: Runner
    estate: Estate
    artifacts: dict

    def check(self, id: str, ok: bool, message: str, fix: str = "",
              severity: str = ERROR) -> Check:
        return Check(id, severity, ok, message, "" if ok else fix, self.need.name)

    @cached_property
    def installed(self) -> dict[str, str]:
        """Installed package -> version (one dpkg-query for all of them)."""
        names = list(self.need.packages) + list(CONFLICTS)
        p = self.runner.run(["dpkg-query", "-W", "-f", "${Package} ${Status} ${Version}\n",
                             *names])
        return parse_dpkg(p.out)

    @cached_property
    def candidates(self) -> dict[str, str]:
        """Package -> the version apt would install (nodes only: apply installs there)."""
        missing = [p for p in self.need.packages if p not in self.installed]
        if self.need.lab or not missing:
            return {}
        return parse_policy(self.runner.run(["apt-cache", "policy", *missing]).out)


def parse_dpkg(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[1:4] == ["install", "ok", "installed"]:
            out[parts[0].split(":")[0]] = parts[4]
    return out


def parse_policy(text: str) -> dict[str, str]:
    """`apt-cache policy P...` -> {P: candidate}; '(none)' and unknown packages left out."""
    out, name = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            name = line[:-1]
        elif name and line.strip().startswith("Candidate:"):
            cand = line.split(":", 1)[1].strip()
            if cand != "(none)":
                out[name] = cand
    return out


def probe_packages(p: Probe) -> list[Check]:
    out = []
    for pkg, severity in p.need.packages.items():
        if pkg in p.installed:
            out.append(p.check("doctor.package", True, f"{pkg} {p.installed[pkg]} installed"))
        elif pkg in p.candidates:
            out.append(p.check("doctor.package", True,
                               f"{pkg} not installed; apply installs {p.candidates[pkg]}"))
        else:
            where = "installed" if p.need.lab else "installed, and apt has no candidate"
            fix = f"{APT} {pkg}" if p.need.lab else \
                f"add an apt source that has {pkg} (Debian 12), then {APT} {pkg}"
            out.append(p.check("doctor.package", False, f"{pkg} is not {where}", fix, severity))
    return out


def probe_conflicts(p: Probe) -> list[Check]:
    present = [c for c in CONFLICTS if c in p.installed]
    if not present:
        return [p.check("doctor.conflict", True, f"none of {', '.join(CONFLICTS)} installed")]
    return [p.check("doctor.conflict", False, f"{c} is installed: it takes over the Slurm "
                    "daemons' alternatives with a build that dies", f"apt-get remove {c}")
            for c in present]


def probe_commands(p: Probe) -> list[Check]:
    """Commands of the installed packages on PATH (a package can be installed while its
    command is not found: alternatives taken over, PATH without /usr/sbin)."""
    installed = [pkg for pkg in p.need.packages if pkg in p.installed]  # else: package line
    return [_command(p, pkg, cmd) for pkg in installed for cmd in COMMANDS.get(pkg, ())]


def _command(p: Probe, pkg: str, cmd: str) -> Check:
    path = p.runner.which(cmd)
    return p.check("doctor.command", bool(path), f"{cmd}: {path or 'not on PATH'}",
                   f"{APT} {pkg} --reinstall; check PATH has /usr/sbin")


def probe_plugins(p: Probe) -> list[Check]:
    """Every plugin the rendered files make this target's daemons load, as a file."""
    from estate.render.slurm import slurm_plugins
    plugins = slurm_plugins(p.estate)
    seen: dict[str, str] = {}
    for conf in p.need.loads:
        for plugin in plugins[conf]:
            seen.setdefault(plugin, conf)
    return [_plugin(p, plugin, conf) for plugin, conf in seen.items()]


def _plugin(p: Probe, plugin: str, conf: str) -> Check:
    path, pkg = plugin_file(plugin), plugin_package(plugin)
    if p.runner.stat(path):
        return p.check("doctor.plugin", True, f"{plugin} ({conf}): {path}")
    if plugin in UNPACKAGED_PLUGINS:
        return p.check("doctor.plugin", False, f"{plugin} ({conf}) is missing: no {path}",
                       UNPACKAGED_PLUGINS[plugin])
    if pkg not in p.installed and pkg in p.candidates:
        return p.check("doctor.plugin", True, f"{plugin} ({conf}) comes with {pkg}, "
                       "which apply installs")
    gone = " (installed, but the file is gone)" if pkg in p.installed else ""
    return p.check("doctor.plugin", False, f"{plugin} ({conf}) is missing: no {path}; "
                   f"it ships in {pkg}{gone}",
                   f"{APT} {pkg}" + (" --reinstall" if gone else ""))


def slurm_version(text: str) -> tuple[int, int] | None:
    """'22.05.8-4+deb12u3' (or '1:22.05.8', 'slurm-wlm 22.05.8') -> (22, 5)."""
    m = re.search(r"(?:^|[\s:])(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def probe_slurm_version(p: Probe) -> list[Check]:
    versions = p.installed | p.candidates
    pkg = next((s for s in SLURM_PACKAGES if s in p.need.packages and s in versions), None)
    have = slurm_version(versions[pkg]) if pkg else None
    if have is None:
        return []  # no Slurm here, or the package check already failed
    want = p.estate.spec.slurm.version
    if p.need.lab and SLURM_SUITES[want] != HOST_SUITE:
        # the namespace lab runs this release from its root, not from the host's packages
        return [p.check("doctor.slurm_version", True, f"Slurm {want} (slurm.version) runs "
                        f"from a Debian {SLURM_SUITES[want]} root (scripts/slurm-root.sh)")]
    wanted = tuple(int(x) for x in want.split("."))
    out = [p.check("doctor.slurm_version", have == wanted, f"the files are rendered for "
                   f"Slurm {want} (slurm.version); {pkg} is {versions[pkg]}",
                   f"install Slurm {want} (Debian {SLURM_SUITES[want]}), or set "
                   f"slurm.version to the Slurm installed", ERROR if have < wanted else WARNING)]
    for path, text, minimum, severity, what in SLURM_MINIMUM:
        art = p.artifacts.get(path)
        if art is None or (text and text.encode() not in art.content):
            continue
        need = "%d.%02d" % minimum
        out.append(p.check("doctor.slurm_version", have >= minimum,
                           f"{path} uses {what}: needs Slurm >= {need}, {pkg} is "
                           f"{versions[pkg]}", f"install Slurm >= {need} ({_debian_with(minimum)})",
                           severity))
    return out


def _debian_with(minimum: tuple[int, int]) -> str:
    """'Debian trixie has 24.11': the first suite of the catalogue with a new enough Slurm."""
    return next((f"Debian {suite} has {v}" for v, suite in SLURM_SUITES.items()
                 if tuple(int(x) for x in v.split(".")) >= minimum), "no Debian suite has it")


def listening_ports(text: str) -> set[int]:
    """Ports of LISTEN sockets (state 0A) in /proc/net/tcp or tcp6."""
    ports = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _owner(p: Probe, port: int) -> str:
    """The process listening on a port (ss names it when it may), else ''."""
    out = p.runner.run(["ss", "-Htlnp", f"sport = :{port}"]).out
    m = re.search(r'users:\(\("([^"]+)"', out)
    return m.group(1) if m else ""


def probe_ports(p: Probe) -> list[Check]:
    if not p.need.ports:
        return []
    taken = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        taken |= listening_ports(p.runner.read(name) or "")
    # The labs run their daemons in namespaces of their own: a host port is only in the way
    # of a daemon started by hand. On a node, the daemon's port must be free for it.
    severity = WARNING if p.need.lab else ERROR
    out = []
    for service, port in p.need.ports:
        owner = _owner(p, port) if port in taken else ""
        if port not in taken or owner == service:
            what = f"served by {owner} already" if owner else "free"
            out.append(p.check("doctor.port", True, f"{service} port {port}: {what}"))
            continue
        out.append(p.check("doctor.port", False, f"{service} port {port} is taken by "
                           f"{owner or 'another process'}", f"stop it (ss -tlnp 'sport = "
                           f":{port}'), or change the port in the spec", severity))
    return out


def probe_cgroup(p: Probe) -> list[Check]:
    controllers = p.runner.read("/sys/fs/cgroup/cgroup.controllers")
    if controllers is not None:
        return [p.check("doctor.cgroup_v2", True,
                        f"cgroup v2 at /sys/fs/cgroup ({controllers.strip() or 'no controllers'})")]
    hybrid = p.runner.read("/sys/fs/cgroup/unified/cgroup.controllers") is not None
    # Slurm's CgroupPlugin=autodetect still loads cgroup/v1 and kubelet still runs there,
    # so nothing fails today; both deprecate v1.
    return [p.check("doctor.cgroup_v2", False, "cgroup v1" + (" (hybrid: v2 only at "
                    "/sys/fs/cgroup/unified)" if hybrid else "") + ": Slurm autodetects "
                    "cgroup/v1, and kubelet deprecates v1",
                    "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2)", WARNING)]


def probe_nftables(p: Probe) -> list[Check]:
    if "nftables" not in p.need.packages:
        return []
    if "nftables" not in p.installed:
        # On this host the package line names it; on a node apply installs it first.
        return [] if p.need.lab else [p.check("doctor.nftables", True, "nftables is not "
                                              "installed yet; apply installs it")]
    r = p.runner.run(["nft", "list", "tables"])
    return [p.check("doctor.nftables", r.rc == 0, "nft list tables " + (
        "works" if r.rc == 0 else f"failed: {_first_line(r.err) or r.rc}"),
        "the kernel needs nf_tables (CONFIG_NF_TABLES) and root (CAP_NET_ADMIN)")]


def probe_nfs(p: Probe) -> list[Check]:
    if not p.need.nfs:
        return []
    known = (p.runner.read("/proc/filesystems") or "").split()
    out = []
    for fs in p.need.nfs:
        # as the storage role probes it: built in, or a module it could load
        ok = fs in known or p.runner.run(["modprobe", "-n", "-q", fs]).rc == 0
        what = "NFS server (nfsd)" if fs == "nfsd" else "NFS client (nfs)"
        out.append(p.check("doctor.nfs", ok, f"kernel {what}: " + (
            "available" if ok else "not in /proc/filesystems and not loadable"),
            NFS_FIX[p.need.lab], WARNING))
    return out


def probe_runtime(p: Probe) -> list[Check]:
    if p.need.lab:
        r = p.runner.run(["docker", "info", "--format", "{{.ServerVersion}}"])
        return [p.check("doctor.container_runtime", r.rc == 0, "dockerd " + (
            f"{r.out.strip()} answers" if r.rc == 0 else "is not answering"),
            "scripts/start-dockerd.sh (make lab starts it)", WARNING)]
    if not p.need.kubernetes:
        return []
    if "containerd" not in p.installed:
        return [p.check("doctor.container_runtime", True,
                        "containerd not installed yet; apply installs it (k8s_node)")]
    up = p.runner.stat("/run/containerd/containerd.sock") is not None
    return [p.check("doctor.container_runtime", up, "containerd " + (
        "is running" if up else "is installed but not running"),
        "systemctl enable --now containerd", WARNING)]


def probe_gpu_driver(p: Probe) -> list[Check]:
    """GPU nodes need the NVIDIA driver loaded, at the pinned minimum (estate.model.nvidia):
    without it the device plugin and Slurm's GRES find no GPU. Nodes whose GPUs the spec
    marks emulated (the lab's fake devices) get an ok line that says so."""
    gpus = p.need.gpus
    if gpus is None or p.need.lab:
        return []
    if gpus.emulated:
        return [p.check("doctor.gpu_driver", True, f"{gpus.count} GPU(s) marked emulated in "
                        f"{gpus.where} (fake devices): no NVIDIA driver expected")]
    smi = p.runner.run(nvidia.SMI_QUERY)
    seen = nvidia.smi_versions(smi.out) if smi.rc == 0 else []
    version = nvidia.proc_version(p.runner.read(nvidia.VERSION_FILE)) or \
        (seen[0] if seen else None)
    minimum = nvidia.minimum_text()
    fix = nvidia.INSTALL_FIX.format(minimum=minimum)
    if version is None:
        why = _first_line(smi.err) or f"nvidia-smi exited {smi.rc}"
        return [p.check("doctor.gpu_driver", False, f"{p.need.name} declares {gpus.count} "
                        f"GPU(s) ({gpus.where}) but no NVIDIA driver is loaded: no "
                        f"{nvidia.VERSION_FILE}, {why}", fix)]
    out = [p.check("doctor.gpu_driver", nvidia.new_enough(version), f"{p.need.name}: NVIDIA "
                   f"driver {version} loaded" + ("" if nvidia.new_enough(version) else
                                                 f", older than the minimum {minimum}"), fix)]
    if seen and len(seen) != gpus.count:
        out.append(p.check("doctor.gpu_count", False, f"{p.need.name}: the driver sees "
                           f"{len(seen)} GPU(s), {gpus.where} declares {gpus.count}",
                           "fix the node class's gpus.count, or the node (a GPU fallen off "
                           "the bus: nvidia-smi -L, dmesg)", WARNING))
    return out


def probe_certificates(p: Probe, now=None) -> list[Check]:
    """Each certificate the node holds (estate.model.certificates) and its notAfter: a
    warning within WARN_DAYS, naming the command that renews it. A file not there yet is
    the first apply's to install, not a failure. Reads a kubeconfig's certificate line only."""
    import datetime as dt
    from estate.model import certificates as certs
    if p.need.lab:
        return []
    now = now or dt.datetime.now(dt.timezone.utc)
    out = []
    for cert, path in certs.held(p.estate).get(p.need.name, []):
        r = p.runner.run(certs.read_command(cert.kind, path))
        end = certs.not_after(r.out, cert.kind) if r.rc == 0 else None
        if end is None:
            continue
        out.append(p.check("doctor.certificate_expiry", not certs.expiring(end, now),
                           f"{p.need.name}: {certs.describe(cert, path, end, now)}",
                           f"{cert.renew} ({cert.automatic})", WARNING))
    return out


PROBES: tuple[Callable[[Probe], list[Check]], ...] = (
    probe_packages, probe_conflicts, probe_commands, probe_plugins, probe_slurm_version,
    probe_ports, probe_cgroup, probe_nftables, probe_nfs, probe_runtime, probe_gpu_driver,
    probe_certificates)


def run_probes(need: Need, runner: Runner, estate, artifacts) -> list[Check]:
    p = Probe(need, runner, estate, artifacts)
    return [c for probe in PROBES for c in probe(p)]


# --- keys -----------------------------------------------------------------------------

def key_names(estate) -> dict[str, str]:
    """Check id -> key file that the spec's estate needs (JWT only with slurmrestd)."""
    names = {"doctor.munge_key": MUNGE_KEY.file}
    if uses_jwt(estate.spec):
        names["doctor.jwt_key"] = JWT_KEY.file
        names["doctor.tls_seed"] = TLS_SEED.file   # slurmrestd's TLS front is issued from it
    from estate.model.bridge import has_minter
    if has_minter(estate):   # the cluster CA and the minter's credential are issued from it
        names["doctor.cluster_ca_seed"] = CLUSTER_CA_SEED.file
    return names


def check_keys(estate, secrets: Path | None, lab: bool) -> list[Check]:
    target = "local" if lab else "secrets"
    if secrets is None:
        # The labs make their own keys (.lab/secrets, and the namespace lab per run);
        # an apply to real nodes uploads the operator's and stops without them.
        return [Check(id, ERROR, lab, f"{name}: " + (
            "created by the lab" if lab else "no secrets directory given"),
            "" if lab else "--secrets DIR (or ESTATE_MUNGE_KEY_B64 / ESTATE_JWT_KEY_B64 / "
            "ESTATE_TLS_SEED_B64 / ESTATE_K8S_CA_SEED_B64)",
            target) for id, name in key_names(estate).items()]
    return [_key(id, Path(secrets) / name, target) for id, name in key_names(estate).items()]


def _key(id: str, path: Path, target: str) -> Check:
    try:
        st = path.stat()
    except OSError:
        return Check(id, ERROR, False, f"{path} is missing", f"create it (estate lab up "
                     f"makes lab keys; real estates bring their own)", target)
    minimum = MUNGE_KEY_MIN if path.name == MUNGE_KEY.file else 1
    if st.st_size < minimum:
        return Check(id, ERROR, False, f"{path} has {st.st_size} bytes, needs >= {minimum}",
                     f"write a new key: head -c {MUNGE_KEY.size} /dev/urandom > {path}", target)
    mode = st.st_mode & 0o777
    return Check(id, WARNING, not mode & 0o077, f"{path}: {st.st_size} bytes, mode "
                 f"{mode:04o}" + (", readable by group or others" if mode & 0o077 else ""),
                 f"chmod 600 {path}", target)


# --- running it -----------------------------------------------------------------------

def doctor_local(estate, artifacts, root: str | Path = "/",
                 secrets: Path | None = None) -> list[Check]:
    checks = run_probes(host_need(estate), LocalRunner(root), estate, artifacts)
    return checks + check_keys(estate, secrets, lab=True)


def doctor_nodes(estate, artifacts, connect: Callable[[Need], Runner], limit: str | None = None,
                 secrets: Path | None = None, workers: int = 16) -> list[Check]:
    """Each node (or --limit) through connect(need) -> runner; a node that cannot be
    reached is one error naming it, and the others are still checked."""
    from estate.provision.inventory import select, targets
    chosen = select(targets(estate, artifacts.manifest()), limit)
    needs = [node_need(estate, t) for t in chosen]

    def one(need: Need) -> list[Check]:
        try:
            return run_probes(need, connect(need), estate, artifacts)
        except Unreachable as exc:
            return [Check("doctor.unreachable", ERROR, False, f"{need.name} "
                          f"({need.address or 'no address'}) cannot be reached: {exc}",
                          "check ssh to it (--ssh-user, --ssh-key) and that it is up",
                          need.name)]
    from concurrent.futures import ThreadPoolExecutor   # 10 ms of imports: doctor only
    with ThreadPoolExecutor(max_workers=workers) as pool:
        per_node = list(pool.map(one, needs))
    return [c for cs in per_node for c in cs] + check_keys(estate, secrets, lab=False)


def ssh_config(nodes, conn, path: Path) -> Path:
    """One Host block per node for testinfra's ssh backend (as estate verify writes it)."""
    lines = []
    for t in nodes:
        lines += [f"Host {t.name}", f"  HostName {t.address or t.name}", f"  User {conn.user}",
                  "  BatchMode yes", "  ConnectTimeout 10", "  ControlMaster auto",
                  "  ControlPath /tmp/estate-doctor-%C", "  ControlPersist 60"]
        if conn.key:
            lines += [f"  IdentityFile {conn.key}", "  IdentitiesOnly yes"]
        if not conn.strict_host_keys:
            lines += ["  StrictHostKeyChecking no", "  UserKnownHostsFile /dev/null",
                      "  LogLevel ERROR"]
    path.write_text("\n".join(lines) + "\n")
    return path


# --- output ---------------------------------------------------------------------------

def what(c: Check) -> str:
    text = c.message if c.target == "local" else f"{c.target}: {c.message}"
    return text + (f"  (fix: {c.fix})" if c.fix and not c.ok else "")


def line(c: Check, id_width: int = 0) -> str:
    return f"{c.status:<4}  {c.id:<{id_width}}  {what(c)}"


def summary(checks: list[Check]) -> str:
    errors = sum(not c.ok and c.severity == ERROR for c in checks)
    warnings = sum(not c.ok and c.severity == WARNING for c in checks)
    return (f"doctor: {len(checks)} checks, {errors} error{'s' * (errors != 1)}, "
            f"{warnings} warning{'s' * (warnings != 1)}")


def print_checks(checks: list[Check], output) -> None:
    if output is Output.json:
        typer.echo(json.dumps([c.as_dict() for c in checks], indent=2))
        return
    mode = output.resolve()
    if mode is Output.table:
        _table(checks, make_console())
        return
    width = max((len(c.id) for c in checks), default=0)
    for c in checks:
        if mode is Output.github and not c.ok:
            level = "error" if c.severity == ERROR else "warning"
            typer.echo(annotation(level, what(c), title=c.id))
        else:
            typer.echo(line(c, width))
    typer.echo(summary(checks))


def _table(checks: list[Check], console) -> None:
    from rich.table import Table
    from rich.text import Text
    colour = {"ok": "green", "FAIL": "red", "warn": "yellow"}
    table = Table(show_lines=False)
    for col in ("status", "id", "target", "message", "fix"):
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(Text(c.status, style=colour[c.status]), c.id, c.target, Text(c.message),
                      Text(c.fix))
    console.print(table)
    console.print(summary(checks), markup=False)


class DoctorTarget(str, Enum):
    local = "local"
    inventory = "inventory"


def register(app) -> None:
    @app.command()
    def doctor(spec: Path = typer.Argument(..., help="Path to the estate spec."),
               target: DoctorTarget = typer.Option(DoctorTarget.local, "--target",
                                                   help="local: this host, as the labs use "
                                                   "it; inventory: the spec's nodes over ssh."),
               limit: str = typer.Option(None, "--limit", help="Hostlist of nodes "
                                         "(--target inventory), e.g. gpu[1-2]."),
               secrets: Path = typer.Option(None, "--secrets", help="Directory with munge.key "
                                            "and jwt_hs256.key, as estate apply takes it."),
               root: Path = typer.Option(Path("/"), "--root", help="Prefix for the files "
                                         "probed on this host (plugins, /proc, /sys)."),
               lab: bool = typer.Option(False, "--lab", help="Reach nodes as the lab does "
                                        "(its key, no host key checks, its secrets)."),
               ssh_key: str = typer.Option(None, "--ssh-key"),
               ssh_user: str = typer.Option("root", "--ssh-user"),
               output: Output = output_option()):
        """Preflight: what SPEC needs on this host (or its nodes), one line each with the
        fix. Exit 1 if anything would make the lab or an apply fail."""
        checks = run_doctor(spec, target, limit, secrets, root, lab, ssh_key, ssh_user)
        print_checks(checks, output)
        raise typer.Exit(1 if failed(checks) else 0)


def run_doctor(spec: Path, target: DoctorTarget, limit: str | None, secrets: Path | None,
               root: Path, lab: bool, ssh_key: str | None, ssh_user: str) -> list[Check]:
    from estate.pipeline import build
    result = build(spec)
    if not result.ok:
        n = sum(f.severity.value == ERROR for f in result.findings)
        return [Check("doctor.spec", ERROR, False, f"{spec} has {n} error(s); nothing to check "
                      "against", f"estate check {spec}")]
    if target is DoctorTarget.local:
        return doctor_local(result.estate, result.artifacts, root, secrets)
    return _doctor_inventory(result, limit, secrets, lab, ssh_key, ssh_user)


def _doctor_inventory(result, limit, secrets, lab, ssh_key, ssh_user) -> list[Check]:
    from estate.provision.envsecrets import secrets_from_env, spec_secrets
    from estate.provision.inventory import Connection, targets
    from estate.provision.secrets import LAB_SECRETS, LAB_SSH_KEY
    conn = Connection("root", str(LAB_SSH_KEY), False) if lab else \
        Connection(ssh_user, ssh_key, True)
    with tempfile.TemporaryDirectory(prefix="estate-doctor-") as tmp, \
            secrets_from_env(named=spec_secrets(result.estate.spec)) as from_env:
        config = ssh_config(targets(result.estate, result.artifacts.manifest()), conn,
                            Path(tmp) / "ssh_config")
        chosen = secrets or from_env or (LAB_SECRETS if lab else None)
        try:
            return doctor_nodes(result.estate, result.artifacts,
                                lambda need: SshRunner(need.name, config), limit, chosen)
        except ValueError as exc:  # --limit naming nodes the spec lacks
            return [Check("doctor.limit", ERROR, False, str(exc), "estate inventory SPEC "
                          "lists the nodes", "inventory")]
