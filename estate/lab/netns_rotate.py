"""`estate rotate` on the namespace lab (estate.lab.netns): the same plan (estate.operate.rotate.logic),
carried out on the lab's daemons as the roles' units would be on real nodes.

The lab runs one munged for every node (they share this machine's socket), so the munge key
is the lab's one file and "restart munged everywhere" is that munged's restart. The other
daemons stop and start in their own namespaces exactly as the lab started them; a slurmd's
restart leaves its jobs' slurmstepd running. Where the lab keeps its keys: munge and JWT in
<state>/secret, the TLS seed and front in <state>/secret/tls (netns_bridge).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from estate.lab import netns_bridge
from estate.lab.driver import LabError
from estate.model.services import MUNGE_USER


def secrets_dir(lab, secret: str) -> Path:
    """The lab's directory for the secret (the new key goes there)."""
    return netns_bridge.tls_dir(lab) if secret == "tls-seed" else lab.state / "secret"


class NetnsRunner:
    TIMEOUT = 90

    def __init__(self, lab):
        self.lab = lab
        self._munge_done = False

    def _deadline(self) -> float:
        return time.monotonic() + self.TIMEOUT

    # --- keys ----------------------------------------------------------------------------

    def put(self, node: str, path: str, data: bytes, owner: str, mode: int) -> None:
        if owner == MUNGE_USER:   # the lab's one munged reads <state>/secret/munge.key
            dest = self.lab.state / "secret" / "munge.key"   # (each node's put is the same)
        else:
            dest = self.lab.host_path(node, path)
        tmp = dest.with_name(f".{dest.name}.new")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        shutil.chown(tmp, owner, owner)
        os.replace(tmp, dest)

    # --- daemons ---------------------------------------------------------------------------

    def restart(self, node: str, daemon: str) -> None:
        getattr(self, f"_restart_{daemon}")(node)

    def _restart_munge(self, node: str) -> None:
        if self._munge_done:       # one munged serves every node
            return
        sock = self.lab.state / "munge"
        pid = int((sock / "munged.pid").read_text().strip())
        os.kill(pid, signal.SIGTERM)
        end = self._deadline()
        while Path(f"/proc/{pid}").exists():
            if time.monotonic() > end:
                raise LabError("munged did not stop")
            time.sleep(0.1)
        (sock / "munge.socket.2").unlink(missing_ok=True)
        key = self.lab.state / "secret" / "munge.key"
        subprocess.run(["setpriv", "--reuid=munge", "--regid=munge", "--init-groups",
                        "munged", f"--key-file={key}", f"--socket={sock}/munge.socket.2",
                        f"--pid-file={sock}/munged.pid", f"--seed-file={sock}/munged.seed",
                        f"--log-file={sock}/munged.log"], check=True, timeout=30,
                       capture_output=True)
        while not (sock / "munge.socket.2").exists():
            if time.monotonic() > end:
                raise LabError(f"munged did not come back; see {sock}/munged.log")
            time.sleep(0.1)
        self._munge_done = True

    def _restart_slurmctld(self, node: str) -> None:
        self.lab.stop(node, "slurmctld")
        self.lab.start_slurmctld(node)
        self.lab.wait_slurmctld(self._deadline())

    def _restart_slurmdbd(self, node: str) -> None:
        self.lab.stop(node, "slurmdbd")
        self.lab.start(node, "slurmdbd", ["slurmdbd", "-D"])
        self.lab.wait(self._deadline(), "slurmdbd to answer", lambda: self.lab.run(
            node, ["sacctmgr", "-n", "show", "cluster"], check=False).returncode == 0,
            node, "slurmdbd")

    def _restart_slurmrestd(self, node: str) -> None:
        self.lab.stop(node, "slurmrestd")
        netns_bridge.start_slurmrestd(self.lab, node)
        rest = self.lab.slurm.slurmrestd
        from estate.model import bridge
        self.lab.wait(self._deadline(), "slurmrestd to listen", lambda: netns_bridge.listening(
            self.lab, node, bridge.LOOPBACK, rest.port), node, "slurmrestd")

    def _restart_slurmd(self, node: str) -> None:
        self.lab.stop(node, "slurmd")
        self.lab.start_slurmd(node)
        self.lab.wait_workers(self._deadline())

    def mint(self, node: str) -> None:
        netns_bridge.mint(self.lab)

    # --- the TLS front ------------------------------------------------------------------------

    def front(self, node: str) -> None:
        netns_bridge.install_tls(self.lab, node)
        self.lab.stop(node, "stunnel4")
        netns_bridge.start_stunnel(self.lab, node)

    def front_ca(self, node: str, pem: bytes) -> None:
        from estate.model import bridge
        self.put(node, bridge.TLS_CA, pem, "root", 0o644)
