"""The estate as one Pulumi component: secrets, one provisioning step per node, k8s objects.

The graph (stages, triggers, who gets which secret) comes from estate.pulumi.plan;
this module only turns it into resources.
"""
from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_command as command
import pulumi_kubernetes as kubernetes
import pulumi_random as random

from estate.capacity import gpu_budget
from estate.check.findings import Severity
from estate.model.services import KEYS
from estate.pipeline import Build, build
from estate.pulumi import plan as planning

NO_KUBECONFIG = ("skipped: no kubeconfig in the stack config; create the Kubernetes objects "
                 "with `pulumi config set --secret kubeconfig < KUBECONFIG` and `pulumi up`")


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
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("estate:index:Deployment", name, None, opts)
        estate, artifacts = result.estate, result.artifacts
        self.plan = planning.plan(estate, artifacts, spec_path)
        self.keys = self._secrets(self.plan.secrets)
        self.nodes = self._provision()
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
                 "jwt": ("slurmrestd-jwt-key", KEYS["jwt"].size)}
        return {k: random.RandomBytes(sizes[k][0], length=sizes[k][1], opts=self._child())
                for k in needed}

    def _environment(self, secrets: tuple[str, ...]) -> dict | None:
        names = {k: key.env for k, key in KEYS.items()}
        # Output.secret even though RandomBytes marks base64 secret: the command's
        # environment must be secret whatever the key's provider does.
        env = {names[k]: pulumi.Output.secret(self.keys[k].base64) for k in secrets}
        return env or None

    def _provision(self) -> dict[str, command.local.Command]:
        nodes: dict[str, command.local.Command] = {}
        for step in self.plan.steps:   # stage order: what a step waits for exists already
            deps = [nodes[n] for n in self.plan.after(step)] + \
                   [self.keys[k] for k in step.secrets]
            nodes[step.node] = command.local.Command(
                f"node-{step.node}",
                create=step.command,
                environment=self._environment(step.secrets),
                triggers=[step.digest],
                opts=self._child(depends_on=deps))
        return nodes

    def _stage(self, name: str) -> list[command.local.Command]:
        return [self.nodes[n] for n in self.plan.stages[name]]

    def _kubernetes(self, artifacts, kubeconfig) -> str:
        docs = planning.manifests(artifacts)
        if not docs:
            return "skipped: the spec renders no Kubernetes manifests"
        if kubeconfig is None:
            return NO_KUBECONFIG
        control = self._stage("k8s-control-plane")
        provider = kubernetes.Provider("kubernetes", kubeconfig=kubeconfig,
                                       opts=self._child(depends_on=control))
        kubernetes.yaml.v2.ConfigGroup(
            "manifests",
            yaml="\n---\n".join(c.decode() for _, c in docs),
            opts=self._child(provider=provider,
                             depends_on=control + self._stage("k8s-workers")))
        return (f"managed: {len(docs)} manifest files ({planning.MANIFESTS}) "
                "through the stack's kubeconfig")
