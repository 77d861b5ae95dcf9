"""Prometheus on the monitoring host: the rendered prometheus.yml, its rules and its
defaults (retention, the address it listens on), nothing else. promtool proves the files
before they are rendered into a tree (tests/unit/test_monitoring.py)."""
from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.operations import systemd

from roles._lib import consumed, digest_of, install, install_packages, service_current

SERVICE = "prometheus"


@deploy("monitoring")
def monitoring() -> None:
    files = consumed("monitoring/*")
    if "monitoring/prometheus.yml" not in files:
        raise OperationError(f"{host.name}: has the monitoring deploy but the rendered tree "
                             "gives it no prometheus.yml; re-render the spec")
    install_packages("monitoring")
    for path in files:
        install(path)
    service_current(name="Prometheus on the current configuration", service=SERVICE,
                    digest=digest_of(files))
    systemd.service(name="Enable Prometheus", service=SERVICE, running=True, enabled=True)
