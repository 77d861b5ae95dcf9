"""A real Slurm cluster on this machine: one network namespace per node of a spec.

Every Slurm node of the spec (controllers, login nodes, workers) gets a network
namespace on one bridge with its address from the spec, its own hostname, and a
private view of /run, /var/spool, /var/log, /etc/slurm, /etc/estate, /etc/stunnel, /etc/hosts, /etc/passwd and
/etc/group (the spec's users added), so that
daemons that share this machine's filesystem still behave as on separate hosts.
Each node receives exactly the rendered artifacts whose consumers name it, as the
provisioning roles would install them (estate.model.destinations, the roles' table); workers run configless
(slurmd.env's --conf-server) and fetch slurm.conf from slurmctld.

    estate lab netns up stacks/lab.yaml          # start, wait, report
    estate lab netns up stacks/lab.yaml --job    # up + a GPU job + report
    estate lab netns status                      # what Slurm sees
    estate lab netns down                        # stop and remove all

Needs root, iproute2, util-linux, Debian's slurmctld/slurmd/slurm-client/munge, and
for a spec with accounting slurmdbd and mariadb-server. Secrets (munge key, JWT key)
are generated into the state directory with owner-only modes and never printed.

A spec whose ``slurm.version`` is not the host's Slurm (24.11 on this Debian 12 host)
runs every node's daemons and clients from a debootstrapped root of the Debian suite
that ships it (scripts/slurm-root.sh, cached under build/): each node's mount namespace
binds /proc, /sys (slurmd needs /sys/fs/cgroup), /dev and the node's private paths into
that root and chroots there. Chroot rather than containers: the lab's design (network
namespaces, one munged, per-node bind mounts, process lookup by namespace) stays exactly
the one the host's Slurm uses, only the binaries and libraries differ, and chroot needs
nothing the host lacks. The host's munged serves both (the munge protocol is unchanged).
"""
from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from estate import paths
from estate.catalogue import HOST_SUITE, SLURM_SUITES
from estate.lab import driver, netns_bridge
from estate.lab.driver import LabError
from estate.pipeline import build
from estate.render import write_tree
from estate.render.artifacts import Artifacts
from estate.model.services import (DEFAULT_CGROUP_MOUNTPOINT, GPU_DEVICES, IDENTITY,
                                   SLURM_USER, SLURMDBD_DATABASE,
                                   SLURMDBD_PATHS, jwt_key_path, slurm_daemon_paths)
from estate.model.slurm import node_lines, state_mount
from estate.model.destinations import ESTATE_ETC, destination
from estate.spec.resolved import Estate
from estate.verify import slurm_view

STATE = Path(os.environ.get("ESTATE_NETNS_DIR", "/tmp/estate-netns-lab"))
BRIDGE = "estns-br0"
NS_PREFIX = "estns-"          # namespace names: estns-ctl1, estns-gpu1, ...
VETH_PREFIX = "estns"         # host ends: estns0, estns1, ... (15-character limit)
NETNS_DIR = Path("/run/netns")
IPT_RULES = (["-i", BRIDGE, "-j", "ACCEPT"], ["-o", BRIDGE, "-j", "ACCEPT"])
# cgroup v1 controllers Slurm's cgroup plugins use (proctrack: freezer; task: cpuset,
# memory, devices; jobacct_gather/cgroup: cpuacct, memory). Each node of a spec with
# cgroup tracking gets a cgroup of its own under each, bound at slurm.cgroup_mountpoint in
# its mount namespace, as each container node binds its own (slurm_conf/cgroup-bind.sh.j2),
# and removed at down: the jobs' cgroups stay under the lab's, never in the host's own tree.
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_CONTROLLERS = ("cpuset", "memory", "devices", "freezer", "cpuacct")
CGROUP_PREFIX = "estate-netns-"
# Paths each node sees privately: (in-node path, directory under the node's state).
# /run comes first: the munge socket directory is bound inside it.
PRIVATE = (("/run", "run"), ("/var/spool", "spool"), ("/var/log", "log"),
           ("/etc/slurm", "etc/slurm"), (ESTATE_ETC, "etc/estate"),
           ("/etc/stunnel", "etc/stunnel"))
# What a node of a release root sees of this machine (bound before its private paths).
ROOT_SYSTEM = ("/proc", "/sys", "/dev")
ROOT_SCRIPT = paths.SCRIPTS / "slurm-root.sh"
# Runs inside the new mount and UTS namespaces: hostname, bind mounts, then the command.
_ENTER = 'set -e; hostname "$1"; shift; ' \
         'while [ "$1" != "--" ]; do mount --rbind "$1" "$2"; shift 2; done; shift; exec "$@"'


@dataclass
class Node:
    name: str
    addr: str
    prefixlen: int
    index: int

    @property
    def netns(self) -> str:
        return NS_PREFIX + self.name


