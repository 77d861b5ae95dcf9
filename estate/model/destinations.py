"""Where each rendered artifact is installed on a node: the one table roles and verify share.

Paths are Debian's (bookworm): /etc/slurm for Slurm, /etc/default for unit
environments. Artifacts that are data for a role rather than configuration
(identity, GPU device lists, accounting scripts) are kept under /etc/estate so a
verifier can still compare them byte for byte with the rendered tree.
"""
from __future__ import annotations

from fnmatch import fnmatch

from estate.model.kubernetes import (AUTH_CONFIG, AUTH_CONFIG_PATH, KUBE_VIP_INIT_PATH, KUBE_VIP_MANIFEST, KUBE_VIP_PATH,
                                     SBIN, SYSTEMD_UNITS)
from estate.model.services import (CGROUP_BIND, CGROUP_BIND_SBIN, CTLD_HOOKS, GPU_DEVICES,
                                   HOOK_DIR, HOOKS, MANIFESTS, OPENMPI, SEFF,
                                   SLURMD_RESTART, STATE_DROPIN)

ESTATE_ETC = "/etc/estate"

# First match wins; patterns are fnmatch on the artifact path.
TABLE: list[tuple[str, str]] = [
    ("common/hosts", "/etc/hosts"),
    ("common/sssd/sssd.conf", "/etc/sssd/sssd.conf"),   # estate.model.directory
    ("common/nsswitch.conf", "/etc/nsswitch.conf"),
    ("network/nftables/*.nft", "/etc/nftables.conf"),
    ("slurm/slurmd.env", "/etc/default/slurmd"),
    (SLURMD_RESTART + "*", ESTATE_ETC + "/slurmd-restart.txt"),
    ("slurm/slurmrestd/*.env", "/etc/default/slurmrestd"),
    ("slurm/slurmrestd-tls/*.conf", "/etc/stunnel/slurmrestd.conf"),
    ("slurm/bridge/*.service", "/etc/systemd/system/{name}"),
    ("slurm/bridge/*.timer", "/etc/systemd/system/{name}"),
    ("slurm/bridge/*", "/usr/local/sbin/{name}"),
    (STATE_DROPIN, "/etc/systemd/system/slurmctld.service.d/estate-state.conf"),
    (SEFF, "/usr/local/bin/seff"),
    (CGROUP_BIND + "*.conf", "/etc/systemd/system/slurmd.service.d/estate-cgroup.conf"),
    (CGROUP_BIND + "*", CGROUP_BIND_SBIN),
    (OPENMPI + "*.conf", "/etc/openmpi/{name}"),   # Debian's Open MPI reads it there
    ("slurm/*.conf", "/etc/slurm/{name}"),
    (HOOKS + "*", HOOK_DIR + "/{name}"),
    (CTLD_HOOKS + "*", HOOK_DIR + "/{name}"),
    ("storage/exports/*.exports", "/etc/exports.d/estate.exports"),
    # Debian's units read ARGS from /etc/default; prometheus.yml finds rules/ beside it
    ("monitoring/slurm-exporter.py", "/usr/local/lib/estate/slurm_exporter.py"),
    ("monitoring/slurm-exporter/*.json", "/etc/estate/monitoring/slurm-exporter.json"),
    ("monitoring/dcgm-exporter/*.service", "/etc/systemd/system/estate-dcgm-exporter.service"),
    # the certificate expiry collector (estate.render.certificates): one script per node
    ("monitoring/cert-expiry/*.sh", "/usr/local/sbin/estate-cert-expiry"),
    ("monitoring/cert-expiry/*", "/etc/systemd/system/{name}"),
    ("monitoring/prometheus.yml", "/etc/prometheus/prometheus.yml"),
    ("monitoring/rules/*.yml", "/etc/prometheus/rules/{name}"),
    ("monitoring/prometheus.env", "/etc/default/prometheus"),
    ("monitoring/consoles/*.html", "/etc/prometheus/consoles/{name}"),
    ("monitoring/alertmanager.yml", "/etc/prometheus/alertmanager.yml"),
    ("monitoring/alertmanager.env", "/etc/default/prometheus-alertmanager"),
    ("monitoring/node-exporter.env", "/etc/default/prometheus-node-exporter"),
    ("storage/mounts/*.mount", "/etc/systemd/system/{name}"),
    ("kubernetes/containerd/*.toml", "/etc/containerd/config.toml"),
    ("kubernetes/containerd/apt/*.list", "/etc/apt/sources.list.d/estate-{name}"),
    ("kubernetes/containerd/apt/*.pref", "/etc/apt/preferences.d/estate-{name}"),
    ("kubernetes/nvidia/config.toml", "/etc/nvidia-container-runtime/config.toml"),
    # where nvidia-mig-parted's systemd service (nvidia-mig-manager.service) reads its config
    ("kubernetes/nvidia/mig-parted.yaml", "/etc/nvidia-mig-manager/config.yaml"),
    ("kubernetes/node/modules.conf", "/etc/modules-load.d/estate-kubernetes.conf"),
    ("kubernetes/node/sysctl.conf", "/etc/sysctl.d/90-estate-kubernetes.conf"),
    ("kubernetes/apt/*.list", "/etc/apt/sources.list.d/{name}"),
    ("kubernetes/apt/kubernetes.pref", "/etc/apt/preferences.d/kubernetes"),
    (AUTH_CONFIG, AUTH_CONFIG_PATH),
    (KUBE_VIP_PATH, KUBE_VIP_MANIFEST),
    (KUBE_VIP_INIT_PATH, KUBE_VIP_MANIFEST),
    (SYSTEMD_UNITS + "*", "/etc/systemd/system/{name}"),
    (SBIN + "*", "/usr/local/sbin/{name}"),
]


