"""slurmd, configless: it fetches slurm.conf and gres.conf from slurmctld.

GPUs: the rendered device list says whether the device files are the driver's
(mode "expect": checked, with the driver, and never faked) or the lab's (mode
"create": character devices 195:N made at the rendered path, also after reboots
through a tmpfiles.d entry).
"""
from __future__ import annotations

import json
import re
import shlex

from pyinfra import host
from pyinfra.api import OperationError, deploy, operation
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from estate.model.services import CGROUP_BIND, GPU_DEVICES, HOOKS, OPENMPI, SLURMD_RESTART
from roles._lib.facts import DeviceNode, FileText
from roles._lib import consumed, digest_of, digest_text, install, install_packages, put_text, \
    render_dir, runtime, service_current, slurm_configs

TMPFILES = "/etc/tmpfiles.d/estate-gpu.conf"
DROPIN = "/etc/systemd/system/slurmd.service.d/estate-configless.conf"
CONFIGLESS_DROPIN = """\
# Written by Estate: slurmd is configless here (it fetches slurm.conf from slurmctld,
# see --conf-server in /etc/default/slurmd), so the packaged unit's
# ConditionPathExists=/etc/slurm/slurm.conf must not stop it.
[Unit]
ConditionPathExists=
"""


# A device path as the spec types allow it: printed into a tmpfiles.d line, it must stay
# one field (tmpfiles has no shell quoting).
DEVICE_PATH = re.compile(r"/[A-Za-z0-9._+@/-]+")


def _device_path(path: str) -> str:
    if not DEVICE_PATH.fullmatch(path) or "/../" in path + "/" or \
            not path.startswith(("/run/", "/dev/")):
        raise OperationError(f"{host.name}: fake GPU device path {path!r} in the rendered "
                             "device list is not a plain path under /dev or /run (tmpfiles "
                             "c+ would replace whatever is there); re-render the spec")
    return path


def _device_state(path: str) -> str:
    return host.get_fact(DeviceNode, path=path)


@operation(is_idempotent=True)
def gpu_devices(devices: list[dict], create: bool):
    wrong = [d["path"] for d in devices
             if _device_state(d["path"]) != f"character special file "
                                            f"{d['major']:x}:{d['minor']:x}"]
    if create:
        if wrong:
            yield f"systemd-tmpfiles --create {shlex.quote(TMPFILES)}"
        else:
            host.noop("fake GPU device files present")
        return
    driver = host.get_fact(FileText, path="/proc/driver/nvidia/version")
    if wrong or not driver:
        raise OperationError(
            f"{host.name}: GPU device files {', '.join(wrong) or '(present)'} missing or wrong"
            f"{'' if driver else ' and no NVIDIA driver loaded (/proc/driver/nvidia/version)'};"
            " install and load the NVIDIA driver, or fix slurm.gpu_device_path in the spec")
    host.noop("GPU driver loaded and device files present")


def gpus() -> list[str]:
    paths = consumed(f"{GPU_DEVICES}*.json")
    for path in paths:
        install(path)
        doc = json.loads((render_dir() / path).read_bytes())
        create = doc["mode"] == "create"
        if create:
            lines = "".join(f"c+ {_device_path(d['path'])} 0666 root root - "
                            f"{int(d['major'])}:{int(d['minor'])}\n" for d in doc["devices"])
            put_text("# Fake GPU device files for the lab, written by Estate.\n" + lines,
                     TMPFILES, name="Fake GPU devices at boot")
        gpu_devices(name="GPU device files", devices=doc["devices"], create=create)
    return paths


@deploy("slurm_worker")
def slurm_worker() -> None:
    if not consumed("slurm/slurmd.env"):
        raise OperationError(f"{host.name}: has the slurm_worker role but consumes no "
                             "slurm/slurmd.env; re-render the spec")
    install_packages("slurm_worker", extras=tuple(runtime("slurm_worker_extras", ())))
    # the rendered settings slurmd restarts for: configless, it installs no slurm.conf
    restart = consumed(f"{SLURMD_RESTART}*")
    inputs = gpus() + slurm_configs() + ["slurm/slurmd.env"] + restart
    for path in ["slurm/slurmd.env"] + restart:
        install(path)
    for path in consumed(f"{HOOKS}*"):
        install(path)   # slurmd runs the site's hooks afresh each time: no restart for them
    for path in consumed(f"{OPENMPI}*"):
        install(path)   # Open MPI reads it at each mpirun (docs/jobs.md): no restart either
    cgroup = [install(p) for p in consumed(f"{CGROUP_BIND}*")]
    systemd.daemon_reload(name="systemd: slurmd's cgroup drop-in", _if=any_changed(*cgroup))
    inputs += consumed(f"{CGROUP_BIND}*")
    dropin = ""
    if not consumed("slurm/slurm.conf"):
        dropin = CONFIGLESS_DROPIN
        put_text(dropin, DROPIN, name="slurmd unit: configless")
    service_current(name="slurmd on the current settings", service="slurmd",
                    digest=digest_text(digest_of(inputs), dropin))
    systemd.service(name="Enable slurmd", service="slurmd", running=True, enabled=True)
