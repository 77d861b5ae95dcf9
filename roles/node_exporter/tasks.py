"""The node exporter on every node (spec.monitoring), with the NFS client collectors the
storage alert reads (monitoring/node-exporter.env); the firewall admits only the
monitoring host to its port."""
from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import systemd

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
