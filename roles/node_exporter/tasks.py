"""The node exporter on every node (spec.monitoring), with the NFS client collectors the
storage alert reads (monitoring/node-exporter.env); the firewall admits only the
monitoring host to its port. Where the node holds certificates, the expiry collector and
its timer (monitoring/cert-expiry/: estate.render.certificates) write their textfile
metrics beside it."""
from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from estate.model.certificates import UNIT
from roles._lib import consumed, digest_of, install, install_packages, service_current

SERVICE = "prometheus-node-exporter"


@deploy("node_exporter")
def node_exporter() -> None:
    env = consumed("monitoring/node-exporter.env")
    install_packages("node_exporter")
    for path in env:
        install(path)
    service_current(name="node exporter on the current collectors", service=SERVICE,
                    digest=digest_of(env))
    systemd.service(name="Enable the node exporter", service=SERVICE, running=True,
                    enabled=True)
    certificate_expiry()


def certificate_expiry() -> None:
    paths = consumed("monitoring/cert-expiry/*")
    if not paths:
        return
    installed = [install(path) for path in paths]
    systemd.daemon_reload(name="systemd: the certificate expiry units",
                          _if=any_changed(*installed))
    systemd.service(name=f"Enable {UNIT}.timer", service=f"{UNIT}.timer", running=True,
                    enabled=True)
