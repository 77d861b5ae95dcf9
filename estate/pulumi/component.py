"""The estate as one Pulumi component: secrets, one provisioning step per node, k8s objects.

The graph (stages, triggers, who gets which secret) comes from estate.pulumi.plan;
this module only turns it into resources.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_command as command
import pulumi_kubernetes as kubernetes
import pulumi_random as random

from estate.capacity import gpu_budget
from estate.findings import Severity
from estate.model.services import KEYS
from estate.pipeline import Build, build
from estate.pulumi import plan as planning

NO_KUBECONFIG = ("skipped: no kubeconfig in the stack config, and no control plane step "
                 "outputs one ({why}); give one with `pulumi config set --secret kubeconfig "
                 "< KUBECONFIG`")


def build_or_fail(spec_path: str) -> Build:
    """The pipeline's build; a spec with errors stops the program with every finding."""
    result = build(spec_path)
    for f in result.findings:
        if f.severity is Severity.WARNING:
            pulumi.log.warn(f"{f.location or spec_path} {f.id} {f.path}: {f.message}")
    if not result.ok:
        lines = [f"{f.location or spec_path} {f.id} {f.path}: {f.message} ({f.hint})"
                 for f in result.findings if f.severity is Severity.ERROR]
        raise pulumi.RunError(f"{spec_path} has errors; fix them (`estate check "
                              f"{spec_path}`) and run again:\n" + "\n".join(lines))
    return result


