"""kubelet, kubeadm and kubectl from the rendered apt source, pinned by the rendered
preferences file (version from the spec). Nothing here names a version or a repository.

The repository is probed from the node first. Where it cannot be reached (these
machines reach only Debian's mirror) the role stops Unsupported before writing the
source, so that apt on the node keeps working; it never installs a stand-in.
"""
from __future__ import annotations

import posixpath
import re
import shlex
from shlex import quote

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.operations import apt, server

from roles._lib import Unsupported, consumed, install, install_packages, probe, render_dir
from roles._lib.kubernetes import reach_problem


def repository(list_text: str) -> tuple[str, str]:
    """(repository URL, keyring path) from a rendered one-line deb source."""
    m = re.search(r"^deb \[signed-by=(\S+)\] (\S+)", list_text, re.M)
    if not m:
        raise OperationError("the rendered apt source has no 'deb [signed-by=...] URL' line; "
                             "re-render the spec")
    return m.group(2), m.group(1)


def pinned_packages(pref_text: str) -> list[str]:
    return next(l.split(":", 1)[1].split() for l in pref_text.splitlines()
                if l.startswith("Package:"))


@deploy("k8s_packages")
def k8s_packages() -> None:
    lists, prefs = consumed("kubernetes/apt/*.list"), consumed("kubernetes/apt/*.pref")
    if not lists or not prefs:
        raise OperationError(f"{host.name}: has k8s_packages but no rendered apt source; "
                             "re-render the spec")
    url, keyring = repository((render_dir() / lists[0]).read_text())
    problem = reach_problem(probe, url)
    if problem:
        raise Unsupported(problem)
    install_packages("k8s_packages")
    if not probe(f"test -s {quote(keyring)} && echo ok"):
        key_url = url.rstrip("/") + "/Release.key"
        server.shell(name=f"Signing key of {url}", commands=[
            f"mkdir -p {quote(posixpath.dirname(keyring))} && curl -fsSL {quote(key_url)} "
            f"| gpg --dearmor -o {quote(keyring)}"])
    for p in lists + prefs:
        install(p)
    apt.update(name="apt update (Kubernetes source)")
    packages = pinned_packages((render_dir() / prefs[0]).read_text())
    apt.packages(name="Install the pinned Kubernetes packages", packages=packages,
                 no_recommends=True)
    if set(packages) - set(probe("apt-mark showhold").split()):
        server.shell(name="Hold them (upgrades go through the spec's version)",
                     commands=[f"apt-mark hold {shlex.join(packages)} >/dev/null"])
