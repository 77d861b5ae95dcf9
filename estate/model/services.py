"""Service facts every stage shares: accounts, ports, paths, key files and artifact paths.

The renderers print these, the roles and labs install by them, the validators check the
spec's identity against them and the Pulumi driver sizes its secrets by them. Nothing
here depends on a spec; spec-dependent service facts are functions taking one.
"""
from __future__ import annotations

from dataclasses import dataclass

from estate.spec.model import Spec

# Accounts the daemons run as; the spec's identity section must define them with fixed
# ids across nodes (estate.check.identity).
SLURM_USER = "slurm"
MUNGE_USER = "munge"

# Ports of the estate's flows: slurm.conf, the flow matrix (estate.model.flows, hence the
# firewall rules and the reachability probe), the endpoints and `estate doctor` read them.
# slurmdbd's and slurmrestd's ports are the spec's; srun's range is firewall.srun_ports.
PORTS = {"ssh": 22, "slurmctld": 6817, "slurmd": 6818, "kube-apiserver": 6443, "nfs": 2049,
         "kubelet": 10250, "node-exporter": 9100,
         # NVIDIA's DCGM exporter on GPU workers (DCGM_EXPORTER_LISTEN in its manifest)
         "dcgm-exporter": 9400,
         # telemetry (estate.model.monitoring): Prometheus itself; the Slurm exporter on the
         # controllers (9341, the Slurm exporter's port in Prometheus's port allocations);
         # kube-state-metrics' own default port, on the control planes' host network;
         # Alertmanager's default port, beside Prometheus on the monitoring host
         "prometheus": 9090, "slurm-exporter": 9341, "kube-state-metrics": 8080,
         "alertmanager": 9093,
         # Calico (estate.model.cni): Felix's default VXLAN port (FelixConfiguration
         # vxlanPort, the IANA port), Typha's port, BGP between calico-node's BIRDs
         "calico-vxlan": 4789, "calico-typha": 5473, "calico-bgp": 179}
PORT_RANGES = {"etcd": (2379, 2380)}        # client, peer
PROTOCOLS = {"calico-vxlan": "udp"}         # the rest are TCP
# Flows whose port a daemon of the estate listens on (not ssh, srun's ephemeral range or
# an exporter Estate does not run): `estate doctor` checks those ports are free for it.
# Calico's Typha listens as the process calico-typha (what `ss -p` names); BIRD's BGP port is
# left out: its process (bird) is not named like the flow.
DAEMON_FLOWS = ("slurmctld", "slurmd", "slurmdbd", "slurmrestd", "kube-apiserver", "nfs",
                "kubelet", "etcd", "calico-typha")

# The slurmdbd database (MariaDB, reached over its unix socket as SLURM_USER).
SLURMDBD_DATABASE = "slurm_acct_db"


@dataclass(frozen=True)
class Key:
    """A cluster secret: its file name on nodes and in a secrets directory, its size, and
    the environment variable that hands it (base64) to `estate apply`, never argv."""
    file: str
    size: int
    env: str


MUNGE_KEY = Key("munge.key", 128, "ESTATE_MUNGE_KEY_B64")   # mungekey's default, 1024 bits
JWT_KEY = Key("jwt_hs256.key", 32, "ESTATE_JWT_KEY_B64")    # Slurm's JWT guide: 32 bytes
# slurmrestd's TLS front: its CA and certificates are derived from it (estate.provision.tls)
TLS_SEED = Key("tls-ca.seed", 32, "ESTATE_TLS_SEED_B64")
# the Kubernetes cluster CA and the bridge minter's keys (estate.provision.kube_pki): a seed
# of its own, so that rotating the TLS front's seed leaves the cluster's CA as it is (a
# cluster CA cannot change under a running cluster: docs/rotation.md)
CLUSTER_CA_SEED = Key("k8s-ca.seed", 32, "ESTATE_K8S_CA_SEED_B64")
KEYS = {"munge": MUNGE_KEY, "jwt": JWT_KEY, "tls": TLS_SEED, "cluster-ca": CLUSTER_CA_SEED}

