"""slurmrestd: running unprivileged on loopback only, behind its TLS front on the segment."""
from __future__ import annotations

from estate.model.bridge import CA_CERT, TLS_CA, TLS_CERT, TLS_KEY, TLS_USER, server_files
from estate.verify.plugin import assert_installed_secret

ROLE = "slurmrestd"


def test_running_unprivileged(host, node):
    svc = host.service("slurmrestd")
    assert svc.is_running and svc.is_enabled
    users = host.run("ps -o user= -C slurmrestd").stdout.split()
    assert users and "root" not in users and "slurm" not in users, users


def _listening(host, port: str) -> list[str]:
    return [s for s in host.socket.get_listening_sockets() if s.endswith(f":{port}")]


def test_slurmrestd_listens_on_loopback_and_the_front_on_its_segment(host, node, ctx):
    """Two listeners on the port: slurmrestd's loopback one and the front's segment one;
    nothing answers in clear on the segment."""
    inner, front = ctx.rest_listen(node), ctx.rest_front(node)
    assert inner.startswith("127.0.0.1:"), inner
    port = front.rsplit(":", 1)[1]
    assert sorted(_listening(host, port)) == sorted([f"tcp://{inner}", f"tcp://{front}"])
    users = host.run("ps -o user= -C stunnel4").stdout.split()
    assert users and set(users) == {TLS_USER}, f"the TLS front runs as {users}"


def test_the_front_key_is_root_only_and_the_estates(host, node, ctx):
    key, cert = server_files(node)
    for name, path, mode in ((key, TLS_KEY, 0o600), (cert, TLS_CERT, 0o644),
                             (CA_CERT, TLS_CA, 0o644)):
        assert_installed_secret(host, ctx, path, name, mode=mode,
                                what=f"the one issued for {node}")
