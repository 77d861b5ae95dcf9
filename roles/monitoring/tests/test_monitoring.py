"""monitoring: Prometheus running on the rendered configuration, which its own promtool
accepts."""
from __future__ import annotations

ROLE = "monitoring"


def test_prometheus_runs_on_a_valid_configuration(host, node):
    svc = host.service("prometheus")
    assert svc.is_running and svc.is_enabled
    out = host.run("promtool check config /etc/prometheus/prometheus.yml")
    assert out.rc == 0, out.stdout + out.stderr


def test_prometheus_listens_on_the_monitoring_segment_only(host, node):
    ports = [s for s in host.socket.get_listening_sockets() if s.endswith(":9090")]
    assert ports and not any("0.0.0.0" in s or "::" in s for s in ports), ports
