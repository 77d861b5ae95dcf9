"""Pulumi program: the stack's spec becomes one EstateDeployment (code in estate/pulumi/)."""
from pathlib import Path

import pulumi

from estate.pulumi.component import EstateDeployment, build_or_fail
from estate.pulumi.plan import StackConfig

config = pulumi.Config()
spec = config.require("spec")
stack = StackConfig(spec, tuple(config.get_object("acceptUnsupported") or ()),
                    bool(config.get_bool("lab")), config.get("keepUp"),
                    config.get("appliedTree") or "")
deployment = EstateDeployment(pulumi.get_stack(), build_or_fail(spec), spec,
                              kubeconfig=config.get_secret("kubeconfig"), config=stack,
                              project_dir=Path(__file__).resolve().parent)
for name, value in deployment.outputs.items():
    pulumi.export(name, value)
