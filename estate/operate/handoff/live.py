"""Where `estate handoff` reaches the two planes (estate.operate.handoff.logic's SlurmSide and KubeSide).

Production (SshSlurm, Kubectl): Slurm's clients run on the first controller over ssh, as
`estate report` reads sacct there (estate.operate.report.cli.ssh_runner: every word shell-quoted);
configs and daemons change through `estate apply` itself (the slurm_controller role
restarts slurmctld on a changed config and then reconfigures, the slurm_worker role starts
slurmd), so the handoff holds no second copy of what the roles know; kubectl runs here
through ESTATE_KUBECONFIG (estate.kubectl).

The netns lab (NetnsSlurm): the same Slurm commands in the lab controller's namespace, the
controllers' rendered Slurm files written where the lab installed them, and slurmctld and
slurmd stopped and started as the lab starts them. Real daemons either way: nothing here
answers for Slurm.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

APPLY_TIMEOUT_S = 1800


class _Done:
    """What a runner answers (subprocess.CompletedProcess's fields)."""

    def __init__(self, returncode: int, stdout: str = "", stderr: str = ""):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _estate_apply(spec: Path, limit: str, conn_args: list[str], only: str | None = None
                  ) -> str:
    """`estate apply SPEC --limit LIMIT [--only ONLY]` as a subprocess of this Estate."""
    from estate.operate.handoff.logic import StepError
    argv = [sys.executable, "-m", "estate", "apply", str(spec), "--limit", limit,
            *conn_args, *(["--only", only] if only else [])]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=APPLY_TIMEOUT_S)
    if proc.returncode:
        raise StepError(f"estate apply --limit {limit} exited {proc.returncode}: "
                        f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    return f"estate apply --limit {limit}{' --only ' + only if only else ''}: {last}"


class SshSlurm:
    """Slurm's clients on the first controller, daemons and configs through estate apply."""

    def __init__(self, estate, conn, conn_args: list[str]):
        from estate.provision.inventory import management_segment
        self.estate, self.conn, self.conn_args = estate, conn, conn_args
        self.segment = management_segment(estate)
        self.controller = estate.spec.slurm.controllers[0]
        self.where = f"{self.controller} ({self._addr(self.controller)}) over ssh"

    def _addr(self, host: str) -> str:
        return str(self.estate.address(host, self.segment) or host)

    def _ssh(self, host: str, argv: list[str]) -> _Done:
        base = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-l", self.conn.user]
        if self.conn.key:
            base += ["-i", self.conn.key, "-o", "IdentitiesOnly=yes"]
        if not self.conn.strict_host_keys:
            base += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                     "-o", "LogLevel=ERROR"]
        try:
            proc = subprocess.run([*base, "--", self._addr(host), shlex.join(argv)], text=True,
                                  capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            return _Done(255, "", f"ssh {host}: no answer within 120 s")
        return _Done(proc.returncode, proc.stdout, proc.stderr)

    def run(self, argv: list[str]) -> _Done:
        return self._ssh(self.controller, argv)

    def apply_controllers(self, spec: Path) -> str:
        ctls = ",".join(self.estate.spec.slurm.controllers)
        return _estate_apply(spec, ctls, self.conn_args, "slurm_controller")

    def stop_slurmd(self, host: str) -> str:
        from estate.operate.handoff.logic import StepError
        done = self._ssh(host, ["systemctl", "disable", "--now", "slurmd"])
        if done.returncode:
            raise StepError(f"{host}: systemctl disable --now slurmd: {done.stderr.strip()}")
        return f"{host}: slurmd stopped and disabled"

    def start_slurmd(self, host: str, spec: Path) -> str:
        return _estate_apply(spec, host, self.conn_args)


class Kubectl:
    """The cluster through ESTATE_KUBECONFIG; the joins through estate apply; a node's
    own commands through on_node(host, argv) (SshSlurm's ssh)."""

    def __init__(self, conn_args: list[str], control_plane: str | None, on_node=None):
        self.conn_args, self.control_plane, self.on_node = conn_args, control_plane, on_node

    def leave(self, host: str) -> str:
        from estate.operate.handoff.logic import StepError
        for argv in (["kubeadm", "reset", "-f"], ["systemctl", "disable", "--now", "kubelet"]):
            done = self.on_node(host, argv) if self.on_node else _Done(1, "", "no way to "
                                                                        "reach the node")
            if done.returncode:
                raise StepError(f"{host}: {shlex.join(argv)}: {done.stderr.strip()[-300:]}")
        return f"{host}: kubeadm reset, kubelet stopped"

    def unavailable(self) -> str | None:
        from estate.kubectl import KUBECONFIG_ENV
        if not os.environ.get(KUBECONFIG_ENV):
            return f"no Kubernetes cluster configured ({KUBECONFIG_ENV} is not set)"
        if not shutil.which("kubectl"):
            return "no kubectl on this machine"
        return None

    def kubectl(self, argv: list[str]) -> _Done:
        from estate.kubectl import KUBECONFIG_ENV
        proc = subprocess.run(["kubectl", "--kubeconfig", os.environ[KUBECONFIG_ENV], *argv],
                              capture_output=True, text=True, timeout=900)
        return _Done(proc.returncode, proc.stdout, proc.stderr)

    def join(self, host: str, spec: Path) -> str:
        limit = ",".join(filter(None, [host, self.control_plane]))
        return _estate_apply(spec, limit, self.conn_args)

    def apply_queues(self, spec: Path) -> str:
        return _estate_apply(spec, self.control_plane or "", self.conn_args,
                             "k8s_control_plane")


def reconfigure(run, timeout_s: float = 30.0) -> int:
    """`scontrol reconfigure` until slurmctld takes it; the tries it took. Slurm 24.11's
    slurmctld, just started, answered "slurm_reconfigure error: Connection reset by peer"
    to the first one (measured in tests/live_slurm/test_handoff.py), after `scontrol ping`
    already said UP; a moment later it takes it."""
    from estate.operate.handoff.logic import StepError
    end, tries = time.monotonic() + timeout_s, 0
    while True:
        tries += 1
        ans = run(["scontrol", "reconfigure"])
        if ans.returncode == 0:
            return tries
        if time.monotonic() > end:
            raise StepError(f"scontrol reconfigure ({tries} tries in {timeout_s:.0f} s): "
                            f"{(ans.stderr or ans.stdout).strip()}")
        time.sleep(1)


class NetnsSlurm:
    """The running netns lab (estate.lab.netns): Slurm in its controller's namespace."""

    def __init__(self, lab):
        self.lab = lab
        self.controller = lab.slurm.controllers[0]
        self.where = f"the netns lab's {self.controller}"

    def run(self, argv: list[str]):
        return self.lab.run(self.controller, argv, check=False)

    def apply_controllers(self, spec: Path) -> str:
        """As the slurm_controller role: the controllers' rendered Slurm files where the
        lab installed them; where any changed, slurmctld restarts on them (22.05 needs a
        restart for nodes that come or go) and `scontrol reconfigure` hands them to the
        configless slurmds."""
        from estate.operate.handoff.logic import StepError
        from estate.lab.driver import LabError
        from estate.model.destinations import destination
        lab = self.lab
        lab.spec_path = Path(spec)
        lab._estate = lab._artifacts = None      # the spec and its overlay, read again
        try:
            lab.load()
        except LabError as exc:
            raise StepError(str(exc)) from None
        changed = []
        for ctl in lab.slurm.controllers:
            for art in lab.artifacts.for_node(ctl):
                dest_path = destination(art.path)
                if not dest_path.startswith("/etc/slurm/"):
                    continue
                dest = lab.installed_at(ctl, dest_path)
                if dest is None or (dest.exists() and dest.read_bytes() == art.content):
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(art.content)
                os.chmod(dest, art.mode)
                changed.append(f"{ctl}:{dest_path}")
        if not changed:
            return "the controllers' Slurm files are current; nothing restarted"
        for ctl in lab.slurm.controllers:
            if lab.pids(ctl, "slurmctld"):
                lab.stop(ctl, "slurmctld")
            lab.start_slurmctld(ctl)
        try:
            lab.wait_slurmctld(time.monotonic() + 60)
        except LabError as exc:
            raise StepError(str(exc)) from None
        tries = reconfigure(self.run)
        return (f"installed {', '.join(changed)}; restarted slurmctld; scontrol reconfigure"
                + (f" (answered at try {tries})" if tries > 1 else ""))

    def stop_slurmd(self, host: str) -> str:
        if not self.lab.pids(host, "slurmd"):
            return f"{host}: slurmd not running"
        self.lab.stop(host, "slurmd")
        return f"{host}: slurmd stopped"

    def start_slurmd(self, host: str, spec: Path) -> str:
        if self.lab.pids(host, "slurmd"):
            return f"{host}: slurmd running"
        self.lab.start_slurmd(host)
        return f"{host}: slurmd started"