# Artifact path prefixes that several stages select by.
GPU_DEVICES = "slurm/gpu-devices/"
# what a worker's slurmd restarts for (estate.model.slurm_files.slurmd_restart_facts)
SLURMD_RESTART = "slurm/slurmd-restart/"
IDENTITY = "common/identity.json"
MANIFESTS = "kubernetes/manifests/"
STATE_DROPIN = "slurm/systemd/slurmctld-state.conf"   # slurmctld waits for its shared state
HOOKS = "slurm/hooks/"              # the site's node hook scripts (slurmd runs them) ...
CTLD_HOOKS = "slurm/ctld-hooks/"    # ... and its power programs (slurmctld runs them) ...
HOOK_DIR = "/etc/slurm/hooks"       # ... and where the nodes have them
SEFF = "slurm/login/seff"   # the login nodes' seff (slurm_conf/seff.py.j2)
NVIDIA_MAJOR = 195   # the character major of /dev/nvidiaN (the driver's, and the lab's fakes)
# slurm.cgroup_mountpoint elsewhere than this: the workers bind their own cgroups there
DEFAULT_CGROUP_MOUNTPOINT = "/sys/fs/cgroup"
CGROUP_BIND = "slurm/cgroup/"
CGROUP_BIND_SBIN = "/usr/local/sbin/estate-slurm-cgroup"
OPENMPI = "slurm/openmpi/"          # Open MPI's parameters (workers, login nodes: docs/jobs.md)


@dataclass(frozen=True)
class Hook:
    """A node hook script the spec brings: slurm.conf's key, the file next to the spec, the
    spec path that names it, and where workers have it."""
    key: str
    name: str       # the installed file's name
    file: str
    where: tuple
    daemon: str = "slurmd"    # who runs it: slurmd on the workers, slurmctld on controllers

    @property
    def artifact(self) -> str:
        return (HOOKS if self.daemon == "slurmd" else CTLD_HOOKS) + self.name

    @property
    def installed(self) -> str:
        return f"{HOOK_DIR}/{self.name}"


def hooks(spec: Spec) -> list[Hook]:
    h = spec.slurm.hooks
    named: list[tuple[str, str, str | None, tuple[str, ...]]] = [
             ("Prolog", "prolog", h.prolog, ("prolog",)),
             ("Epilog", "epilog", h.epilog, ("epilog",)),
             ("TaskProlog", "task-prolog", h.task_prolog, ("task_prolog",))]
    if h.health_check:
        named.append(("HealthCheckProgram", "healthcheck", h.health_check.program,
                      ("health_check", "program")))
    out = [Hook(key, name, f, ("slurm", "hooks", *where)) for key, name, f, where in named
           if f]
    power = spec.slurm.power_saving
    if power:
        out += [Hook("ResumeProgram", "resume", power.resume_program,
                     ("slurm", "power_saving", "resume_program"), "slurmctld"),
                Hook("SuspendProgram", "suspend", power.suspend_program,
                     ("slurm", "power_saving", "suspend_program"), "slurmctld")]
    return out


def uses_jwt(spec: Spec) -> bool:
    """slurmrestd authenticates with JWT: slurm.conf then enables auth/jwt."""
    return spec.slurm.slurmrestd is not None


@dataclass(frozen=True)
class DaemonPath:
    """A path slurm.conf names (its keyword), and who owns it: for a file, its directory
    must exist and belong to `owner`, since the daemon writes it after dropping to it."""
    key: str
    path: str
    owner: str
    is_dir: bool


def slurm_daemon_paths(spec: Spec) -> tuple[DaemonPath, ...]:
    """slurm.conf's state, spool, pid and log paths, in the order slurm.conf prints them."""
    return (DaemonPath("StateSaveLocation", spec.slurm.state_dir, SLURM_USER, True),
            DaemonPath("SlurmdSpoolDir", "/var/spool/slurmd", "root", True),
            DaemonPath("SlurmctldPidFile", "/run/slurmctld.pid", "root", False),
            DaemonPath("SlurmdPidFile", "/run/slurmd.pid", "root", False),
            DaemonPath("SlurmctldLogFile", "/var/log/slurm/slurmctld.log", SLURM_USER, False),
            DaemonPath("SlurmdLogFile", "/var/log/slurm/slurmd.log", "root", False))


# slurmdbd.conf's pid and log files (slurmdbd drops to SlurmUser before it writes its log).
SLURMDBD_PATHS = (DaemonPath("PidFile", "/run/slurmdbd.pid", "root", False),
                  DaemonPath("LogFile", "/var/log/slurm/slurmdbd.log", SLURM_USER, False))


def jwt_key_path(spec: Spec) -> str | None:
    """Where slurmctld reads the JWT key (AuthAltParameters=jwt_key=...)."""
    return f"{spec.slurm.state_dir}/{JWT_KEY.file}" if uses_jwt(spec) else None