def sh(*argv: str, check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, timeout=timeout, text=True,
                          capture_output=True, **kw)


class Lab:
    def __init__(self, spec_path: str | Path | None = None, state: Path = STATE,
                 controllers_only: bool = False,
                 accept: frozenset[tuple[str, str]] = frozenset()):
        """controllers_only: the controllers, the accounting host and the client, no slurmd:
        what proves slurmctld loads a spec with more nodes than one machine can run (its
        workers stay as they start, never registered). accept: findings ((id, path)) that
        do not stop the lab (estate.pipeline.build), only with controllers_only: what a
        test shows slurmctld doing with a spec Estate refuses for slurmd's sake."""
        if accept and not controllers_only:
            raise LabError("accepted findings need controllers_only (no slurmd)")
        self.state = state
        self.controllers_only = controllers_only
        self.accept = frozenset(accept)
        self.spec_path = Path(spec_path) if spec_path else _saved_spec(state)
        self.timings: dict[str, float] = {}   # seconds each wait took, for reports
        self._last_failure = ""                # output of the last failed readiness probe
        self._estate: Estate | None = None
        self._artifacts: Artifacts | None = None
        self._root: str | None = None

    # --- the spec ---------------------------------------------------------------

    def load(self) -> None:
        result = build(self.spec_path, accept=self.accept)
        if not result.ok:
            lines = [f"{f.severity.value} {f.id} {f.path}: {f.message}" for f in result.blocking]
            raise LabError(f"{self.spec_path} does not render:\n" + "\n".join(lines))
        self._estate, self._artifacts = result.estate, result.artifacts

    @property
    def estate(self) -> Estate:
        if self._estate is None:
            self.load()
        return self._estate

    @property
    def artifacts(self):
        if self._artifacts is None:
            self.load()
        return self._artifacts

    @property
    def slurm(self):
        return self.estate.spec.slurm

    @property
    def root(self) -> str:
        """'/' where the host's Slurm is the spec's release, else the release's root."""
        if self._root is None:
            self._root = release_root(self.slurm.version)
        return self._root

    def daemon_path(self, key: str) -> str:
        """A path slurm.conf names (StateSaveLocation, SlurmdSpoolDir, ...), from the model
        that renders it rather than from the rendered text."""
        return next(p.path for p in slurm_daemon_paths(self.estate.spec) if p.key == key)

    def nodes(self) -> list[Node]:
        est, seg = self.estate, self.slurm.address_segment
        names = list(est.plane_hosts("slurm"))
        if self.slurm.accounting and self.slurm.accounting.host not in names:
            names.append(self.slurm.accounting.host)
        cidr = next((s.cidr for s in est.spec.segments if s.name == seg), None)
        if self.controllers_only:
            keep = {*self.slurm.controllers, self.client()}
            keep |= {self.slurm.accounting.host} if self.slurm.accounting else set()
            names = [n for n in names if n in keep]
        out = []
        for i, name in enumerate(names):
            addr = est.address(name, seg)
            if addr is None or cidr is None:
                raise LabError(f"node {name} has no address on segment {seg!r}: add "
                               f"'{seg}: auto' to its addresses")
            out.append(Node(name, str(addr), cidr.prefixlen, i))
        return out

    def workers(self) -> list[str]:
        return [n for line in node_lines(self.estate) for n in line.hostlist]

    def powered_workers(self) -> list[str]:
        """Workers whose slurmd runs from the start: cloud nodes wait for slurmctld's
        resume program, future nodes for `scontrol update State=RESUME`."""
        return [n for line in node_lines(self.estate) if line.state == "UNKNOWN"
                for n in line.hostlist]

    def client(self) -> str:
        """Where users run srun/sbatch: a login node, else the first controller."""
        login = list(self.estate.role_hosts("slurm_login"))
        return login[0] if login else self.slurm.controllers[0]

    # --- running things on nodes ---------------------------------------------------

    def node_dir(self, name: str) -> Path:
        return self.state / "nodes" / name

    def binds(self, name: str) -> list[tuple[str, str]]:
        """(host source, in-node target) in mount order; targets lie in the node's root."""
        d = self.node_dir(name)
        out = [(str(self.state / "munge"), str(d / "run/munge"))]
        out += [(str(d / sub), path) for path, sub in PRIVATE]
        for f in ("hosts", "passwd", "group"):
            if (d / "etc" / f).exists():
                out.append((str(d / "etc" / f), f"/etc/{f}"))
            elif self.root != "/":
                # the root's own users have other ids than the files the lab chowns here
                out.append((f"/etc/{f}", f"/etc/{f}"))
        if (d / "lib/mysql").exists():
            out.append((str(d / "lib/mysql"), "/var/lib/mysql"))
        shared = self.shared_state()
        if shared and name in self.slurm.controllers:
            out.append((str(shared[1]), shared[0].path))
        out += [(str(src), target) for src, target in self.node_cgroups(name)]
        # last: the sources above may lie under this machine's /tmp (the lab's state). Each
        # node has a /tmp of its own, as a real node does: srun's PMIx plugin makes
        # /tmp/spmix_appdir_<uid>_<step> on every node of a step, and two namespace nodes of
        # one job would otherwise collide there ("File exists")
        out.append((str(d / "tmp"), "/tmp"))
        if self.root == "/":
            return out
        # the munge socket is bound onto the node's run directory on this machine, which
        # then appears as /run in the root
        munge, *rest = out
        return [munge] + [(src, self.root + dst) for src, dst in
                          [(p, p) for p in ROOT_SYSTEM] + rest]

    def node_cgroups(self, name: str) -> list[tuple[Path, str]]:
        """(this machine's cgroup, where the node sees it) per controller, where the spec
        tracks jobs by cgroup (none where it does not)."""
        slurm = self.slurm
        if slurm.process_tracking != "cgroup" or name not in self._workers():
            return []
        if slurm.cgroup_mountpoint == DEFAULT_CGROUP_MOUNTPOINT:
            raise LabError("the namespace lab's nodes share this machine's cgroup tree: set "
                           "slurm.cgroup_mountpoint (e.g. /run/estate/slurm-cgroup), where each "
                           "node gets a cgroup of its own, or process_tracking: linuxproc")
        own = f"{CGROUP_PREFIX}{self.state.name}-{name}"
        return [(CGROUP_ROOT / c / own, f"{slurm.cgroup_mountpoint}/{c}")
                for c in CGROUP_CONTROLLERS]

    def _workers(self) -> set[str]:
        return set(self.estate.role_hosts("slurm_worker").names())

    def make_cgroups(self, name: str) -> None:
        """The node's own cgroups, and their mount points in its private /run."""
        for src, target in self.node_cgroups(name):
            src.mkdir(exist_ok=True)
            if src.parent.name == "cpuset":   # a v1 cpuset takes no task until it has both
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (src / f).write_text((src.parent / f).read_text())
            self.host_path(name, target).mkdir(parents=True, exist_ok=True)

    def shared_state(self) -> tuple | None:
        """(mount, host directory) where slurmctld's state lies on an export every
        controller mounts (HA): one directory of this host, bound at the mount point in each
        controller, stands in for the NFS export (the VM tier shows real NFS mounts)."""
        mount = state_mount(self.estate)
        return (mount, self.state / "exports" / mount.export) if mount else None

    def host_path(self, name: str, path: str) -> Path:
        """Where a path a node sees lies on this machine's filesystem."""
        shared = self.shared_state()
        if shared and name in self.slurm.controllers and \
                (path + "/").startswith(shared[0].path.rstrip("/") + "/"):
            return shared[1] / path[len(shared[0].path):].lstrip("/")
        for target, sub in sorted(PRIVATE, key=lambda p: -len(p[0])):
            if path == target or path.startswith(target + "/"):
                return self.node_dir(name) / sub / path[len(target):].lstrip("/")
        raise LabError(f"{path} is not private to a node in the lab (it must lie under "
                       f"{', '.join(p for p, _ in PRIVATE)})")

    def enter(self, name: str, argv: list[str]) -> list[str]:
        flat = [x for pair in self.binds(name) for x in pair]
        chroot = ["chroot", self.root] if self.root != "/" else []
        return ["nsenter", f"--net={NETNS_DIR / (NS_PREFIX + name)}", "unshare", "--uts",
                "--mount", "--propagation", "private", "sh", "-c", _ENTER, "estate-node",
                name, *flat, "--", *chroot, *argv]

    def run(self, name: str, argv: list[str], check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.enter(name, argv), text=True, capture_output=True,
                              timeout=timeout)
        if check and proc.returncode:
            raise LabError(f"{name}: {shlex.join(argv)} exited {proc.returncode}:\n"
                           f"{proc.stdout}{proc.stderr}")
        return proc

    def srun(self, *args: str, timeout: float = 60) -> str:
        return self.run(self.client(), ["srun", *args], timeout=timeout).stdout

    def as_user(self, user: str, argv: list[str], check: bool = False):
        """Run a client command on the login node as one of the spec's users."""
        group = next(u.group for u in self.estate.spec.identity.users if u.name == user)
        return self.run(self.client(), ["setpriv", f"--reuid={user}", f"--regid={group}",
                                        "--init-groups", *argv], check=check)

    def sbatch(self, *args: str) -> str:
        """Submit a batch job (output discarded: jobs run in a shared working tree)."""
        return self.run(self.client(), ["sbatch", "--parsable", "-o", "/dev/null", *args]
                        ).stdout.strip().split(";")[0]

    def job_states(self, jobs: list[str]) -> dict[str, str]:
        """job id -> 'STATE reason nodes' as squeue reports it (finished jobs too, for
        as long as slurmctld keeps them: MinJobAge)."""
        out = self.run(self.client(), ["squeue", "-h", "-t", "all", "-j", ",".join(jobs),
                                       "-o", "%i %T %r %N"]).stdout
        return {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines()}

    def wait_jobs(self, jobs: list[str], state: str, timeout: float) -> dict[str, str]:
        """Poll until every job is in state, or the timeout; returns the last states."""
        end = time.monotonic() + timeout
        while True:
            states = self.job_states(jobs)
            if all(states.get(j, "").startswith(state) for j in jobs) \
                    or time.monotonic() > end:
                return states
            time.sleep(0.5)

    def view(self) -> slurm_view.SlurmView:
        return slurm_view.collect(lambda argv: self.run(self.client(), argv).stdout)

    def mismatches(self) -> list[slurm_view.Mismatch]:
        return slurm_view.compare(self.estate, self.view())

    def add_namespace(self, name: str, cidr: str) -> str:
        """A namespace for a host outside the Slurm lab (a bridge's client), with one
        address on the lab's bridge; down() removes it with the others."""
        taken = len(list(NETNS_DIR.glob(NS_PREFIX + "*")))   # the nodes' and earlier ones
        ns, veth = NS_PREFIX + name, f"{VETH_PREFIX}x{taken}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", cidr, "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        return ns

    def start(self, name: str, daemon: str, argv: list[str]) -> None:
        out = self.node_dir(name) / "out"
        out.mkdir(exist_ok=True)
        with open(out / f"{daemon}.out", "ab") as log:
            subprocess.Popen(self.enter(name, argv), stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)

    # --- up -------------------------------------------------------------------------

    def up(self, timeout: float = 90) -> None:
        """Bring the whole cluster up from a clean state, or raise LabError (torn down)."""
        nodes = self.nodes()
        with _lock(self.state):
            down(self.state)
            shutil.rmtree(self.state, ignore_errors=True)
            self.state.mkdir(parents=True)
            (self.state / "spec").write_text(str(self.spec_path.absolute()))
            write_tree(self.artifacts, self.state / "render")
            try:
                self._up(nodes, time.monotonic() + timeout)
            except BaseException:
                down(self.state)
                raise

    def _up(self, nodes: list[Node], deadline: float) -> None:
        network_up(nodes)
        munge_up(self.state)
        for node in nodes:
            self.install(node.name)
        for node in nodes:
            self.firewall(node)
        if self.slurm.accounting:
            self.accounting_up(self.slurm.accounting.host, deadline)
            # slurmctld refuses a partition QOS slurmdbd lacks (as the role does it)
            self.run(self._consumer("slurm/accounting.sh"),
                     ["sh", destination("slurm/accounting.sh"), "qos-names"], timeout=60)
        # controllers_only: the primary alone (a backup waits on the primary's heartbeat and
        # answers scontrol late, which proves nothing about the spec)
        for name in self.slurm.controllers[:1] if self.controllers_only \
                else self.slurm.controllers:
            self.start_slurmctld(name)
        self.wait_slurmctld(deadline)
        if self.slurm.accounting:
            self.wait(deadline, "accounting.sh to apply", self._apply_accounting,
                      self._consumer("slurm/accounting.sh"), "slurmctld")
        if self.controllers_only:
            return
        for name in self.powered_workers():
            self.start_slurmd(name)
        self.wait_workers(deadline)
        netns_bridge.up(self, deadline)

    # --- daemons, one at a time (also for tests that stop and restart them) ----------

    def start_slurmctld(self, name: str) -> None:
        """slurmctld in the foreground; it recovers jobs from its StateSaveLocation."""
        self.start(name, "slurmctld", ["slurmctld", "-D"])

    def start_slurmd(self, name: str, booted: bool = False) -> None:
        """slurmd configless, with the options of the node's rendered slurmd.env.

        booted: as on a node that has just powered up (a cloud node slurmctld resumed):
        slurmctld waits for a resumed node's boot time to pass the resume request, so
        slurmd runs in a time namespace whose boot time is now (unshare --boottime)."""
        env = shlex.split(self._env(name, "slurm/slurmd.env").get("SLURMD_OPTIONS", ""))
        argv = ["slurmd", "-D", *env]
        if booted:
            # boot time now, give or take a second (the kernel refuses a negative uptime)
            uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
            argv = ["unshare", "--time", "--boottime", str(-uptime), *argv]
        self.start(name, "slurmd", argv)

    def wait_slurmctld(self, deadline: float) -> None:
        self.wait(deadline, "slurmctld to answer", self._ctld_up, self.slurm.controllers[0],
                  "slurmctld")

    def wait_workers(self, deadline: float) -> None:
        self.wait(deadline, "every worker to be usable", self._workers_usable,
                  (self.powered_workers() or [self.client()])[0], "slurmd")

    def pids(self, name: str, daemon: str) -> list[int]:
        """The live processes of the node whose command is `daemon` (slurmd, not its
        slurmstepd children)."""
        with suppress(OSError):
            netns = os.stat(NETNS_DIR / (NS_PREFIX + name)).st_ino
            out = []
            for proc in Path("/proc").iterdir():
                with suppress(OSError):
                    if proc.name.isdigit() and os.stat(proc / "ns/net").st_ino == netns \
                            and (proc / "comm").read_text().strip() == daemon \
                            and not _zombie(int(proc.name)):
                        out.append(int(proc.name))
            return out
        return []

    def stop(self, name: str, daemon: str, sig: int = signal.SIGTERM,
             timeout: float = 30) -> None:
        """Signal the node's daemon and wait until it is gone; LabError if it was not
        running or outlives the timeout."""
        pids = self.pids(name, daemon)
        if not pids:
            raise LabError(f"{daemon} is not running on {name}")
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, sig)
        end = time.monotonic() + timeout
        while self.pids(name, daemon):
            if time.monotonic() > end:
                raise LabError(f"{daemon} on {name} still runs {timeout:.0f} s after "
                               f"signal {sig}")
            time.sleep(0.1)

    def install(self, name: str) -> None:
        """The node's artifacts where the roles put them, its directories, its fake GPUs."""
        d = self.node_dir(name)
        for path, sub in PRIVATE:
            (d / sub).mkdir(parents=True, exist_ok=True)
            Path(path).mkdir(parents=True, exist_ok=True)  # the mount point
        (d / "run/munge").mkdir()
        (d / "tmp").mkdir(exist_ok=True)
        os.chmod(d / "tmp", 0o1777)
        shared = self.shared_state()
        if shared and name in self.slurm.controllers:
            # the mount point, inside the node's private tree, and the "export" itself
            target = shared[0].path
            private = [(t, sub) for t, sub in PRIVATE if target.startswith(t + "/")]
            if not private:
                raise LabError(f"the state mount {target} is not under a path the lab gives "
                               f"each node ({', '.join(t for t, _ in PRIVATE)})")
            t, sub = private[0]
            (d / sub / target[len(t):].lstrip("/")).mkdir(parents=True, exist_ok=True)
            shared[1].mkdir(parents=True, exist_ok=True)
        for art in self.artifacts.for_node(name):
            dest = self.installed_at(name, destination(art.path))
            if dest:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(art.content)
                os.chmod(dest, art.mode)
                shutil.chown(dest, *_owner(art.owner))
            if art.path.startswith(GPU_DEVICES):
                self.make_devices(name, json.loads(art.content))
            if art.path == IDENTITY:
                write_identity(d / "etc", json.loads(art.content))
        self.make_dirs(name)
        self.make_cgroups(name)
        self.root_mount_points(name)
        jwt = jwt_key_path(self.estate.spec)
        # one key for both controllers where the key lies in their shared state
        if jwt and name in self.slurm.controllers and not self.host_path(name, jwt).exists():
            _write_secret(self.host_path(name, jwt), os.urandom(32), SLURM_USER)

    def root_mount_points(self, name: str) -> None:
        """What the node's binds land on in a release root: a bind needs an existing
        directory or file there (debootstrap makes no /etc/hosts). The root gains only
        these empty mount points."""
        for src, dst in self.binds(name):
            target = Path(dst)
            if self.root == "/" or not dst.startswith(self.root + "/") or target.exists():
                continue
            if Path(src).is_dir():
                target.mkdir(parents=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()

    def installed_at(self, name: str, path: str) -> Path | None:
        """Where a file the roles install at `path` lies for this node, if the lab gives
        the node a private copy of that path (other files are this host's own, or are
        read by the lab from the rendered tree, like slurmd.env)."""
        if path == "/etc/hosts":
            return self.node_dir(name) / "etc/hosts"
        try:
            return self.host_path(name, path)
        except LabError:
            return None

    def make_devices(self, name: str, doc: dict) -> None:
        """Fake GPUs: under /run in the node's private tree, or under /dev on this machine,
        which every namespace node shares (the same NVIDIA major and minors for all)."""
        if doc.get("mode") != "create":
            raise LabError(f"{name}: the lab needs fake GPUs; mark the node class's GPUs "
                           "emulated (node_classes[].gpus.emulated: true)")
        for dev in doc["devices"]:
            want = os.makedev(dev["major"], dev["minor"])
            if dev["path"].startswith("/dev/"):
                path = Path(dev["path"])
                with suppress(FileNotFoundError):
                    if path.lstat().st_rdev == want:
                        continue
                    path.unlink()
            else:
                path = self.host_path(name, dev["path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mknod(path, 0o666 | 0o020000, want)

    def make_dirs(self, name: str) -> None:
        """The directories slurm.conf names, private to the node; slurmctld's owned by
        SlurmUser, which it drops to."""
        for p in slurm_daemon_paths(self.estate.spec):
            path = self.host_path(name, p.path)
            path = path if p.is_dir else path.parent
            if p.is_dir or not path.exists():
                path.mkdir(parents=True, exist_ok=True)
                shutil.chown(path, p.owner, p.owner)

    def firewall(self, node: Node) -> None:
        """Load the node's rendered nftables rules in its namespace: Slurm must work
        through the firewall the estate will really have."""
        for art in self.artifacts.for_node(node.name):
            if art.path.startswith("network/nftables/"):
                if not shutil.which("nft"):
                    raise LabError(f"{node.name} has rendered nftables rules: install "
                                   f"nftables (apt-get install nftables) to load them")
                proc = subprocess.run(["ip", "netns", "exec", node.netns, "nft", "-f", "-"],
                                      input=art.content, capture_output=True, timeout=30)
                if proc.returncode:
                    raise LabError(f"{node.name}: nft rejected {art.path}: "
                                   f"{proc.stderr.decode(errors='replace')}")

    def accounting_up(self, host: str, deadline: float) -> None:
        """MariaDB (unix socket only) and slurmdbd on the accounting host."""
        d = self.node_dir(host)
        for sub in ("lib/mysql", "run/mysqld", "log/mysql"):
            (d / sub).mkdir(parents=True, exist_ok=True)
            shutil.chown(d / sub, "mysql", "mysql")
        # the MariaDB that will serve the files writes them: the host's, or the root's
        self.run(host, ["mariadb-install-db", "--user=mysql", "--datadir=/var/lib/mysql",
                        "--auth-root-authentication-method=socket", "--skip-test-db"],
                 timeout=120)
        self.start(host, "mariadbd", [
            "mariadbd", "--user=mysql", "--datadir=/var/lib/mysql", "--skip-networking",
            "--socket=/run/mysqld/mysqld.sock", "--pid-file=/run/mysqld/mysqld.pid",
            "--log-error=/var/log/mysql/error.log", "--innodb-buffer-pool-size=64M"])
        db, user = SLURMDBD_DATABASE, SLURM_USER   # the model's, as slurmdbd.conf renders
        sql = (f"CREATE USER IF NOT EXISTS '{user}'@'localhost' IDENTIFIED VIA unix_socket; "
               f"CREATE DATABASE IF NOT EXISTS {db}; "
               f"GRANT ALL ON {db}.* TO '{user}'@'localhost';")
        self.wait(deadline, "MariaDB to accept the slurm user",
                  lambda: self.run(host, ["mariadb", "-e", sql], check=False).returncode == 0,
                  host, "mariadbd")
        for p in SLURMDBD_PATHS:
            self.host_path(host, p.path).parent.mkdir(parents=True, exist_ok=True)
        self.start(host, "slurmdbd", ["slurmdbd", "-D"])
        self.wait(deadline, "slurmdbd to answer", lambda: self.run(
            host, ["sacctmgr", "-n", "show", "cluster"], check=False).returncode == 0,
            host, "slurmdbd")

    # --- readiness ---------------------------------------------------------------------

    def wait(self, deadline: float, what: str, ready, name: str, daemon: str) -> None:
        t0 = time.monotonic()
        while time.monotonic() < deadline:
            if ready():
                self.timings[what] = round(time.monotonic() - t0, 2)
                return
            time.sleep(0.5)
        last = f"\nlast attempt:\n{self._last_failure}" if self._last_failure else ""
        raise LabError(f"timed out waiting for {what} on {name}; last lines of its "
                       f"{daemon} output:\n{self.tail(name, daemon)}{last}")

    def tail(self, name: str, daemon: str, lines: int = 30) -> str:
        path = self.node_dir(name) / "out" / f"{daemon}.out"
        text = path.read_text(errors="replace") if path.exists() else "(no output)"
        return "\n".join(text.splitlines()[-lines:])

    def _ctld_up(self) -> bool:
        proc = self.run(self.client(), ["scontrol", "ping"], check=False, timeout=20)
        if self.controllers_only:   # the backup is not started: the primary must be UP
            return f"at {self.slurm.controllers[0]} is UP" in proc.stdout
        return proc.returncode == 0 and "UP" in proc.stdout

    def _apply_accounting(self) -> bool:
        """accounting.sh needs the gres/gpu TRES, which slurmctld creates when it registers."""
        host = self._consumer("slurm/accounting.sh")
        proc = self.run(host, ["sh", destination("slurm/accounting.sh")], check=False, timeout=60)
        self._last_failure = (proc.stdout + proc.stderr)[-2000:] if proc.returncode else ""
        return proc.returncode == 0

    def _workers_usable(self) -> bool:
        proc = self.run(self.client(), slurm_view.NODE_CMD, check=False, timeout=20)
        nodes = slurm_view.SlurmView.parse(proc.stdout, "", "", "").nodes
        return all(slurm_view.usable(nodes.get(n, {}).get("State", ""))
                   for n in self.powered_workers())

    def _consumer(self, path: str) -> str:
        return next(iter(self.artifacts[path].consumers))

    def _env(self, name: str, path: str) -> dict[str, str]:
        arts = [a for a in self.artifacts.for_node(name) if a.path == path]
        if not arts:
            raise LabError(f"{name}: no {path} rendered for it (configless slurmd needs "
                           f"its --conf-server)")
        return parse_env(arts[0].content.decode())

    # --- report -------------------------------------------------------------------------

    def report(self) -> str:
        c = self.client()
        parts = [f"Slurm as seen from {c} (spec {self.spec_path}):"]
        for argv in (["sinfo", "-N", "-o", "%N %P %T %c %m %G %f"], ["scontrol", "show",
                     "topology"], ["scontrol", "show", "partition", "-o"]):
            proc = self.run(c, argv, check=False)
            parts.append(f"$ {shlex.join(argv)}\n{proc.stdout}{proc.stderr}".rstrip())
        bad = self.mismatches()
        parts.append("Slurm's view matches the spec" if not bad else
                     "Mismatches with the spec:\n" + "\n".join(f"  {m}" for m in bad))
        return "\n\n".join(parts)


# --- module-level pieces (also used by down, which needs no spec) ----------------------

def parse_env(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            out[key.strip()] = " ".join(shlex.split(value))
    return out


def write_identity(etc: Path, doc: dict) -> None:
    """The node's /etc/passwd and /etc/group: this machine's, plus the spec's users and
    groups whose names and ids it does not use yet (the identity role's job)."""
    for fname, key, idkey, line in (
            ("group", "groups", "gid", lambda g: f"{g['name']}:x:{g['gid']}:"),
            ("passwd", "users", "uid", lambda u: f"{u['name']}:x:{u['uid']}:{u['gid']}::"
                                                 f"{u['home']}:{u.get('shell', '/bin/sh')}")):
        lines = Path(f"/etc/{fname}").read_text().splitlines()
        names = {x.split(":")[0] for x in lines}
        ids = {x.split(":")[2] for x in lines if x.count(":") >= 2}
        lines += [line(e) for e in doc.get(key, [])
                  if e["name"] not in names and str(e[idkey]) not in ids]
        (etc / fname).write_text("\n".join(lines) + "\n")


def _owner(owner: str) -> tuple[str, str | int]:
    user, _, group = owner.partition(":")
    return user, group or pwd.getpwnam(user).pw_gid


def _write_secret(path: Path, data: bytes, owner: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400 if owner == "munge" else 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    shutil.chown(path, owner, owner)


def _saved_spec(state: Path) -> Path | None:
    saved = state / "spec"
    return Path(saved.read_text().strip()) if saved.exists() else None


class _lock:
    """One lab at a time on a machine: the names (bridge, namespaces) are fixed."""

    def __init__(self, state: Path):
        self.path = state.parent / f".{state.name}.lock"

    def __enter__(self):
        self.fd = driver.hold(self.path, "netns lab, starting or stopping,")

    def __exit__(self, *exc):
        os.close(self.fd)


def network_up(nodes: list[Node]) -> None:
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "link", "set", BRIDGE, "up")
    if shutil.which("iptables"):
        # dockerd sets FORWARD to DROP and bridged frames pass through iptables here; the
        # rules go in whatever the policy is now, since dockerd may start while the lab runs
        # (make test runs the docker tiers beside this one).
        for rule in IPT_RULES:
            sh("iptables", "-I", "FORWARD", *rule)
    for n in nodes:
        node_network_up(n)


def node_network_up(n: Node) -> None:
    """The node's namespace, its eth0 on the lab's bridge at its address, and lo."""
    veth = f"{VETH_PREFIX}{n.index}"
    sh("ip", "netns", "add", n.netns)
    sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", n.netns)
    sh("ip", "link", "set", veth, "master", BRIDGE, "up")
    sh("ip", "-n", n.netns, "addr", "add", f"{n.addr}/{n.prefixlen}", "dev", "eth0")
    sh("ip", "-n", n.netns, "link", "set", "eth0", "up")
    sh("ip", "-n", n.netns, "link", "set", "lo", "up")


def munge_up(state: Path) -> None:
    """One munged for every node: they share this machine's filesystem and its socket."""
    sock_dir, key = state / "munge", state / "secret" / "munge.key"
    sock_dir.mkdir()
    key.parent.mkdir(mode=0o700)
    shutil.chown(sock_dir, "munge", "munge")
    shutil.chown(key.parent, "munge", "munge")
    _write_secret(key, os.urandom(1024), "munge")
    sh("setpriv", "--reuid=munge", "--regid=munge", "--init-groups", "munged",
       f"--key-file={key}", f"--socket={sock_dir}/munge.socket.2",
       f"--pid-file={sock_dir}/munged.pid", f"--seed-file={sock_dir}/munged.seed",
       f"--log-file={sock_dir}/munged.log")
    for _ in range(100):
        if (sock_dir / "munge.socket.2").exists():
            return
        time.sleep(0.1)
    raise LabError(f"munged did not create its socket; see {sock_dir}/munged.log")


def lab_pids(state: Path = STATE) -> list[int]:
    """Processes of the lab: everything in its namespaces, and its munged."""
    inodes = set()
    for ns in NETNS_DIR.glob(NS_PREFIX + "*") if NETNS_DIR.exists() else []:
        with suppress(OSError):
            inodes.add(os.stat(ns).st_ino)
    munge_arg = f"--socket={state}/munge/".encode()
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with suppress(OSError):
            if os.stat(proc / "ns/net").st_ino in inodes \
                    or munge_arg in (proc / "cmdline").read_bytes():
                out.append(int(proc.name))
    return out


def leftovers(state: Path = STATE) -> dict[str, list[str]]:
    """What of the lab is on this host: namespaces, processes, the bridge, FORWARD rules."""
    rules = []
    if shutil.which("iptables"):
        rules = [" ".join(r) for r in IPT_RULES
                 if sh("iptables", "-C", "FORWARD", *r, check=False).returncode == 0]
    return {"namespaces": sorted(p.name for p in NETNS_DIR.glob(NS_PREFIX + "*"))
            if NETNS_DIR.exists() else [],
            "processes": [str(p) for p in lab_pids(state)],
            "bridges": [BRIDGE] if Path(f"/sys/class/net/{BRIDGE}").exists() else [],
            "iptables": rules,
            "cgroups": [str(p) for p in _lab_cgroups(state)]}


def _lab_cgroups(state: Path) -> list[Path]:
    return sorted(CGROUP_ROOT.glob(f"*/{CGROUP_PREFIX}{state.name}-*"))


def _remove_cgroup(path: Path) -> None:
    """rmdir depth-first: a cgroup directory goes only when its children have (Slurm's
    uid_/job_/step_ tree under the node's own cgroup)."""
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with suppress(OSError):
            sub.rmdir()
    with suppress(OSError):
        path.rmdir()


def down(state: Path = STATE, log=print) -> dict[str, list[str]]:
    """Stop every lab process, remove namespaces, bridge, firewall rules and secrets; what
    is left (empty lists when all went)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        pids = lab_pids(state)
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, sig)
        end = time.monotonic() + wait
        while pids and time.monotonic() < end:
            pids = [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]
            time.sleep(0.1)
    for ns in sorted(NETNS_DIR.glob(NS_PREFIX + "*")) if NETNS_DIR.exists() else []:
        sh("ip", "netns", "del", ns.name, check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    if shutil.which("iptables"):
        for rule in IPT_RULES:
            while sh("iptables", "-D", "FORWARD", *rule, check=False).returncode == 0:
                pass
    for path in [state / "secret", *state.glob("nodes/*/lib/mysql")]:
        shutil.rmtree(path, ignore_errors=True)
    for cgroup in _lab_cgroups(state):
        _remove_cgroup(cgroup)
    for key in state.glob("nodes/*/spool/**/jwt*.key"):
        key.unlink(missing_ok=True)
    return leftovers(state)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def release_root(version: str) -> str:
    """'/' for the host's Slurm release, else the path of a root that has it, built by
    scripts/slurm-root.sh on first use (cached under build/; 2-4 minutes cold)."""
    if SLURM_SUITES[version] == HOST_SUITE:
        return "/"
    proc = subprocess.run([str(ROOT_SCRIPT), version], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode:
        raise LabError(f"no root with Slurm {version}: {ROOT_SCRIPT.name} {version} "
                       f"exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def up(spec: str | Path, job: bool = False, log=print) -> bool:
    """Bring the lab up from SPEC (and with `job`, run a GPU job); log what Slurm sees.
    True when Slurm reports the spec back without a mismatch."""
    lab = Lab(spec)
    t0 = time.monotonic()
    lab.up()
    log(f"netns lab up in {time.monotonic() - t0:.1f} s: {len(lab.nodes())} nodes, "
        f"state in {lab.state}")
    if job:
        gres = max((line.gres_count for line in node_lines(lab.estate)), default=0)
        argv = ["--gres", f"gpu:{gres}"] if gres else []
        log(f"$ srun {' '.join(argv)} (on {lab.client()}): " + lab.srun(
            *argv, "sh", "-c", 'echo "$(hostname) CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"'
        ).strip())
    log(lab.report())
    return not lab.mismatches()


def status(log=print) -> bool:
    """What Slurm sees of the lab that is up; LabError when none is."""
    lab = Lab(None)
    if lab.spec_path is None:
        raise LabError("no lab is up (run: estate lab netns up SPEC)")
    log(lab.report())
    return not lab.mismatches()
