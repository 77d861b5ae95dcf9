"""What the Pulumi program creates, as plain data: no Pulumi import here.

One provisioning step per node, ordered in stages; its trigger is the digest of
exactly the artifacts the node consumes; the secrets it is handed; and the
stack outputs (inventory, endpoints). Kept apart from the component so the
graph can be computed and shown (``estate plan``) without the Pulumi runtime.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from estate.catalogue import ROLES, STAGES as CATALOGUE_STAGES
from estate.model.services import MANIFESTS, PORTS, uses_jwt
from estate.render import kubernetes as k8s_render
from estate.render import slurm as slurm_render
from estate.render.artifacts import Artifacts
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

# The provisioning command for one node; the one place its command line is spelled.
# --no-manifests: the stack's ConfigGroup owns the Kubernetes manifests (it prunes what the
# spec drops); the control-plane role applies them only under the CLI and the lab.
APPLY = "estate apply {spec} --limit {node} --no-manifests"



@dataclass(frozen=True)
class Stage:
    name: str
    roles: frozenset[str]
    after: tuple[str, ...]    # stages whose nodes must be provisioned first


# From the role catalogue (estate.catalogue.STAGES and each role's stage). Identity
# (users, groups) is the first step of every node's own run, so it needs no stage of
# its own; the munge key is a secret resource the Slurm stages depend on.
STAGES = tuple(Stage(name, frozenset(r.name for r in ROLES.values() if r.stage == name), after)
               for name, after in CATALOGUE_STAGES)


@dataclass(frozen=True)
class NodeStep:
    node: str
    stage: str
    command: str
    digest: str                  # of the artifacts the node consumes: the trigger
    secrets: tuple[str, ...]     # "munge", "jwt"


@dataclass
class Plan:
    steps: list[NodeStep]        # in stage order
    stages: dict[str, list[str]]
    secrets: tuple[str, ...]     # the secrets any node needs

    def after(self, step: NodeStep) -> list[str]:
        """Nodes that must be provisioned before this one."""
        stage = next(s for s in STAGES if s.name == step.stage)
        return [n for s in stage.after for n in self.stages[s] if n != step.node]


def stage_of(roles: list[str]) -> str | None:
    return next((s.name for s in STAGES if s.roles & set(roles)), None)


def apply_command(spec_path: str, node: str) -> str:
    return APPLY.format(spec=shlex.quote(spec_path), node=shlex.quote(node))


def secret_hosts(estate: Estate, artifacts: Artifacts) -> dict[str, Hostlist]:
    """Which nodes' runs get which secret.

    Munge authenticates every Slurm daemon and client: the nodes that install a
    Slurm artifact. The JWT key is read by slurmctld, and only when slurmrestd makes
    slurm.conf enable auth/jwt.
    """
    munge = [r for a in artifacts.values() if a.plane == slurm_render.PLANE
             for r in a.consumers.ranges]
    out = {"munge": Hostlist(munge)}
    if uses_jwt(estate.spec):
        out["jwt"] = Hostlist.from_names(estate.spec.slurm.controllers)
    return out


def plan(estate: Estate, artifacts: Artifacts, spec_path: str) -> Plan:
    holders = secret_hosts(estate, artifacts)
    stages: dict[str, list[str]] = {s.name: [] for s in STAGES}
    steps: dict[str, list[NodeStep]] = {s.name: [] for s in STAGES}
    for group, hosts in zip(estate.spec.nodes, estate.group_hosts):
        stage = stage_of(group.roles)
        if stage is None:
            continue
        for node in hosts:
            secrets = tuple(k for k, hl in holders.items() if node in hl)
            steps[stage].append(NodeStep(node, stage, apply_command(spec_path, node),
                                         artifacts.digest_for_node(node), secrets))
            stages[stage].append(node)
    used = tuple(k for k, hl in holders.items() if hl)
    return Plan([st for s in STAGES for st in steps[s.name]], stages, used)


# --- stack outputs -------------------------------------------------------------------

def inventory(estate: Estate, the_plan: Plan) -> dict:
    """Node groups on ranges (hosts, class, plane, roles, addresses) and hosts per stage."""
    blocks = {(b.group, b.segment): b for b in estate.address_blocks}
    groups = []
    for gi, (group, hosts) in enumerate(zip(estate.spec.nodes, estate.group_hosts)):
        addrs = {}
        for seg in group.addresses:
            b = blocks.get((gi, seg))
            if b:
                first, last = b.address(0), b.address(b.count - 1)
                addrs[seg] = str(first) if b.count == 1 else f"{first}-{last}"
        groups.append({"hosts": str(hosts), "count": len(hosts), "class": group.node_class,
                       "plane": group.plane or "shared", "roles": list(group.roles),
                       "rack": group.rack, "addresses": addrs})
    return {"nodes": sum(g["count"] for g in groups), "groups": groups,
            "stages": {k: str(Hostlist.from_names(v)) for k, v in the_plan.stages.items() if v}}


def endpoints(estate: Estate) -> dict:
    spec = estate.spec
    seg = spec.slurm.address_segment
    out = {"slurmctld": [f"{estate.address(c, seg) or c}:{PORTS['slurmctld']}"
                         for c in spec.slurm.controllers]}
    rest = spec.slurm.slurmrestd
    if rest is not None:
        out["slurmrestd"] = [f"http://{estate.address(n, rest.segment) or n}:{rest.port}"
                             for n in estate.role_hosts("slurmrestd")]
    if spec.kubernetes is not None and k8s_render.control_planes(estate):
        out["kubernetes_api"] = f"https://{k8s_render.api_endpoint(estate)}"
    return out


def manifests(artifacts: Artifacts) -> list[tuple[str, bytes]]:
    """The Kubernetes objects to create, in the order a control plane applies them."""
    return [(p, a.content) for p, a in sorted(artifacts.items()) if p.startswith(MANIFESTS)]
