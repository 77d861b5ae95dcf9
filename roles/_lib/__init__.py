"""What every role shares: reading the rendered tree, installing artifacts, secrets.

Roles learn everything from host.data set by the provisioner
(estate.provision.inventory). The same for every node, as the `all` group's data
(pyinfra merges it into host.data):

- ``estate_render_dir``: the rendered tree with its MANIFEST.json (local path)
- ``estate_secrets_dir``: where the munge and JWT keys are (local path; the
  keys are uploaded, never read into op names, logs or output)
- ``estate_runtime``: facts read from the rendered files (see inventory.py)

Each node's own:

- ``estate_node``: the node's name in the spec (defaults to the pyinfra host name)
- ``estate_deploys``, ``estate_roles``, ``estate_plane``: what it gets, and why
- under Pulumi (estate.pulumi.step) only: ``estate_join`` (the join material a
  joining node's step was handed), ``estate_join_out`` (where the first control plane
  writes the join material it hands out) and ``estate_revoke_join`` (the public id of
  the join token the control plane deletes)

A role installs what MANIFEST.json says this node consumes; it never decides
on its own which files a node needs.
"""
from __future__ import annotations

import hashlib
import json
import shlex
from functools import lru_cache
from pathlib import Path

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, QuoteString, StringCommand, operation
from pyinfra.facts.files import Sha256File
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import apt, files

from estate.catalogue import ROLES, packages
from estate.model.destinations import destination
from estate.spec.hostlist import Hostlist
from roles._lib.facts import ContainerVirt, FileText, OsCodename, Probe, ServiceActive

MANIFEST = "MANIFEST.json"


class Unsupported(OperationError):
    """This node cannot have the role on this machine (e.g. no kernel NFS in a container).

    Raised by a deploy before any operation; the provisioner reports it as
    unsupported, never as success and never hidden."""


def node() -> str:
    return host.data.get("estate_node") or host.name


def render_dir() -> Path:
    value = host.data.get("estate_render_dir")
    if not value:
        raise OperationError(f"{host.name}: no estate_render_dir in host data; run through "
                             "`estate apply` or pass --data estate_render_dir=DIR")
    return Path(value)


def secrets_dir() -> Path:
    value = host.data.get("estate_secrets_dir")
    if not value:
        raise OperationError(f"{host.name}: no estate_secrets_dir in host data")
    return Path(value)


def runtime(key: str, default=None):
    return (host.data.get("estate_runtime") or {}).get(key, default)


