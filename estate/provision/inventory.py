"""The inventory: every node of the spec with how to reach it and what to apply.

What a node gets is decided by what it consumes in MANIFEST.json (and its
spec roles), never by a list kept here per node. Runtime facts the roles need
(the JWT key path, the slurmdbd database) come from estate.model, which the
templates print too.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from estate.catalogue import ORDER, SLURM_SUITES, SPEC_ROLES
from estate.model import bridge
from estate.model.monitoring import gpu_job_map
from estate.model.slurm import state_mount
from estate.model.services import SLURM_USER, SLURMDBD_DATABASE, jwt_key_path
from estate.render.artifacts import MANIFEST
from estate.render.dcgm_exporter import image as dcgm_image
from estate.provision.kube_pki import ensure_bridge_credentials
from estate.provision.tls import ensure_tls
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate




@dataclass
class Target:
    name: str
    address: str | None
    plane: str | None
    roles: list[str]
    deploys: list[str]
    consumes: list[str] = field(default_factory=list)


def _consumed(manifest: dict, name: str) -> list[str]:
    return [p for p, info in manifest.items() if name in Hostlist.parse(info["consumers"])]


def deploys_for(roles: list[str], consumes: list[str], manifest: dict) -> list[str]:
    want = {"common"}
    if any(fnmatch(p, "network/nftables/*") for p in consumes):
        want.add("firewall")
    if any(manifest[p]["plane"] == "slurm" for p in consumes):
        want.add("munge")
    if "slurm/slurmdbd.conf" in consumes:
        want.add("slurmdbd")
    if any(fnmatch(p, "storage/*") for p in consumes):
        want.add("storage")  # NFS clients: the nodes the rendered mounts name
    if "monitoring/node-exporter.env" in consumes:
        want.add("node_exporter")   # every node, where the spec has monitoring
    if "monitoring/slurm-exporter.py" in consumes:
        want.add("slurm_exporter")  # the nodes its flow names: the controllers
    if any(fnmatch(p, "monitoring/dcgm-exporter/*") for p in consumes):
        want.add("dcgm_exporter")   # the Slurm GPU workers
    if "monitoring/prometheus.yml" in consumes:
        want.add("monitoring")      # the monitoring host
    if any(fnmatch(p, "kubernetes/containerd/*") for p in consumes):
        want |= {"k8s_node", "k8s_packages"}   # every Kubernetes-plane node
    if "kubernetes/containerd/config-gpu.toml" in consumes:
        want.add("gpu_node")
    want |= set(SPEC_ROLES) & set(roles)   # each spec role is a deploy of the same name
    return [d for d in ORDER if d in want]


def management_segment(estate: Estate) -> str:
    for seg in estate.spec.segments:
        if seg.purpose == "management":
            return seg.name
    return estate.spec.slurm.address_segment


def targets(estate: Estate, manifest: dict) -> list[Target]:
    seg = management_segment(estate)
    out = []
    for name in estate.nodes:
        group = estate.group_of(name)
        consumes = _consumed(manifest, name)
        addr = estate.address(name, seg)
        out.append(Target(name, str(addr) if addr else None, group.plane, list(group.roles),
                          deploys_for(list(group.roles), consumes, manifest), consumes))
    return out


def worker_extras(mpi_default: str) -> list[str]:
    """The slurm_worker role's extras: Open MPI and PMIx where MpiDefault's plugin loads
    libpmix at run time (Debian's mpi_pmix*.so dlopen it) and jobs launch Open MPI."""
    return ["pmix"] if mpi_default.startswith("pmix") else []


def runtime_facts(estate: Estate) -> dict:
    """Facts the roles need, from the derived model (the templates print the same values)."""
    spec = estate.spec
    shared = state_mount(estate)
    facts = {"slurm_state_dir": spec.slurm.state_dir, "slurm_user": SLURM_USER,
             # the Debian release whose packages are the spec's Slurm: Slurm roles refuse
             # a node of another release instead of installing a Slurm the files don't fit
             "slurm_version": spec.slurm.version,
             "slurm_suite": SLURM_SUITES[spec.slurm.version],
             "jwt_key": jwt_key_path(spec),
             # the mount that holds the state (HA controllers): mounted before slurmctld
             "slurm_state_mount": shared.path if shared else None,
             # what the workers install beyond slurmd and the clients (estate.catalogue)
             "slurm_worker_extras": worker_extras(spec.slurm.mpi_default)}
    if gpu_job_map(estate):
        # the image the Slurm GPU workers' unit runs, which their role pulls beforehand
        facts["dcgm_image"] = dcgm_image()
    if spec.slurm.accounting:
        facts |= {"slurmdbd_database": SLURMDBD_DATABASE, "slurmdbd_db_user": SLURM_USER}
    if bridge.has_minter(estate):
        # the minter's credentials (estate.provision.kube_pki): the first control plane puts
        # the cluster CA in place before kubeadm init, the controllers each kubeconfig
        facts |= {"kubernetes_ca": True, "bridge_kubeconfigs": {
            bridge.kubeconfig_secret(g.tenant): bridge.kubeconfig_path(g.tenant)
            for g in bridge.grants(estate)}}
    return {k: v for k, v in facts.items() if v}


def load_manifest(render_dir: Path) -> dict:
    path = Path(render_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: render the spec first "
                                f"(estate render SPEC -o {render_dir})")
    return json.loads(path.read_text())


@dataclass
class Connection:
    """How the provisioner reaches nodes: SSH to the management address by default."""
    user: str = "root"
    key: str | None = None
    strict_host_keys: bool = True
    known_hosts: str | None = None

    def data(self) -> dict:
        d = {"ssh_user": self.user}
        if self.key:
            d["ssh_key"] = self.key
        if not self.strict_host_keys:
            d["ssh_strict_host_key_checking"] = "no"
            d["ssh_known_hosts_file"] = self.known_hosts or "/dev/null"
        return d


def connection(lab: bool, ssh_key: str | None = None, ssh_user: str = "root",
               strict: bool = True) -> Connection:
    """The lab's own key as root without host-key checks, or what the user passed."""
    if lab:
        from estate.provision.secrets import LAB_SSH_KEY
        return Connection(user="root", key=str(LAB_SSH_KEY), strict_host_keys=False)
    return Connection(user=ssh_user, key=ssh_key, strict_host_keys=strict)


def host_data(t: Target) -> dict:
    """What differs per node; the rest is the `all` group's (shared_data)."""
    data = {"estate_node": t.name, "estate_plane": t.plane, "estate_roles": t.roles,
            "estate_deploys": t.deploys}
    if t.address:
        data["ssh_hostname"] = t.address
    return data


def shared_data(render_dir: Path, secrets_dir: Path | None, runtime: dict,
                conn: Connection | None) -> dict:
    """What every node shares: pyinfra's `all` group data, which it merges into each
    host.data below the host's own. conn None: a connector without SSH settings (docker)."""
    data = {"estate_render_dir": str(Path(render_dir).resolve()), "estate_runtime": runtime,
            **(conn.data() if conn else {})}
    if secrets_dir:
        data["estate_secrets_dir"] = str(Path(secrets_dir).resolve())
    return data


def groups(ts: list[Target]) -> dict[str, list[str]]:
    """Group name -> hosts: role_<spec role>, deploy_<deploy>, plane_<plane>."""
    out: dict[str, list[str]] = {}
    for t in ts:
        keys = [f"role_{r}" for r in t.roles] + [f"deploy_{d}" for d in t.deploys]
        keys.append(f"plane_{t.plane or 'shared'}")
        for k in keys:
            out.setdefault(k, []).append(t.name)
    return dict(sorted(out.items()))


@dataclass
class Inventory:
    """A pyinfra inventory as plain data: each host's own data, the `all` group's data
    and the groups (host names)."""
    hosts: list[tuple[str, dict]]
    data: dict
    groups: dict[str, list[str]] = field(default_factory=dict)

    def only(self, names) -> Inventory:
        """The same inventory cut down to these hosts (a phase's nodes)."""
        keep = set(names)
        return Inventory([(n, d) for n, d in self.hosts if n in keep], self.data,
                         {g: [n for n in ns if n in keep] for g, ns in self.groups.items()})

    def renamed(self, name) -> Inventory:
        """The same inventory with each host under name(host), e.g. @docker/<container>."""
        return Inventory([(name(n), d) for n, d in self.hosts], self.data,
                         {g: [name(n) for n in ns] for g, ns in self.groups.items()})

    def pyinfra(self):
        from pyinfra.api import Inventory as PyinfraInventory
        return PyinfraInventory((self.hosts, self.data),
                                **{g: (ns, {}) for g, ns in self.groups.items() if ns})


def select(ts: list[Target], limit: str | None) -> list[Target]:
    """Targets named by a hostlist expression (all when limit is None)."""
    if not limit:
        return ts
    wanted = Hostlist.parse(limit)
    chosen = [t for t in ts if t.name in wanted]
    unknown = set(wanted) - {t.name for t in ts}
    if unknown:
        raise ValueError(f"--limit names nodes the spec does not have: "
                         f"{Hostlist.from_names(sorted(unknown))}")
    return chosen


def inventory(ts: list[Target], render_dir: Path, secrets_dir: Path | None, runtime: dict,
              conn: Connection | None) -> Inventory:
    return Inventory([(t.name, host_data(t)) for t in ts],
                     shared_data(render_dir, secrets_dir, runtime, conn), groups(ts))


def pyinfra_inventory(estate: Estate, render_dir: Path, secrets_dir: Path | None,
                      conn: Connection, limit: str | None = None,
                      manifests: bool = True) -> Inventory:
    """The selected nodes' pyinfra inventory. `manifests`: whether the control-plane role
    applies the Kubernetes manifests (False where the Pulumi ConfigGroup owns them)."""
    ts = select(targets(estate, load_manifest(render_dir)), limit)
    runtime = runtime_facts(estate) | {"apply_manifests": manifests}
    if secrets_dir is not None:
        # the TLS front's files and the bridge minter's credentials, derived from the TLS
        # seed, for the nodes of this run
        ensure_tls(secrets_dir, estate, nodes=[t.name for t in ts])
        ensure_bridge_credentials(secrets_dir, estate, nodes=[t.name for t in ts])
    return inventory(ts, render_dir, secrets_dir, runtime, conn)
