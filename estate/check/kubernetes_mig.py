"""MIG layouts as rendered: the mig-parted config fits the GPUs of the class it is named
after (estate.model.nvidia.MIG_PROFILES: profiles, 7 compute and 8 memory slices), and
every MIG node's label names a config the file has, in a shape its device-plugin strategy
can advertise.

Read back from kubernetes/nvidia/mig-parted.yaml and the kubeadm registrations, so a
hand-edited layout is caught as well as a spec whose layout cannot be applied.
"""
from __future__ import annotations

from estate.check.kubernetes_schema import device_plugin_configs, plane_artifacts, rendered_nodes
from estate.check.ownership import mig_configs, mig_strategy, plugin_config
from estate.check.registry import ArtifactContext, Problem, Problems, validator
from estate.findings import Severity
from estate.model import kubernetes as k8s
from estate.model.nvidia import mig_family, mig_layout_problems
from estate.model.services import MANIFESTS
from estate.spec.model import NodeClass
from estate.spec.resolved import Estate

E = Severity.ERROR
FIX = ("give node_classes[].gpus.mig_profiles a layout of that GPU's profiles within 7 "
       "compute and 8 memory slices (NVIDIA's MIG user guide), then re-render")


def _class_path(estate: Estate, name: str) -> tuple[str, NodeClass | None]:
    for i, cls in enumerate(estate.spec.node_classes):
        if cls.name == name:
            return f"node_classes[{i}].gpus.mig_profiles", cls
    return k8s.MIG_PARTED, None


def _layout_text(layout: dict) -> str:
    return ", ".join(f"{n} x {p}" for p, n in layout.items()) or "no MIG devices"


@validator("kubernetes.mig_layout_invalid", E, "kubernetes",
           "a rendered MIG layout (mig-parted config) does not fit its GPUs, or a MIG node "
           "names a layout its device-plugin strategy cannot advertise", stage="artifacts")
def mig_layout_invalid(ctx: ArtifactContext) -> Problems:
    layouts = mig_configs(ctx.artifacts)
    for name, layout in sorted(layouts.items()):
        path, cls = _class_path(ctx.estate, name)
        if cls is None or cls.gpus is None:
            yield Problem(path, f"{k8s.MIG_PARTED}: config '{name}' is no GPU node class's",
                          "re-render: Estate names each config after its node class")
            continue
        family = mig_family(cls.gpu.product, cls.gpu.memory_gb)
        for why in mig_layout_problems(family, layout) if layout else \
                ["it enables MIG and makes no device"]:
            yield Problem(path, f"{k8s.MIG_PARTED} config '{name}' ({_layout_text(layout)} "
                          f"per {cls.gpu.product} GPU): {why}", FIX)
    yield from _nodes(ctx, layouts)


def _nodes(ctx, layouts: dict) -> list[Problem]:
    """One finding per (layout label, plugin config) the MIG nodes carry, not per node."""
    configs = {}
    for a in plane_artifacts(ctx.artifacts, MANIFESTS):
        configs.update(device_plugin_configs(a))
    seen: dict[tuple, list[str]] = {}
    for name, node in rendered_nodes(ctx.artifacts).items():
        labels = node["labels"]
        strategy = mig_strategy(plugin_config(labels, configs))
        if labels.get(k8s.GPU_PRESENT) == "true" and k8s.MIG_CONFIG_LABEL in labels:
            seen.setdefault((labels[k8s.MIG_CONFIG_LABEL], strategy), []).append(name)
    out = []
    for (config, strategy), nodes in sorted(seen.items()):
        path, _ = _class_path(ctx.estate, config)
        layout = layouts.get(config)
        if layout is None:
            out.append(Problem(path, f"nodes {', '.join(nodes[:3])} name MIG config "
                               f"'{config}' ({k8s.MIG_CONFIG_LABEL}), which "
                               f"{k8s.MIG_PARTED} lacks", "re-render"))
        elif strategy == "single" and len(layout) > 1:
            out.append(Problem(path, f"nodes {', '.join(nodes[:3])} run the device plugin's "
                               f"single MIG strategy on a layout of {len(layout)} profiles "
                               f"({_layout_text(layout)}): the single strategy needs one "
                               "profile on every GPU", "use one profile, or set "
                               "kubernetes.gpu_sharing mig_strategy: mixed"))
        elif strategy == "none":
            out.append(Problem(path, f"nodes {', '.join(nodes[:3])} carry a MIG layout "
                               "but their device-plugin config has migStrategy none: the "
                               "plugin would not advertise the MIG devices", "re-render"))
    return out
