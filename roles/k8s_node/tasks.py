"""Every Kubernetes-plane node: containerd from the rendered apt source and pin (the suite
and the version are the renderer's facts, not this role's) on the rendered config, the
rendered kernel module and sysctl files, swap off.

Loading modules and setting sysctls needs the node's own kernel: in a container (these
machines' lab) modules cannot be loaded and bridge sysctls may not exist. The role then
installs the files, leaves containerd running, and ends Unsupported with the reason:
never reported green.
"""
from __future__ import annotations

import shlex
from typing import Callable

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.operations import server, systemd

from roles._lib import probe, STAMPS, Unsupported, consumed, digest_of, install, render_dir, \
    run_when_changed, service_current


def kernel_problem(run: Callable[[str], str], modules: list[str], sysctls: dict[str, str]
                   ) -> str | None:
    """Why the rendered modules/sysctls cannot be in effect here (None if they are or can be).

    Shared by the role and its verify suite, so both say the same thing."""
    missing = [m for m in modules
               if (run(f"if test -d {shlex.quote('/sys/module/' + m)} || grep -qw -- "
                       f"{shlex.quote(m)} /proc/modules /proc/filesystems "
                       "/lib/modules/$(uname -r)/modules.builtin "
                       f"2>/dev/null || modprobe -n -q -- {shlex.quote(m)} 2>/dev/null; "
                       "then echo ok; fi")
                   or "").strip() != "ok"]
    bad = [f"{k} (want {v})" for k, v in sysctls.items()
           if (run(f"cat {shlex.quote(_proc_sys(k))} 2>/dev/null || echo absent")
               or "").strip() != v
           and (run(f"test -w {shlex.quote(_proc_sys(k))} && echo w") or "").strip() != "w"]
    if not missing and not bad:
        return None
    return (f"kernel {(run('uname -r') or '').strip()}: "
            + "; ".join(([f"modules {', '.join(missing)} neither loaded, known built-in "
                          "nor loadable"] if missing else [])
                        + ([f"cannot set sysctls {', '.join(bad)}"] if bad else []))
            + " (containers share the host's kernel; needs a VM or hardware node)")


def _proc_sys(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def rendered_modules(text: str) -> list[str]:
    return [l.strip() for l in text.splitlines() if l.strip() and not l.startswith("#")]


def rendered_sysctls(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in
            (l.partition("=") for l in text.splitlines() if "=" in l and not l.startswith("#"))}


def _one(pattern: str) -> str:
    paths = consumed(pattern)
    if len(paths) != 1:
        raise OperationError(f"{host.name}: consumes {len(paths)} files {pattern}, not one; "
                             "re-render the spec")
    return paths[0]


@deploy("k8s_node")
def k8s_node() -> None:
    config = _one("kubernetes/containerd/*.toml")
    sources = consumed("kubernetes/containerd/apt/*")
    for path in sources:
        install(path)
    # apt's candidate under the rendered pin; once per source, and again when it changes
    run_when_changed(name="containerd from its pinned source", stamp=f"{STAMPS}/containerd-apt",
                     digest=digest_of(sources),
                     command="apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive "
                             "apt-get install -y -q --no-install-recommends containerd")
    install(config)
    service_current(name="containerd on the rendered config", service="containerd",
                    digest=digest_of([config]))
    systemd.service(name="Enable containerd", service="containerd", running=True,
                    enabled=True)
    modules, sysctl = _one("kubernetes/node/modules.conf"), _one("kubernetes/node/sysctl.conf")
    install(modules)
    install(sysctl)
    # kubelet refuses to start with swap on.
    if probe("tail -n +2 /proc/swaps"):
        server.shell(name="Swap off (now and in fstab)",
                     commands=["swapoff -a && sed -i '/\\sswap\\s/s/^[^#]/#&/' /etc/fstab"])
    problem = kernel_problem(probe, rendered_modules((render_dir() / modules).read_text()),
                             rendered_sysctls((render_dir() / sysctl).read_text()))
    if problem:
        raise Unsupported(problem)  # after the ops above: containerd still gets applied
    run_when_changed(name="Load modules, apply sysctls", stamp=f"{STAMPS}/k8s-kernel",
                     digest=digest_of([modules, sysctl]),
                     command="systemctl restart systemd-modules-load && sysctl --system")
