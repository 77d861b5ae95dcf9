"""monitoring: Prometheus and Alertmanager running on valid configurations, which their
own promtool and amtool accept, each listening on the monitoring segment only."""
from __future__ import annotations

from estate.model.services import PORTS

ROLE = "monitoring"
# Alertmanager's gossip port when clustering is on (--cluster.listen-address's default)
CLUSTER_PORT = 9094


def _listening(host, port: int) -> list[str]:
    return [s for s in host.socket.get_listening_sockets() if s.endswith(f":{port}")]


def test_prometheus_runs_on_a_valid_configuration(host, node):
    svc = host.service("prometheus")
    assert svc.is_running and svc.is_enabled
    out = host.run("promtool check config /etc/prometheus/prometheus.yml")
    assert out.rc == 0, out.stdout + out.stderr


def test_prometheus_listens_on_the_monitoring_segment_only(host, node):
    ports = _listening(host, PORTS["prometheus"])
    assert ports and not any("0.0.0.0" in s or "::" in s for s in ports), ports


def test_alertmanager_runs_on_a_valid_configuration(host, node):
    svc = host.service("prometheus-alertmanager")
    assert svc.is_running and svc.is_enabled
    out = host.run("amtool check-config /etc/prometheus/alertmanager.yml")
    assert out.rc == 0, out.stdout + out.stderr


def test_alertmanager_listens_on_the_monitoring_segment_only_with_no_cluster_port(host, node):
    ports = _listening(host, PORTS["alertmanager"])
    assert ports and not any("0.0.0.0" in s or "::" in s for s in ports), ports
    assert not _listening(host, CLUSTER_PORT), "Alertmanager gossips: one instance needs not"
