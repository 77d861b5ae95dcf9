"""NVIDIA's DCGM exporter on the Slurm GPU workers (estate/render/dcgm_exporter.py says why
this way): Debian's podman, nvidia-ctk from NVIDIA's container toolkit repository (as
roles/gpu_node) to write the CDI spec through which podman hands the container the GPUs,
the pinned image pulled beforehand, and the rendered unit, which runs it.

Unsupported, before any operation, where the node cannot have it: no NVIDIA driver is
loaded (the lab's GPUs are device files without one: DCGM would have nothing to read), or,
with a driver, NVIDIA's repository or the image's registry cannot be reached.
"""
from __future__ import annotations

import shlex
from typing import Callable

from pyinfra.api import OperationError, deploy
from pyinfra.operations import apt, server, systemd
from pyinfra.operations.util import any_changed

from roles._lib import (STAMPS, Unsupported, consumed, digest_of, digest_text, install,
                        install_packages, probe, run_when_changed, runtime, service_current)
from roles._lib.kubernetes import reach_problem
from roles._lib.nvidia import DRIVER, REPO, driver_problem, toolkit_source

SERVICE = "estate-dcgm-exporter"
# nvidia-ctk only (the base package: CDI needs no runtime hook). Pinned below 1.18, whose
# CDI specs need newer CDI schema versions (annotations: v0.6.0; 1.19.1 writes v0.7.0 by
# default) than bookworm's podman 4.3.1 reads (NVIDIA/nvidia-container-toolkit#1262,
# #1860, #1940; the 1.19.1 release notes' known issue).
TOOLKIT = "nvidia-container-toolkit-base"
TOOLKIT_VERSION = "1.17.8-1"
CDI_SPEC = "/etc/cdi/nvidia.yaml"


def registry(image: str) -> str:
    """The registry an image reference pulls from, as a URL reach_problem can try."""
    return f"https://{image.split('/', 1)[0]}"


def problems(run: Callable[[str], str], image: str) -> list[str]:
    """Why this node cannot run the exporter (none: it can); run is a node's shell. The
    driver is looked for first: a node without one contacts no outside host at all."""
    missing = driver_problem(run)
    if missing:
        return [missing]
    return [p for p in (reach_problem(run, REPO), reach_problem(run, registry(image))) if p]


@deploy("dcgm_exporter")
def dcgm_exporter() -> None:
    units, image = consumed("monitoring/dcgm-exporter/*.service"), runtime("dcgm_image")
    if len(units) != 1 or not image:
        raise OperationError("the DCGM exporter needs its unit and image from the rendered "
                             "tree; re-render the spec")
    found = problems(probe, image)
    if found:
        raise Unsupported("; ".join(found))
    install_packages("dcgm_exporter")
    toolkit_source()
    apt.packages(name="Install nvidia-ctk (NVIDIA container toolkit base)",
                 packages=[f"{TOOLKIT}={TOOLKIT_VERSION}"], update=True, no_recommends=True)
    # a new driver has other libraries to hand the container: a new spec, and a restart
    driver = digest_text(probe(f"cat {shlex.quote(DRIVER)}"), TOOLKIT_VERSION)
    run_when_changed(name="CDI spec of this node's GPUs",
                     command=f"nvidia-ctk cdi generate --output={shlex.quote(CDI_SPEC)}",
                     stamp=f"{STAMPS}/dcgm-exporter-cdi", digest=driver)
    # the unit never pulls (--pull=never): a restart does not depend on the registry
    if not probe(f"podman image exists {shlex.quote(image)} && echo ok"):
        server.shell(name="Pull the DCGM exporter's image",
                     commands=[f"podman pull {shlex.quote(image)}"])
    written = install(units[0])
    systemd.daemon_reload(name="systemd: the DCGM exporter's unit", _if=any_changed(written))
    service_current(name="the DCGM exporter on the current unit and GPUs", service=SERVICE,
                    digest=digest_text(digest_of(units), image, driver))
    systemd.service(name="Enable the DCGM exporter", service=SERVICE, running=True,
                    enabled=True)