def destination(path: str) -> str:
    """Absolute install path for an artifact path such as 'slurm/slurm.conf'."""
    name = path.rsplit("/", 1)[-1]
    for pattern, dest in TABLE:
        if fnmatch(path, pattern):
            return dest.format(name=name)
    return f"{ESTATE_ETC}/{path}"


# Which deploy installs an artifact (first match wins); None: not these roles' business
# (e.g. Kubernetes manifests, applied by the Kubernetes tooling). "slurm_configs" is
# whichever of slurm_controller / slurm_worker / slurm_login the node has.
INSTALLERS: list[tuple[str, str]] = [
    ("common/*", "common"),
    ("network/nftables/*", "firewall"),
    ("slurm/slurmdbd.conf", "slurmdbd"),
    ("slurm/slurmrestd/*", "slurmrestd"),
    ("slurm/slurmrestd-tls/*", "slurmrestd"),
    ("slurm/bridge/*", "slurm_controller"),
    ("slurm/slurmd.env", "slurm_worker"),
    (GPU_DEVICES + "*", "slurm_worker"),
    (SLURMD_RESTART + "*", "slurm_worker"),
    (HOOKS + "*", "slurm_worker"),
    (CGROUP_BIND + "*", "slurm_worker"),
    (SEFF, "slurm_login"),
    (CTLD_HOOKS + "*", "slurm_controller"),
    ("slurm/accounting.sh", "slurm_controller"),
    ("slurm/accounts.cfg", "slurm_controller"),
    (STATE_DROPIN, "slurm_controller"),
    (OPENMPI + "*", "slurm_configs"),     # workers and login nodes (estate.render.jobs)
    ("slurm/*.conf", "slurm_configs"),
    ("reframe/*", "slurm_login"),
    ("storage/*", "storage"),
    ("monitoring/node-exporter.env", "node_exporter"),
    ("monitoring/cert-expiry/*", "node_exporter"),
    ("monitoring/slurm-exporter*", "slurm_exporter"),
    ("monitoring/dcgm-exporter/*", "dcgm_exporter"),
    ("monitoring/*", "monitoring"),
    ("kubernetes/containerd/*", "k8s_node"),
    ("kubernetes/nvidia/*", "gpu_node"),
    ("kubernetes/node/*", "k8s_node"),
    ("kubernetes/apt/*", "k8s_packages"),
    ("kubernetes/kubeadm/init.yaml", "k8s_control_plane"),
    (AUTH_CONFIG, "k8s_control_plane"),
    ("kubernetes/kube-vip/*", "k8s_control_plane"),
    (SYSTEMD_UNITS + "*", "k8s_control_plane"),
    (SBIN + "*", "k8s_control_plane"),
    (MANIFESTS + "*", "k8s_control_plane"),
    ("kubernetes/kubeadm/join/*", "kubeadm_join"),
]
SLURM_CONFIG_DEPLOYS = ("slurm_controller", "slurm_worker", "slurm_login")
# A join file is a worker's, or an extra control plane's.
KUBEADM_JOIN_DEPLOYS = ("k8s_worker", "k8s_control_plane")


def installer(path: str, deploys: list[str]) -> str | None:
    """The deploy (of those a node has) that installs this artifact there, if any."""
    for pattern, who in INSTALLERS:
        if fnmatch(path, pattern):
            if who in ("slurm_configs", "kubeadm_join"):
                group = SLURM_CONFIG_DEPLOYS if who == "slurm_configs" else KUBEADM_JOIN_DEPLOYS
                return next((d for d in group if d in deploys), None)
            return who if who in deploys else None
    return None