@lru_cache(maxsize=8)
def _manifest(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise OperationError(f"{path} is missing: render the spec first (estate render)")


@lru_cache(maxsize=256)
def _consumers(expr: str) -> Hostlist:
    return Hostlist.parse(expr)


def consumed(pattern: str = "*") -> list[str]:
    """Artifact paths (fnmatch pattern) this node consumes, in manifest order."""
    from fnmatch import fnmatch
    manifest = _manifest(str(render_dir() / MANIFEST))
    me = node()
    return [p for p, info in manifest.items()
            if fnmatch(p, pattern) and me in _consumers(info["consumers"])]


def artifact_info(path: str) -> dict:
    return _manifest(str(render_dir() / MANIFEST))[path]


def _checked_source(path: str) -> str:
    """The rendered file, after checking it is the one MANIFEST.json describes."""
    src = render_dir() / path
    want = artifact_info(path)["sha256"]
    if hashlib.sha256(src.read_bytes()).hexdigest() != want:
        raise OperationError(f"{src} does not match {MANIFEST}: the rendered tree was "
                             "edited or half-copied; re-render it with `estate render`")
    return str(src)


def _owner(spec: str) -> tuple[str, str]:
    user, _, group = spec.partition(":")
    return user, group or user


def install(path: str, dest: str | None = None, **kwargs):
    """Upload one consumed artifact to its destination with the manifest's owner and mode."""
    info = artifact_info(path)
    user, group = _owner(info["owner"])
    dest = dest or destination(path)
    if dest == "/etc/hosts":
        return put_in_place(name=f"Install {path} -> {dest}", src=_checked_source(path),
                            dest=dest, **kwargs)
    return files.put(name=f"Install {path} -> {dest}", src=_checked_source(path), dest=dest,
                     user=user, group=group, mode=info["mode"], create_remote_dir=True,
                     **kwargs)


def install_secret(secret: str, dest: str, owner: str, mode: str = "0400", **kwargs):
    """Upload a key from the secrets directory. The op name shows paths only."""
    src = secrets_dir() / secret
    if not src.is_file():
        raise OperationError(f"secret {secret!r} is missing from {secrets_dir()}: create the "
                             "secrets (estate lab up does) or point estate_secrets_dir at them")
    user, group = _owner(owner)
    return files.put(name=f"Install secret {secret} -> {dest}", src=str(src), dest=dest,
                     user=user, group=group, mode=mode, create_remote_dir=True, **kwargs)


@operation()
def put_in_place(src: str, dest: str):
    """Like files.put, but rewrites dest in place rather than renaming over it.

    Docker bind-mounts /etc/hosts into containers: a rename onto it fails with
    EBUSY. Writing through the existing inode works everywhere.
    """
    local = hashlib.sha256(Path(src).read_bytes()).hexdigest()
    if host.get_fact(Sha256File, path=dest) == local:
        host.noop(f"{dest} is up to date")
        return
    tmp = host.get_temp_filename(dest)
    yield FileUploadCommand(src, tmp, remote_temp_filename=tmp)
    yield StringCommand("cat", QuoteString(tmp), ">", QuoteString(dest), "&&", "rm", "-f",
                        QuoteString(tmp))


def install_packages(role: str, extras: tuple[str, ...] = ()) -> None:
    """The role's Debian packages (estate.catalogue), refreshing apt's lists only when one is
    missing: a node that has them all (a lab image, a second run) does no apt-get update."""
    if ROLES[role].plane == "slurm":
        problem = suite_problem(host.name, host.get_fact(OsCodename), runtime("slurm_suite"),
                                runtime("slurm_version"))
        if problem:
            raise OperationError(problem)
    wanted = packages(role, extras=extras)
    have = host.get_fact(DebPackages) or {}
    if all(p in have for p in wanted):
        host.noop(f"{role}: packages present ({', '.join(wanted)})")
        return
    # no Recommends: slurmd's would bring every slurm-wlm-*-dev header package and the
    # elasticsearch, influxdb, hdf5, rrd and rsmi plugins; the catalogue names what is needed
    apt.packages(name=f"Install {role} packages", packages=wanted, update=True,
                 cache_time=3600, no_recommends=True)


def suite_problem(name: str, codename: str, suite: str | None, version: str | None) -> str:
    """Why this node cannot get the spec's Slurm from its own Debian release ('' if it can):
    apt would install that release's Slurm, and daemons of another release than the
    rendered files target refuse them or each other."""
    if not suite or not codename or codename == suite:
        return ""
    return (f"{name}: runs Debian {codename}, but the spec targets Slurm {version}, which is "
            f"Debian {suite}'s; install {suite} on this node, or set slurm.version to the "
            f"Slurm of {codename} (estate.catalogue.SLURM_SUITES)")


def in_container() -> bool:
    """True inside a container (systemd-detect-virt): the clock and kernel are the host's."""
    return host.get_fact(ContainerVirt) not in ("", "none")


def probe(snippet: str) -> str:
    """The answer of a diagnostic snippet written in a role (see facts.Probe)."""
    return host.get_fact(Probe, snippet=snippet)


@operation(is_idempotent=True)
def run_when_changed(command: str, stamp: str, digest: str):
    """Run command until it succeeds once per digest (e.g. of the files it applies).

    The stamp records the digest of the last successful run, so a failed run is
    retried next time and an unchanged input is not re-applied (no change reported).
    command is a shell command line whose values are already quoted (shlex.quote);
    stamp and digest are quoted here.
    """
    if host.get_fact(FileText, path=stamp) == digest:
        host.noop(f"{command} already applied for {digest[:12]}")
        return
    yield StringCommand("sh", "-c", QuoteString(
        f"{command} && mkdir -p {shlex.quote(str(Path(stamp).parent))} && "
        f"echo {shlex.quote(digest)} > {shlex.quote(stamp)}"))


def digest_of(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.encode() + b"\0" + artifact_info(p)["sha256"].encode())
    return h.hexdigest()


@operation(is_idempotent=True)
def wait_until(check: str, what: str, timeout: int = 60):
    """Wait until a shell check succeeds on the node; fail with `what` if it never does.

    check is a shell command line whose values are already quoted (shlex.quote).

    Yields no command, so waiting never counts as a change.
    """
    import time
    deadline = time.monotonic() + timeout
    while True:
        if probe(f"if {check} >/dev/null 2>&1; then echo ready; fi") == "ready":
            host.noop(f"{what} is ready")
            return
        if time.monotonic() > deadline:
            raise OperationError(f"{host.name}: {what} not ready after {timeout} s "
                                 f"(check: {check})")
        time.sleep(1)
    yield  # an operation is a generator


def put_text(text: str, dest: str, mode: str = "0644", **kwargs):
    """A small role-owned file (unit drop-ins, tmpfiles entries) from a string."""
    from io import BytesIO
    return files.put(src=BytesIO(text.encode()), dest=dest, user="root", group="root",
                     mode=mode, create_remote_dir=True, **kwargs)


STAMPS = "/var/lib/estate/applied"


def digest_text(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()


def secret_digest(secret: str) -> str:
    """A one-way digest of a key, so that a new key restarts its daemon. Never the key."""
    return hashlib.sha256(b"estate-secret\0" + (secrets_dir() / secret).read_bytes()).hexdigest()


@operation(is_idempotent=True)
def service_current(service: str, digest: str, action: str = "restart"):
    """Keep a service running on the inputs whose digest is given.

    The digest of the inputs it last (re)started on is stamped on the node, so a run
    that failed after changing a file but before the restart still restarts the
    service next time, and an unchanged service is left alone (no change reported).
    """
    stamp = f"{STAMPS}/{service}"
    if host.get_fact(FileText, path=stamp) == digest and \
            host.get_fact(ServiceActive, unit=service):
        host.noop(f"{service} is running on its current inputs")
        return
    q_service = shlex.quote(service)
    q_stamp = shlex.quote(stamp)
    yield StringCommand("sh", "-c", QuoteString(
        f"systemctl daemon-reload && systemctl {shlex.quote(action)} {q_service} && "
        # Type=simple units report success before the daemon can die on its config.
        f"sleep 1 && systemctl is-active --quiet {q_service} && "
        f"mkdir -p {shlex.quote(STAMPS)} && echo {shlex.quote(digest)} > {q_stamp} || "
        f"{{ journalctl -u {q_service} -n 5 --no-pager -o cat >&2; exit 1; }}"))


def slurm_configs(installed: list | None = None) -> list[str]:
    """Install the consumed Slurm configs under /etc/slurm, except slurmdbd's (the slurmdbd
    role's); shared by the controller, worker and login roles, so no role imports another.
    installed, where given, gets each install's operation (whether it changed a file)."""
    paths = [p for p in consumed("slurm/*.conf")
             if p != "slurm/slurmdbd.conf" and destination(p).startswith("/etc/slurm/")]
    for p in paths:
        op = install(p)
        if installed is not None:
            installed.append(op)
    return paths
