"""Prometheus and Alertmanager on the monitoring host: the rendered prometheus.yml, its rules
and its defaults (retention, the address it listens on), alertmanager.yml and its defaults
(the address, no cluster port), nothing else. promtool and amtool prove the files before
they are rendered into a tree (tests/unit/test_monitoring.py).

Each daemon restarts on its own files only: a new route does not restart Prometheus, a
new rule does not restart Alertmanager (whose silences and notification log are kept in
its storage across restarts). The status pages (console templates) are read by Prometheus
on each request: a new page restarts nothing."""
from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.operations import systemd

from roles._lib import consumed, digest_of, install, install_packages, service_current

PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"
# the rendered files each daemon reads (the exporters' files are their roles')
FILES = {ALERTMANAGER: ("monitoring/alertmanager.*",),
         PROMETHEUS: ("monitoring/prometheus.*", "monitoring/rules/*")}
NAMES = {ALERTMANAGER: "Alertmanager", PROMETHEUS: "Prometheus"}
CONSOLES = "monitoring/consoles/*"


def _files(service: str) -> list[str]:
    found = [p for pattern in FILES[service] for p in consumed(pattern)]
    if not found:
        raise OperationError(f"{host.name}: has the monitoring deploy but the rendered tree "
                             f"gives it no file for {NAMES[service]}; re-render the spec")
    return found


@deploy("monitoring")
def monitoring() -> None:
    files = {service: _files(service) for service in (ALERTMANAGER, PROMETHEUS)}
    install_packages("monitoring")
    # Alertmanager first: Prometheus then finds it up when it starts sending alerts
    for service, paths in files.items():
        for path in paths:
            install(path)
        service_current(name=f"{NAMES[service]} on the current configuration",
                        service=service, digest=digest_of(paths))
        systemd.service(name=f"Enable {NAMES[service]}", service=service, running=True,
                        enabled=True)
    for path in consumed(CONSOLES):
        install(path)
