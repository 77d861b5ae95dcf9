"""What the verification suites know: the estate, the rendered tree, how to reach nodes.

Expected values come from the rendered tree (MANIFEST.json sha256, modes, owners;
the rendered files themselves) and from the render functions, never from
constants in the suites.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from estate.model.services import GPU_DEVICES
from estate.model.destinations import destination, installer
from estate.provision.inventory import Connection, Target, load_manifest, runtime_facts, \
    select, targets
from estate.spec.resolved import Estate


@dataclass
class VerifyContext:
    estate: Estate
    render_dir: Path
    conn: Connection
    outdir: Path
    limit: str | None = None
    secrets_dir: Path | None = None
    transport: str = "ssh"                  # or "docker": containers[node] by name
    containers: dict[str, str] = field(default_factory=dict)
    # Try every pair of nodes against the flow matrix (estate.verify.reachability): the
    # labs do; on a real estate it starts listeners on the nodes, so it is asked for.
    reachability_probe: bool = False
    # The incident drills (checks named test_drill_*): each stops a part and waits minutes
    # for the alert to fire and resolve, so they run when asked (the lab tier asks).
    drills: bool = False
    _hosts: dict = field(default_factory=dict)
    _reachability: list | Exception | None = None

    @cached_property
    def manifest(self) -> dict:
        return load_manifest(self.render_dir)

    @cached_property
    def runtime(self) -> dict:
        return runtime_facts(self.estate)

    @cached_property
    def all_targets(self) -> dict[str, Target]:
        return {t.name: t for t in targets(self.estate, self.manifest)}

    @cached_property
    def nodes(self) -> dict[str, Target]:
        return {t.name: t for t in select(list(self.all_targets.values()), self.limit)}

    def with_deploy(self, deploy: str) -> list[str]:
        return [n for n, t in self.nodes.items() if deploy in t.deploys]

    def artifacts_of(self, node: str) -> list[tuple[str, str, str]]:
        """(artifact, destination, installing deploy) for what the roles put on node."""
        t = self.nodes[node]
        out = []
        for path in t.consumes:
            who = installer(path, t.deploys)
            if who:
                out.append((path, destination(path), who))
        return out

    def rendered(self, path: str) -> bytes:
        return (self.render_dir / path).read_bytes()

    def rendered_json(self, path: str) -> dict:
        return json.loads(self.rendered(path))

    def secret_sha256(self, name: str) -> str | None:
        """Digest of a secret for comparison on the node; the secret itself stays here."""
        if not self.secrets_dir or not (self.secrets_dir / name).is_file():
            return None
        return hashlib.sha256((self.secrets_dir / name).read_bytes()).hexdigest()

    @cached_property
    def ssh_config(self) -> Path:
        """An ssh_config for testinfra's ssh backend: one Host block per node."""
        self.outdir.mkdir(parents=True, exist_ok=True)
        lines = []
        for name, t in self.nodes.items():
            lines += [f"Host {name}", f"  HostName {t.address or name}",
                      f"  User {self.conn.user}", "  BatchMode yes", "  ConnectTimeout 10",
                      "  ControlMaster auto", f"  ControlPath /tmp/estate-verify-%C",
                      "  ControlPersist 60"]
            if self.conn.key:
                lines += [f"  IdentityFile {self.conn.key}", "  IdentitiesOnly yes"]
            if not self.conn.strict_host_keys:
                lines += ["  StrictHostKeyChecking no", "  UserKnownHostsFile /dev/null",
                          "  LogLevel ERROR"]
        path = self.outdir / "ssh_config"
        path.write_text("\n".join(lines) + "\n")
        return path

    def host(self, name: str):
        """A testinfra host for the node (one ssh master connection each)."""
        if name not in self._hosts:
            import testinfra
            if self.transport == "docker":
                self._hosts[name] = testinfra.get_host(f"docker://{self.containers[name]}")
            else:
                self._hosts[name] = testinfra.get_host(f"ssh://{name}",
                                                       ssh_config=str(self.ssh_config))
        return self._hosts[name]

    def reachability(self) -> list:
        """The reachability matrix's outcomes, probed once for every node checked."""
        if self._reachability is None:
            from estate.verify import reachability
            try:
                self._reachability = reachability.probe_all(self, list(self.nodes))
            except RuntimeError as exc:   # each node's test reports it, none tries again
                self._reachability = exc
        if isinstance(self._reachability, Exception):
            raise self._reachability
        return self._reachability

    # --- who does what in cluster checks (from the spec, limited to the nodes checked) ---

    def controller(self) -> list[str]:
        return [c for c in self.estate.spec.slurm.controllers[:1] if c in self.nodes]

    def submit_node(self) -> str | None:
        """Where jobs are submitted from: a login node, else the controller."""
        logins = [n for n in self.estate.role_hosts("slurm_login") if n in self.nodes]
        return (logins or self.controller() or [None])[0]

    def job_user(self) -> str:
        """A user with a Slurm account, so jobs go through accounting like real ones."""
        for acct in self.estate.spec.slurm.accounts:
            if acct.users:
                return acct.users[0]
        return "root"

    def gpu_nodes(self) -> list[str]:
        return [n for n, t in self.nodes.items()
                if any(p.startswith(GPU_DEVICES) for p in t.consumes)]

    def gpu_devices(self, node: str) -> list[dict]:
        return [d for p in self.nodes[node].consumes if p.startswith(GPU_DEVICES)
                for d in self.rendered_json(p)["devices"]]

    def rendered_env(self, path: str) -> dict[str, str]:
        import shlex
        out = {}
        for line in self.rendered(path).decode().splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                out[key.strip()] = " ".join(shlex.split(value))
        return out

    def rest_listen(self, node: str) -> str:
        env = next(p for p in self.nodes[node].consumes if p.startswith("slurm/slurmrestd/"))
        return self.rendered_env(env)["SLURMRESTD_LISTEN"]

    def rest_front(self, node: str) -> str:
        """addr:port where the node's TLS front accepts (its rendered stunnel `accept`)."""
        conf = next(p for p in self.nodes[node].consumes
                    if p.startswith("slurm/slurmrestd-tls/"))
        for line in self.rendered(conf).decode().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "accept":
                return value.strip()
        raise KeyError(f"{conf} has no accept line")