class EstateDeployment(pulumi.ComponentResource):
    """Everything one spec deploys. ``outputs`` holds what the stack exports."""

    def __init__(self, name: str, result: Build, spec_path: str,
                 kubeconfig: Optional[pulumi.Input[str]] = None,
                 opts: Optional[pulumi.ResourceOptions] = None,
                 config: Optional[planning.StackConfig] = None,
                 project_dir: Optional[Path] = None):
        super().__init__("estate:index:Deployment", name, None, opts)
        estate, artifacts = result.estate, result.artifacts
        self.config = config or planning.StackConfig(spec_path)
        # Every step runs here, whatever the engine's working directory (the spec path
        # in the commands is relative to it).
        self.dir = str((project_dir or Path.cwd()).resolve())
        try:
            tree = self.config.tree(pulumi.get_stack())
            batches = planning.restart_batches(Path(spec_path), Path(self.dir) / tree,
                                               self.config.share(), log=pulumi.log.info)
            self.plan = planning.plan(estate, artifacts, spec_path, self.config.accept,
                                      lab=self.config.lab, batches=batches, tree=tree)
        except ValueError as exc:
            raise pulumi.RunError(f"stack config: {exc}") from None
        self.keys = self._secrets(self.plan.secrets)
        self.nodes = self._provision()
        self.revoke = self._revoke()
        self.record = self._record()
        status = self._kubernetes(artifacts, kubeconfig)
        self.outputs = {
            "inventory": planning.inventory(estate, self.plan),
            "gpu_budget": gpu_budget(estate).as_dict(),
            "endpoints": planning.endpoints(estate),
            "kubernetes": status,
        }
        self.register_outputs(self.outputs)

    def _child(self, **kw) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, **kw)

    def _secrets(self, needed: tuple[str, ...]) -> dict[str, random.RandomBytes]:
        """Generated once per stack; the engine keeps them encrypted in the state."""
        sizes = {"munge": ("munge-key", KEYS["munge"].size),
                 "jwt": ("slurmrestd-jwt-key", KEYS["jwt"].size),
                 "tls": ("slurmrestd-tls-seed", KEYS["tls"].size),
                 "cluster-ca": ("kubernetes-ca-seed", KEYS["cluster-ca"].size)}
        return {k: random.RandomBytes(sizes[k][0], length=sizes[k][1], opts=self._child())
                for k in needed}

    def _source_stdout(self, nodes) -> pulumi.Output[str]:
        return nodes[self.plan.join_source].stdout

    def _environment(self, step: planning.NodeStep, nodes) -> pulumi.Output | None:
        """The keys and, on a joining node, the control plane's join material: one secret
        value (Output.secret even though RandomBytes marks base64 secret: the command's
        environment must be secret whatever a provider does)."""
        parts: dict[str, Any] = {KEYS[k].env: self.keys[k].base64 for k in step.secrets}
        if step.join == "sink":
            parts["join"] = self._source_stdout(nodes).apply(
                lambda out: planning.join_environment(out, step.control_plane))
        if not parts:
            return None
        return pulumi.Output.secret(pulumi.Output.all(**parts).apply(_flatten))

    def _provision(self) -> dict[str, command.local.Command]:
        nodes: dict[str, command.local.Command] = {}
        for step in self.plan.steps:   # stage order: what a step waits for exists already
            deps = [nodes[n] for n in self.plan.after(step)] + \
                   [self.keys[k] for k in step.secrets]
            # The control plane's stdout carries the join material and admin.conf: a
            # secret output, and never logged (the provider logs stdout by default).
            source = step.join == "source"
            nodes[step.node] = command.local.Command(
                f"node-{step.node}",
                create=step.command,
                dir=self.dir,
                environment=self._environment(step, nodes),
                triggers=step.triggers,
                logging=command.local.Logging.STDERR if source else None,
                opts=self._child(depends_on=deps,
                                 additional_secret_outputs=["stdout"] if source else None))
        return nodes

    def _revoke(self) -> command.local.Command | None:
        """Once every node has joined, the join token is deleted on the control plane."""
        if self.plan.revoke is None:
            return None
        token = self._source_stdout(self.nodes).apply(
            lambda out: {k: v for k, v in planning.join_environment(out).items()
                         if k == planning.JOIN_ENV["token"]})
        sinks = [self.nodes[s.node] for s in self.plan.steps if s.join == "sink"]
        return command.local.Command(
            "join-token-revoke", create=self.plan.revoke, dir=self.dir,
            environment=pulumi.Output.secret(token),   # type: ignore[arg-type]  # secret() is typed Never in pulumi's stubs
            opts=self._child(depends_on=[self.nodes[self.plan.join_source], *sinks]))

    def _record(self) -> command.local.Command:
        """The tree this run applied, kept for the next run's diff (the old side that
        orders the workers' restarts). After every node's step: a failed step leaves the
        last fully applied tree, so the next run diffs against that and batches again."""
        rec = self.plan.record
        return command.local.Command(
            planning.RECORD_NAME, create=rec.command, dir=self.dir, triggers=rec.triggers,
            opts=self._child(depends_on=list(self.nodes.values())))

    def _stage(self, name: str) -> list[command.local.Command]:
        return [self.nodes[n] for n in self.plan.stages[name]]

    def _kubeconfig(self, given):
        """The stack's kubeconfig, else the admin.conf the control plane's step outputs
        (secret): the objects are created in the same `pulumi up`."""
        if given is not None:
            return given, None
        source = self.plan.join_source
        if source is None:
            return None, "the spec has no first control plane"
        if "k8s_control_plane" in self.config.accept:
            return None, "the stack accepts k8s_control_plane as unsupported"
        admin = self._source_stdout(self.nodes).apply(_admin_conf(source))
        return pulumi.Output.secret(admin), None

    def _kubernetes(self, artifacts, given) -> str:
        docs = planning.manifests(artifacts)
        if not docs:
            return "skipped: the spec renders no Kubernetes manifests"
        kubeconfig, why = self._kubeconfig(given)
        if kubeconfig is None:
            return NO_KUBECONFIG.format(why=why)
        control = self._stage("k8s-control-plane")
        provider = kubernetes.Provider("kubernetes", kubeconfig=kubeconfig,
                                       opts=self._child(depends_on=control))
        kubernetes.yaml.v2.ConfigGroup(
            "manifests",
            yaml="\n---\n".join(c.decode() for _, c in docs),
            opts=self._child(provider=provider,
                             depends_on=control + self._stage("k8s-workers")))
        origin = "the stack's kubeconfig" if given is not None else \
            f"the admin.conf that {self.plan.join_source}'s step outputs"
        return f"managed: {len(docs)} manifest files ({planning.MANIFESTS}) through {origin}"


def _admin_conf(source: str):
    def read(stdout: str) -> str:
        conf = planning.admin_conf(stdout)
        if not conf:
            # An empty kubeconfig would make the provider fall back to ~/.kube/config:
            # the objects would land on whatever cluster that names.
            raise pulumi.RunError(f"{source}'s step printed no admin.conf: the control plane "
                                  "is not initialised (see that step's output)")
        return conf
    return read


def _flatten(parts: dict) -> dict:
    """{VAR: value, "join": {VAR: value}} -> one environment."""
    env = {k: v for k, v in parts.items() if k != "join"}
    env.update(parts.get("join") or {})
    return env
