"""NVIDIA's DCGM exporter on the Slurm GPU workers, with the HPC job mapping: one systemd
unit for them all (`monitoring/dcgm-exporter/estate-dcgm-exporter.service`), only where the
spec monitors.

Design. NVIDIA ships dcgm-exporter as a container image (or Go source that links DCGM's
libraries, which come from NVIDIA's CUDA repository); Debian packages neither it, nor
DCGM, nor the NVIDIA container toolkit, and the Slurm workers run no container runtime.
Debian 12 does package podman (4.3.1), a daemonless runtime that systemd can supervise
like any service. So each Slurm GPU worker runs:

- the SAME image the vendored Kubernetes manifest pins (k8s/dcgm-exporter/, read here:
  one pin for both planes, upgraded with that file),
- under podman, as the unit `estate-dcgm-exporter` (in `podman generate systemd --new`'s
  form: Type=notify through conmon, the container removed when the unit stops),
- with the GPUs through CDI (`--device nvidia.com/gpu=all`; the spec is written by
  `nvidia-ctk cdi generate` from NVIDIA's container toolkit, which roles/dcgm_exporter
  installs from NVIDIA's repository as roles/gpu_node does), not through the toolkit's
  runtime hook, so the container needs no privileges to see them,
- with the manifest's own capabilities (drop ALL, add SYS_ADMIN: upstream needs it for the
  profiling metrics, DCGM_FI_PROF_*),
- on the host network, listening at the `dcgm-exporter` flow's port (every address, as the
  node exporter does), which the node's firewall opens to the monitoring host only,
- with Estate's job mapping (JOB_MAP_DIR, kept by the Prolog and Epilog) bind-mounted read
  only and passed as `--hpc-job-mapping-dir`: the exporter then labels each GPU's series
  with `hpc_job`, which the rules join to `slurm_job_info` (estate.render.monitoring).

Building the exporter from source instead would need Go and DCGM's libraries from NVIDIA's
CUDA repository on every worker, and a second version to keep in step with the image.
"""
from __future__ import annotations

from functools import lru_cache

from estate.model import kubernetes as k8s
from estate.model.monitoring import JOB_MAP_DIR, JOBS, targets
from estate.model.slurm import gpu_workers
from estate.render.artifacts import Artifact
from estate.render.gpu_addons import vendored
from estate.render.templates import RenderError, unit_word
from estate.spec.hostlist import hostlist_of
from estate.spec.resolved import Estate

UNITS = "monitoring/dcgm-exporter/"
SERVICE = "estate-dcgm-exporter"        # the unit, and the container's name
UNIT = f"{UNITS}{SERVICE}.service"
PODMAN = "/usr/bin/podman"
CDI_DEVICES = "nvidia.com/gpu=all"      # every GPU of the CDI spec nvidia-ctk generates
RUN = "/run/"
PLANE = "slurm"


@lru_cache(maxsize=1)
def upstream_container() -> dict:
    """The exporter's container in the vendored DaemonSet (refused unless the pinned file)."""
    [ds] = [d for d in vendored(k8s.DCGM_MANIFEST, k8s.DCGM_SHA256) if d.get("kind") == "DaemonSet"]
    [c] = ds["spec"]["template"]["spec"]["containers"]
    return c


def image() -> str:
    """The image reference the Kubernetes manifest pins, so both planes run one build."""
    return upstream_container()["image"]


def capability_args() -> list[str]:
    """The manifest's capabilities as podman's options, drops first (as Kubernetes applies
    them): upstream drops ALL and adds SYS_ADMIN for the profiling metrics."""
    caps = (upstream_container().get("securityContext") or {}).get("capabilities") or {}
    return ([f"--cap-drop={c}" for c in caps.get("drop", [])] +
            [f"--cap-add={c}" for c in caps.get("add", [])])


def runtime_directory() -> str:
    """JOB_MAP_DIR as systemd's RuntimeDirectory= names it (relative to /run): the unit
    creates it before the bind mount needs it and keeps it (and the jobs' files) across
    restarts."""
    if not JOB_MAP_DIR.startswith(RUN):
        raise RenderError(f"the DCGM job map {JOB_MAP_DIR} must lie under {RUN}")
    return JOB_MAP_DIR.removeprefix(RUN)


@lru_cache(maxsize=1)
def _container_args() -> tuple[str, ...]:
    """Every node's part of the command line: podman's options and the image."""
    return ("run", CIDFILE, "--cgroups=no-conmon", "--rm", "--sdnotify=conmon", "--replace",
            "--detach", f"--name={SERVICE}", "--network=host",
            "--pull=never",   # roles/dcgm_exporter pulls it beforehand
            f"--device={CDI_DEVICES}", *capability_args(),
            f"--volume={JOB_MAP_DIR}:{JOB_MAP_DIR}:ro", image())


# %t and %n are specifiers on purpose: the one word that carries them is Estate's own
CIDFILE = "--cidfile=%t/%n.ctr-id"


@lru_cache(maxsize=1)
def _unit_template() -> str:
    """The unit with {listen} where --address= goes."""
    def word(w: str) -> str:
        return w if w == CIDFILE else unit_word(w, UNITS).replace("{", "{{").replace("}", "}}")
    start = " ".join(word(w) for w in _container_args())
    job_map = word(f"--hpc-job-mapping-dir={JOB_MAP_DIR}")
    return f"""\
# Generated by Estate: NVIDIA's DCGM exporter on this Slurm GPU worker, the image of
# k8s/dcgm-exporter/dcgm-exporter.yaml under podman, with Slurm's job mapping. Do not edit.
[Unit]
Description=NVIDIA DCGM exporter with the Slurm job mapping (Estate)
Wants=network-online.target
After=network-online.target
RequiresMountsFor=%t/containers

[Service]
Environment=PODMAN_SYSTEMD_UNIT=%n
RuntimeDirectory={word(runtime_directory())}
RuntimeDirectoryPreserve=yes
Restart=on-failure
RestartSec=10
TimeoutStopSec=70
ExecStart={PODMAN} {start} {{listen}} {job_map}
ExecStop={PODMAN} stop --ignore --time=10 {CIDFILE}
ExecStopPost={PODMAN} rm --force --ignore --time=10 {CIDFILE}
Type=notify
NotifyAccess=all

[Install]
WantedBy=multi-user.target
"""


def unit_text(listen: str) -> str:
    return _unit_template().format(listen=unit_word(f"--address={listen}", UNIT))


def render_dcgm_exporter(estate: Estate, source: str = "") -> list[Artifact]:
    """One unit for the Slurm GPU workers the `dcgm` scrape job reaches; none without
    spec.monitoring. It listens on the flow's port on every address, as the node exporter
    does: the node's firewall admits the monitoring host alone there (the flow matrix),
    and one file serves every worker (one per node was 10,000 files to write at 10,000
    GPU workers, and made `estate render` 2.5 times slower)."""
    if estate.spec.monitoring is None:
        return []
    workers = gpu_workers(estate)
    job = next(j for j in JOBS if j.flow == "dcgm-exporter")
    found = [(node, addr) for node, addr, _ in targets(estate, job) if node in workers]
    if not found:
        return []
    port = found[0][1].rsplit(":", 1)[1]
    return [Artifact(UNIT, unit_text(f":{port}").encode(),
                     hostlist_of([node for node, _ in found]), PLANE)]
