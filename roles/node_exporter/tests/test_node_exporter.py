"""node_exporter: running, with the NFS collectors the storage alert reads."""
from __future__ import annotations

ROLE = "node_exporter"


def test_running_with_the_nfs_collectors(host, node):
    svc = host.service("prometheus-node-exporter")
    assert svc.is_running and svc.is_enabled
    args = host.run("ps -o args= -C prometheus-node-exporter").stdout
    assert "--collector.mountstats" in args and "--collector.nfs" in args, args


def test_listening_on_its_port(host, node):
    assert any(s.endswith(":9100") for s in host.socket.get_listening_sockets())
