"""Pulumi program: the stack's spec becomes one EstateDeployment (code in estate/pulumi/)."""
import pulumi

from estate.pulumi.component import EstateDeployment, build_or_fail

config = pulumi.Config()
spec = config.require("spec")
deployment = EstateDeployment(pulumi.get_stack(), build_or_fail(spec), spec,
                              kubeconfig=config.get_secret("kubeconfig"))
for name, value in deployment.outputs.items():
    pulumi.export(name, value)
