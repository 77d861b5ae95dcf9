"""estate.lab.driver: the pieces the three labs share, and the interface `estate lab` uses
for each backend (no lab is brought up here: the lab, live Slurm and VM tiers do that)."""
from __future__ import annotations

import inspect
import socket
import stat
import threading

import pytest

from estate.lab import driver
from estate.lab.driver import LabError


@pytest.mark.parametrize("name", sorted(driver.DRIVERS))
def test_every_backend_answers_down_and_leftovers(name):
    backend = driver.driver(name)
    assert "log" in inspect.signature(backend.down).parameters
    assert not [p for p in inspect.signature(backend.leftovers).parameters.values()
                if p.default is inspect.Parameter.empty]
    assert issubclass(getattr(backend, "VMError", LabError), LabError)


def test_one_holder_at_a_time(tmp_path):
    lock = tmp_path / "sub" / "lock"
    fd = driver.hold(lock, "test lab")
    with pytest.raises(LabError, match=r"another test lab \(pid \d+\) holds"):
        driver.hold(lock, "test lab")
    import os
    os.close(fd)
    os.close(driver.hold(lock, "test lab"))   # free again once closed


def test_run_raises_with_the_commands_last_lines():
    with pytest.raises(LabError, match=r"sh -c echo boom; exit 3 failed \(3\):\nboom"):
        driver.run(["sh", "-c", "echo boom; exit 3"])
    assert driver.run(["sh", "-c", "exit 4"], check=False).returncode == 4


def test_ssh_key_is_made_once_in_a_closed_directory(tmp_path):
    key = driver.ensure_ssh_key(tmp_path / "ssh" / "id_ed25519", "estate-test")
    assert key.exists() and key.with_suffix(".pub").exists()
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    before = key.read_bytes()
    assert driver.ensure_ssh_key(key, "estate-test").read_bytes() == before


def _server(banner: bytes) -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.sendall(banner)
    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_wait_for_ssh_returns_once_sshd_answers():
    srv, port = _server(b"SSH-2.0-test\r\n")
    try:
        driver.wait_for_ssh([("n1", "127.0.0.1")], 5, port=port)
    finally:
        srv.close()


def test_wait_for_ssh_stops_when_the_machine_is_gone_and_says_where_to_look():
    srv, port = _server(b"HTTP/1.0\r\n")       # something answers, but not sshd
    try:
        with pytest.raises(LabError, match=r"n1: exited while booting\nsee serial.log"):
            driver.wait_for_ssh([("n1", "127.0.0.1")], 5, port=port, gone=lambda n: True,
                                why=lambda n: "see serial.log")
        with pytest.raises(LabError, match=r"n1: no ssh on 127.0.0.1:\d+ after 0 s"):
            driver.wait_for_ssh([("n1", "127.0.0.1")], 0.2, port=port, poll=0.05)
    finally:
        srv.close()
