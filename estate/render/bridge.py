"""The bridge's Slurm-side files (estate.model.bridge): slurmrestd's TLS front on each
slurmrestd node, and the token minter on the controllers. The grant's associations are
in accounting.sh (estate.render.slurm); its Kubernetes objects in the tenant's manifest
(estate.render.kubernetes)."""
from __future__ import annotations

from estate.model import bridge
from estate.render.artifacts import Artifact
from estate.render.templates import render_template
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

PLANE = "slurm"
TLS_CONF = "slurm/slurmrestd-tls/"      # <node>.conf: stunnel's, per slurmrestd node
MINT_DIR = "slurm/bridge/"              # the minter's script and systemd units
MINT_UNIT = "estate-bridge-mint"
# curl's limits on one patch of a tenant's Secret: an API server that does not answer in
# time is reported and skipped (the token stays on the controller), not waited for.
CONNECT_TIMEOUT_S, MAX_TIME_S = 5, 20


def render_bridge(estate: Estate, source: str = "") -> list[Artifact]:
    return tls_fronts(estate, source) + minter(estate, source)


def tls_fronts(estate: Estate, source: str) -> list[Artifact]:
    rest = estate.spec.slurm.slurmrestd
    if rest is None:
        return []
    out = []
    for name in estate.role_hosts("slurmrestd"):
        ctx = {"source": source, "node": name, "segment": rest.segment,
               "addr": str(estate.address(name, rest.segment)), "port": rest.port,
               "loopback": bridge.LOOPBACK, "cert": bridge.TLS_CERT, "key": bridge.TLS_KEY,
               "min_version": bridge.TLS_MIN_VERSION, "user": bridge.TLS_USER}
        out.append(Artifact(f"{TLS_CONF}{name}.conf",
                            render_template("slurm_conf/slurmrestd-tls.conf.j2", ctx),
                            Hostlist.from_names([name]), PLANE))
    return out


def minter(estate: Estate, source: str) -> list[Artifact]:
    if not bridge.has_minter(estate):
        return []
    ctl = Hostlist.from_names(bridge.minter_hosts(estate))
    ctx = minter_context(estate, source)
    return [Artifact(f"{MINT_DIR}{MINT_UNIT}", render_template(
                "slurm_conf/bridge-mint.sh.j2", ctx), ctl, PLANE, mode=0o755),
            Artifact(f"{MINT_DIR}{MINT_UNIT}.service", render_template(
                "slurm_conf/bridge-mint.service.j2", ctx), ctl, PLANE),
            Artifact(f"{MINT_DIR}{MINT_UNIT}.timer", render_template(
                "slurm_conf/bridge-mint.timer.j2", ctx), ctl, PLANE)]


def minter_context(estate: Estate, source: str) -> dict:
    """What the minter's script and units print."""
    return {"source": source, "grants": bridge.grants(estate), "token_dir": bridge.TOKEN_DIR,
            "secret": bridge.SECRET, "kubeconfig_dir": bridge.KUBECONFIG_DIR,
            "ca": bridge.TLS_CA, "interval": bridge.mint_interval(estate),
            "unit": MINT_UNIT, "script": f"/usr/local/sbin/{MINT_UNIT}",
            "connect_timeout": CONNECT_TIMEOUT_S, "max_time": MAX_TIME_S}
