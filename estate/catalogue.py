"""The role catalogue: what each deploy installs and runs, and what a host needs, in one table.

Everything that has to know "which Debian packages does X need" reads this module:

- the roles (``apt.packages(packages=packages("slurm_controller"))``),
- the inventory (apply phases and deploy order),
- the host install script (``scripts/install-deps.sh`` runs ``python3 -m estate.catalogue host``),
- the VM image recipe (the roles' packages are preinstalled there for time),
- the Slurm release roots of the namespace lab (``scripts/slurm-root.sh`` runs
  ``python3 -m estate.catalogue root``),
- ``estate doctor`` (a missing plugin or binary is named with the package that ships it).

Standard library only: install-deps.sh runs this before the virtual environment exists.

Slurm loads its plugins from shared objects at start-up, so a plugin that a rendered file
names but no installed package ships is a daemon that dies on a real machine. Debian ships
most plugins in slurm-wlm-basic-plugins and a few in packages of their own, which are only
*recommended* by the daemons; tests/live_slurm/test_plugin_packages.py asks dpkg
which package ships each plugin the renderer names and holds this table to it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

BASIC_PLUGINS = "slurm-wlm-basic-plugins"
# Plugins Debian ships outside slurm-wlm-basic-plugins (dpkg -S on bookworm, 22.05;
# tests/live_slurm/test_plugin_packages.py holds this to dpkg).
PLUGIN_PACKAGES = {
    "auth/jwt": "slurm-wlm-jwt-plugin",
    "accounting_storage/mysql": "slurm-wlm-mysql-plugin",
}
# Plugins no Debian package ships, and why (dpkg -S finds no gpu_nvml.so on bookworm's 22.05
# nor in trixie's 24.11 root; slurm_conf/keys/*.json list neither): doctor says so instead of
# naming a package.
UNPACKAGED_PLUGINS = {
    "gpu/nvml": "Debian builds Slurm without NVIDIA's NVML (non-free), so no package ships "
                "gpu_nvml.so; AutoDetect=nvml needs a Slurm built --with-nvml on the GPU "
                "nodes, or slurm.gres_autodetect: off",
}
# Where Debian installs them (dpkg -L slurm-wlm-basic-plugins).
PLUGIN_DIR = "/usr/lib/x86_64-linux-gnu/slurm-wlm"


def plugin_package(plugin: str) -> str:
    """The Debian package that ships a Slurm plugin such as 'auth/jwt'."""
    return PLUGIN_PACKAGES.get(plugin, BASIC_PLUGINS)


def plugin_file(plugin: str) -> str:
    """'auth/jwt' -> '/usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so' (Slurm's naming)."""
    return f"{PLUGIN_DIR}/{plugin.replace('/', '_')}.so"


# Open MPI, and PMIx for Debian's mpi_pmix plugins: they dlopen the unversioned
# /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so (strings mpi_pmix_v4.so, bookworm), which
# only libpmix-dev ships; with the library alone srun says "can not load PMIx library".
# libpmix-dev depends on the library, whose name differs by suite (bookworm libpmix2,
# trixie libpmix2t64), so the library is not named here.
# python3-mpi4py: MPI from Python, which the acceptance checks' MPI hello runs.
PMIX = ("openmpi-bin", "libpmix-dev", "python3-mpi4py")

# The plugin packages every node that runs a Slurm daemon or client needs: the rendered
# slurm.conf names auth/jwt whenever the spec has slurmrestd, and configless slurmds load it too.
SLURM_PLUGINS = (BASIC_PLUGINS, "slurm-wlm-jwt-plugin")


@dataclass(frozen=True)
class Role:
    name: str
    plane: str | None                  # "slurm", "kubernetes", or None: both planes use it
    packages: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    # Packages only some nodes of the role need, by what they do there (see packages()).
    extras: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Packages that come from a repository or suite the role adds itself (not the node's own
    # Debian release's).
    external: tuple[str, ...] = ()
    # Rendered Slurm files whose plugins this role's daemons or clients load (the keys of
    # estate.render.slurm.plugin_settings): its packages must ship those plugins.
    loads: tuple[str, ...] = ()
    # A role a spec may give a node group (nodes[].roles); the others follow from what a
    # node consumes (estate.provision.inventory.deploys_for).
    spec_role: bool = False
    # The Pulumi stage of a node with this spec role (see STAGES).
    stage: str | None = None


ROLES: dict[str, Role] = {r.name: r for r in (
    # directory: SSSD's LDAP back end and its NSS module where the spec has a directory;
    # login: its PAM module on the login nodes only (no Recommends: sssd-common's would
    # bring the AD, IPA and Kerberos back ends)
    Role("common", None, ("chrony",), ("chrony",),
         extras={"directory": ("sssd-ldap", "libnss-sss"), "login": ("libpam-sss",)}),
    Role("firewall", None, ("nftables",), ("nftables",)),
    Role("munge", "slurm", ("munge",), ("munge",)),
    Role("slurmdbd", "slurm", ("mariadb-server", "slurmdbd", "slurm-wlm-mysql-plugin",
                               *SLURM_PLUGINS), ("mariadb", "slurmdbd"),
         loads=("slurmdbd.conf",)),
    # curl: the bridge's token minter patches the tenants' Secrets over the API with it;
    # openssl: the minter renews its own certificate with it (estate-bridge-renew)
    Role("slurm_controller", "slurm", ("slurmctld", "slurm-client", *SLURM_PLUGINS),
         ("slurmctld",), extras={"minter": ("curl", "openssl")}, loads=("slurm.conf",),
         spec_role=True,
         stage="slurm-controllers"),
    # stunnel4: the TLS front, so that JWTs never cross a segment in clear
    Role("slurmrestd", "slurm", ("slurmrestd", "stunnel4", *SLURM_PLUGINS),
         ("slurmrestd", "stunnel@slurmrestd"), loads=("slurm.conf", "slurmrestd"), spec_role=True,
         stage="slurm-nodes"),
    # reframe: python3-venv, for ReFrame's own venv (reframe-hpc from PyPI: Debian has none)
    # python3: Estate's seff (slurm_conf/seff.py.j2) runs on it
    Role("slurm_login", "slurm", ("slurm-client", "python3", *SLURM_PLUGINS),
         loads=("slurm.conf",),
         extras={"pmix": PMIX, "reframe": ("python3-venv",)}, spec_role=True,
         stage="slurm-nodes"),
    # slurm-client: job scripts call srun, scontrol, sbatch and sacct on the node they run
    # on. pmix: Open MPI, and the PMIx library Debian's mpi_pmix plugin loads at run time
    Role("slurm_worker", "slurm", ("slurmd", "slurm-client", *SLURM_PLUGINS), ("slurmd",),
         extras={"pmix": PMIX},
         loads=("slurm.conf", "cgroup.conf", "gres.conf"), spec_role=True, stage="slurm-nodes"),
    Role("storage", None, (), ("nfs-server",),
         extras={"server": ("nfs-kernel-server",), "client": ("nfs-common",)},
         spec_role=True, stage="storage"),
    Role("k8s_node", "kubernetes", (), ("containerd",), external=("containerd",)),
    Role("k8s_packages", "kubernetes", ("curl", "gpg"),
         external=("kubelet", "kubeadm", "kubectl")),
    Role("gpu_node", "kubernetes", ("curl", "gpg"), external=("nvidia-container-toolkit",)),
    # telemetry (spec.monitoring): the node exporter on every node, Prometheus (which
    # ships promtool) and Alertmanager (0.25, which ships amtool) on the monitoring host
    Role("node_exporter", None, ("prometheus-node-exporter",), ("prometheus-node-exporter",)),
    Role("monitoring", None, ("prometheus", "prometheus-alertmanager"),
         ("prometheus", "prometheus-alertmanager")),
    # Estate's own Slurm exporter (estate/telemetry/slurm_exporter.py) on the controllers:
    # Python with Debian's prometheus_client, and the Slurm clients it reads Slurm with
    Role("slurm_exporter", "slurm", ("python3", "python3-prometheus-client", "slurm-client",
                                     *SLURM_PLUGINS), ("estate-slurm-exporter",)),
    # NVIDIA's DCGM exporter on the Slurm GPU workers (estate/render/dcgm_exporter.py): the
    # pinned image under Debian's podman, its GPUs through the CDI spec that nvidia-ctk
    # (NVIDIA's container toolkit base, from NVIDIA's repository) writes
    Role("dcgm_exporter", "slurm", ("podman", "curl", "gpg"), ("estate-dcgm-exporter",),
         external=("nvidia-container-toolkit-base",)),
    Role("k8s_control_plane", "kubernetes", spec_role=True, stage="k8s-control-plane"),
    Role("k8s_worker", "kubernetes", spec_role=True, stage="k8s-workers"),
)}
SPEC_ROLES = tuple(r.name for r in ROLES.values() if r.spec_role)

# The Pulumi program's stages, in order, each with the stages its nodes wait for: a node
# joins the first stage any of its spec roles is in (a controller that also runs
# slurmrestd is a controller). Storage comes first there, so that mounts find their
# exports; `estate apply` runs it last instead (PHASES), where an NFS-less kernel must not
# hold up the other roles.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("storage", ()),
    ("slurm-controllers", ("storage",)),
    ("slurm-nodes", ("storage", "slurm-controllers")),
    ("k8s-control-plane", ("storage",)),
    ("k8s-workers", ("storage", "k8s-control-plane")),
]

# Deploys run in phases so that cross-node order holds: the controller (and the slurmdbd it
# registers with) is up before any slurmd fetches its configuration.
PHASES: list[tuple[str, list[str]]] = [
    ("base", ["common", "firewall", "munge"]),
    ("control", ["slurmdbd", "slurm_controller", "slurmrestd", "slurm_login"]),
    # The workers, and beside them the exporters and Prometheus: what these watch is up by
    # now (slurmctld) or comes up on their own node before them (slurmd, in deploy order),
    # and a target that is not up yet is only scraped later. So the controller installs
    # Prometheus while the workers install slurmd (a lab apply: 119 -> 85 s, two phases in one).
    ("compute", ["slurm_worker", "node_exporter", "slurm_exporter", "dcgm_exporter",
                 "monitoring"]),
    # The Kubernetes plane: node prerequisites, then kubeadm init, then joins.
    ("kubernetes", ["k8s_node", "k8s_packages", "gpu_node"]),
    ("k8s_control", ["k8s_control_plane"]),
    # The control plane again (a no-op by then): workers take a join token from it.
    ("k8s_join", ["k8s_control_plane", "k8s_worker"]),
    # Last: where the kernel has no NFS the storage role fails, and nothing should wait on it.
    # Servers export before any client mounts: the storage deploy runs in both phases, with
    # the part of its work each phase does as its argument (PHASE_ARGS).
    ("storage", ["storage"]),
    ("storage_mounts", ["storage"]),
]
# Phases whose hosts run each operation in step: k8s_join's control plane writes the join
# token that the workers' next operations read in the same run.
LOCKSTEP_PHASES = frozenset({"k8s_join"})
# Arguments a deploy takes in a phase, (phase, deploy) -> keyword arguments; a deploy run
# outside `estate apply` (pyinfra CLI, molecule) takes its defaults and does all its work.
PHASE_ARGS: dict[tuple[str, str], dict[str, str | bool]] = {
    ("storage", "storage"): {"part": "exports"},
    ("storage_mounts", "storage"): {"part": "mounts"},
    # Initialised by now: the control plane hands out the join material (where asked to).
    ("k8s_join", "k8s_control_plane"): {"join": True},
}
ORDER = list(dict.fromkeys(d for _, ds in PHASES for d in ds))


def phases(storage_first: bool = False) -> list[tuple[str, list[str]]]:
    """PHASES, with the storage phases first where slurmctld's state lies on an export (HA
    controllers): a slurmctld started before its state is mounted runs on an empty local
    directory, and the mount then hides what it wrote."""
    if not storage_first:
        return PHASES
    store = [p for p in PHASES if p[1] == ["storage"]]
    return store + [p for p in PHASES if p not in store]

# What this machine needs to run the tiers and labs, beyond the roles' own packages:
# the namespace lab runs the Slurm roles' daemons on the host itself.
HOST_ROLES = ("munge", "slurmdbd", "slurm_controller", "slurmrestd", "slurm_login",
              "slurm_worker")
# The roles' extras the host's namespace labs use: the lab spec's MpiDefault=pmix
HOST_EXTRAS = ("pmix",)
HOST_TOOLS: dict[str, tuple[str, ...]] = {
    # lab nodes: docker engine, local base image, Vagrant's docker provider
    "containers": ("docker.io", "debootstrap", "vagrant", "openssh-client", "rsync"),
    # namespaces, firewall
    "network": ("iproute2", "iptables", "nftables", "procps", "psmisc", "util-linux"),
    # VM tier: real kernels for NFS (QEMU under TCG)
    "vm": ("qemu-system-x86", "qemu-utils"),
    # promtool and amtool, which check and test the rendered Prometheus rules and
    # Alertmanager routes (tests/unit); podman, whose options the rendered DCGM exporter
    # unit passes and which systemd-analyze verify finds as its ExecStart
    # (tests/unit/test_dcgm_exporter.py; bookworm's, as on the nodes)
    "telemetry": ("prometheus", "prometheus-alertmanager", "podman"),
    # .venv on Debian's own interpreter, built with PGO and LTO (scripts/venv.sh)
    "python": ("python3", "python3-venv"),
}
# What the lab's node image is built with (vagrant/image/build.sh), from HOST_TOOLS: `make lab`
# installs these first and builds the image while it installs the rest (install-deps.sh image).
IMAGE_TOOLS = ("docker.io", "debootstrap")
assert set(IMAGE_TOOLS) <= set(HOST_TOOLS["containers"])
# What only the test tiers use, installed by `make test` (scripts/install-deps.sh test) and
# never by `make lab`: headless Chromium from Debian, which loads the lab's status pages as
# a browser does and screenshots them (tests/lab, issue 39's "a real browser").
TEST_TOOLS: dict[str, tuple[str, ...]] = {
    "browser": ("chromium-headless-shell",),
    # a real directory for `estate import --directory` (tests/live_slurm/test_directory_import.py)
    "directory": ("slapd", "ldap-utils"),
}
# Slurm releases the namespace lab runs, by slurm.version: the Debian suite that ships each.
# The host's own suite (bookworm, 22.05) runs from the host; another release runs from a
# debootstrapped root of its suite (scripts/slurm-root.sh, estate/lab/netns.py), whose
# packages are those of ROOT_ROLES: the daemons and clients of one lab node.
# slurm_conf/keys/<version>.json must exist for every version here
# (tests/unit/test_slurm_version.py).
HOST_SUITE = "bookworm"
SLURM_SUITES = {"22.05": "bookworm", "24.11": "trixie"}
# Debian's next suite, and the Slurm it ships (forky: 26.05.5-1, December 2026). Estate
# does not render for it until its live tier runs there; its key table
# (slurm_conf/keys/next/, scripts/slurm-conf-keys.py --debs) already tells the importer
# and the checks what that release knows.
NEXT_SUITES = {"26.05": "forky"}
# The Slurm a spec targets until it sets slurm.version: the host suite's.
DEFAULT_SLURM = next(v for v, suite in SLURM_SUITES.items() if suite == HOST_SUITE)
ROOT_ROLES = ("munge", "slurmdbd", "slurm_controller", "slurmrestd", "slurm_login",
              "slurm_worker")
# Never installed: it takes over the slurmctld/slurmd alternatives with a build that dies.
CONFLICTS = ("slurm-wlm-emulator",)


def packages(*roles: str, extras: tuple[str, ...] = ()) -> list[str]:
    """Debian packages of these roles (plus the named extras), in first-seen order."""
    out: dict[str, None] = {}
    for name in roles:
        role = ROLES[name]
        out.update(dict.fromkeys(role.packages))
        for extra in extras:
            out.update(dict.fromkeys(role.extras.get(extra, ())))
    return list(out)


def host_packages() -> list[str]:
    """Everything `make lab` and `make test` need on this machine."""
    tools = [p for group in HOST_TOOLS.values() for p in group]
    return list(dict.fromkeys(packages(*HOST_ROLES, extras=HOST_EXTRAS) + tools))


def root_packages() -> list[str]:
    """What a release root for the namespace lab holds (scripts/slurm-root.sh): the lab
    node's roles, and every plugin package Debian splits out, so that the root's dpkg can
    say which package ships each plugin a rendered file names (test_plugin_packages.py)."""
    return list(dict.fromkeys(packages(*ROOT_ROLES) + list(PLUGIN_PACKAGES.values())))


def root_extras() -> list[str]:
    """The roles' extras a release root holds too (the lab spec's Open MPI and PMIx),
    installed by apt inside the root after debootstrap: debootstrap's own resolver takes
    no alternatives (trixie's libltdl-dev needs "automake | automaken") and fails them."""
    base = set(root_packages())
    return [p for p in packages(*ROOT_ROLES, extras=HOST_EXTRAS) if p not in base]


def _main(argv: list[str]) -> int:
    usage = ("usage: python3 -m estate.catalogue host | image-tools | test-tools | conflicts | root | root-extras | releases | "
             "suite VERSION | "
             "packages ROLE... [+EXTRA...] [--sep SEP]")
    sep = "\n"
    if "--sep" in argv:
        i = argv.index("--sep")
        sep, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    if not argv:
        print(usage, file=sys.stderr)
        return 2
    if argv[0] == "host":
        print(sep.join(host_packages()))
    elif argv[0] == "image-tools":
        print(sep.join(IMAGE_TOOLS))
    elif argv[0] == "test-tools":
        print(sep.join(p for group in TEST_TOOLS.values() for p in group))
    elif argv[0] == "conflicts":
        print(sep.join(CONFLICTS))
    elif argv[0] == "root":
        print(sep.join(root_packages()))
    elif argv[0] == "root-extras":
        print(sep.join(root_extras()))
    elif argv[0] == "releases":   # the Slurm releases that run from a root, not the host
        print(sep.join(v for v, suite in SLURM_SUITES.items() if suite != HOST_SUITE))
    elif argv[0] == "suite" and len(argv) == 2 and argv[1] in SLURM_SUITES:
        print(SLURM_SUITES[argv[1]])
    elif argv[0] == "packages":
        roles = [a for a in argv[1:] if not a.startswith("+")]
        unknown = [r for r in roles if r not in ROLES]
        if unknown or not roles:
            print(f"unknown roles: {unknown}; known: {sorted(ROLES)}", file=sys.stderr)
            return 2
        extras = tuple(a[1:] for a in argv[1:] if a.startswith("+"))
        print(sep.join(packages(*roles, extras=extras)))
    else:
        print(usage, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
