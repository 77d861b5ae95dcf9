"""slurmrestd and its TLS front in the namespace lab, and a client where a bridge starts.

The slurmrestd node runs slurmrestd on loopback (its rendered env) as an unprivileged
user, and stunnel on its segment address with the rendered configuration and a
certificate issued from the lab's CA (estate.provision.tls), as the slurmrestd role does
on a real node. A bridge's client is a Kubernetes node's namespace with its address on
the slurmrestd segment: what a tenant's pod leaves as (masqueraded by its node), so the
controller's rendered firewall judges it as it would a pod's call.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from estate.lab.driver import LabError
from estate.model import bridge
from estate.model.destinations import destination
from estate.model.services import KEYS
from estate.provision import tls
from estate.render.bridge import MINT_DIR, MINT_UNIT, TLS_CONF

NOBODY = "65534"     # slurmrestd refuses root and SlurmUser (the role: DynamicUser)


def rest_hosts(lab) -> list[str]:
    names = {n.name for n in lab.nodes()}
    return [h for h in lab.estate.role_hosts("slurmrestd") if h in names]


def segment_addresses(lab) -> dict[str, str]:
    """node -> its address on the slurmrestd segment, where that is not the lab's own."""
    rest = lab.slurm.slurmrestd
    if rest is None or rest.segment == lab.slurm.address_segment:
        return {}
    return {h: str(lab.estate.address(h, rest.segment)) for h in rest_hosts(lab)}


def tls_dir(lab) -> Path:
    return lab.state / "secret" / "tls"


def install_tls(lab, name: str) -> None:
    """The node's TLS front key and certificate, root only (stunnel reads them, then drops
    to its own user), and the CA a client checks it with."""
    d = tls_dir(lab)
    seed = d / tls.SEED
    if not seed.exists():      # the lab's own, like its munge and JWT keys
        d.mkdir(parents=True, mode=0o700, exist_ok=True)
        seed.write_bytes(os.urandom(KEYS["tls"].size))
        os.chmod(seed, 0o600)
    tls.ensure_tls(d, lab.estate)
    key, cert = tls.server_files(name)
    for src, dest, mode in ((key, bridge.TLS_KEY, 0o600), (cert, bridge.TLS_CERT, 0o644),
                            (tls.CA_CERT, bridge.TLS_CA, 0o644)):
        path = lab.host_path(name, dest)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(d / src, path)
        os.chmod(path, mode)


def up(lab, deadline: float) -> None:
    """slurmrestd and stunnel on each slurmrestd node of the lab, listening when it returns."""
    rest = lab.slurm.slurmrestd
    for name in rest_hosts(lab):
        extra = segment_addresses(lab).get(name)
        node = next(n for n in lab.nodes() if n.name == name)
        if extra:
            subprocess.run(["ip", "-n", node.netns, "addr", "add",
                            f"{extra}/{_prefixlen(lab, rest.segment)}", "dev", "eth0"],
                           check=True, capture_output=True, timeout=30)
        install_tls(lab, name)
        start_slurmrestd(lab, name)
        start_stunnel(lab, name)
        front = extra or node.addr
        lab.wait(deadline, f"slurmrestd's TLS front on {name}",
                 lambda: listening(lab, name, front, rest.port)
                 and listening(lab, name, bridge.LOOPBACK, rest.port), name, "stunnel4")


def start_slurmrestd(lab, name: str) -> None:
    """slurmrestd on loopback as the rendered env says, unprivileged (also after a JWT
    key's rotation: estate.lab.netns_rotate)."""
    env = lab._env(name, f"slurm/slurmrestd/{name}.env")
    lab.start(name, "slurmrestd", [
        "env", "SLURM_JWT=daemon", f"SLURMRESTD_LISTEN={env['SLURMRESTD_LISTEN']}",
        "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
        "slurmrestd", "-a", "rest_auth/jwt"])


def start_stunnel(lab, name: str) -> None:
    lab.start(name, "stunnel4", ["stunnel4", destination(f"{TLS_CONF}{name}.conf")])


def listening(lab, name: str, addr: str, port: int) -> bool:
    """Something accepts on addr:port in the node's namespace: this machine's ss there (a
    release root may lack iproute2; a probe connection would be a request in the log)."""
    node = next(n for n in lab.nodes() if n.name == name)
    proc = subprocess.run(["ip", "netns", "exec", node.netns, "ss", "-Htln",
                           f"src {addr}:{port}"], capture_output=True, text=True, timeout=10)
    return bool(proc.stdout.strip())


def client(lab, host: str, name: str | None = None) -> str:
    """A namespace (named `name`, default the host's) with the host's address on the
    slurmrestd segment, on the lab's bridge: a node outside the Slurm lab (a Kubernetes
    node), or a lab node's other address seen as a stranger. The namespace's name."""
    seg = lab.slurm.slurmrestd.segment
    addr = lab.estate.address(host, seg)
    if addr is None:
        raise LabError(f"{host} has no address on segment {seg!r}")
    return lab.add_namespace(name or host, f"{addr}/{_prefixlen(lab, seg)}")


def mint(lab) -> dict[str, Path]:
    """Run the rendered minter on the first controller; tenant -> its token file there."""
    ctl = lab.slurm.controllers[0]
    script = lab.artifacts[f"{MINT_DIR}{MINT_UNIT}"].content.decode()
    lab.run(ctl, ["sh", "-c", script], timeout=60)
    return {g.tenant: lab.host_path(ctl, f"{bridge.TOKEN_DIR}/{g.tenant}.token")
            for g in bridge.grants(lab.estate)}


def _prefixlen(lab, segment: str) -> int:
    return next(s.cidr.prefixlen for s in lab.estate.spec.segments if s.name == segment)

