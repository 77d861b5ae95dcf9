"""What the Pulumi program creates, as plain data: no Pulumi import here.

One provisioning step per node, ordered in stages, and within the workers' stage
the workers a change restarts in `estate diff`'s batches (against the tree the
stack last applied, which a last step records); its trigger is the digest of
exactly the artifacts the node consumes; the secrets it is handed; and the
stack outputs (inventory, endpoints). Kept apart from the component so the
graph can be computed and shown (``estate plan``) without the Pulumi runtime.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from estate import paths
from estate.catalogue import ROLES, STAGES as CATALOGUE_STAGES
from estate.model import bridge, cni
from estate.model.services import MANIFESTS, PORTS, uses_jwt
from estate.provision.inventory import targets
from estate.render import kubernetes as k8s_render
from estate.render import slurm as slurm_render
from estate.render.artifacts import Artifacts
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

# The provisioning command for one node; the one place its command line is spelled.
# `estate pulumi step` is `estate apply --limit NODE --no-manifests` (the stack's ConfigGroup
# owns the Kubernetes manifests but the pod network's, which the control plane's step
# applies: estate.model.cni.ROLE_MANIFESTS) that fails on an unsupported role the stack
# does not accept, takes the join material from its environment and prints the node's
# outputs.
STEP = "exec {cli} pulumi step {spec} {node}"
CLI_ENV = "ESTATE_PULUMI_CLI"
# The join material a Kubernetes control plane's step outputs (secret) and the steps that
# join it take in their environment: never on a command line.
JOIN_ENV = {"token": "ESTATE_KUBEADM_TOKEN", "ca_cert_hash": "ESTATE_KUBEADM_CA_CERT_HASH",
            "certificate_key": "ESTATE_KUBEADM_CERTIFICATE_KEY"}
INIT = "kubernetes/kubeadm/init.yaml"
JOIN = "kubernetes/kubeadm/join/"
# The role code a node's step runs: roles/<deploy>/ for each of its deploys, and the
# library they share. A role's own tests are not code that runs on a node.
ROLES_DIR = paths.ROLES
SHARED_ROLE_CODE = ("_lib",)
# The tree the stack last applied (estate:appliedTree, relative to the project directory;
# empty: this one): the old side of the diff that orders the workers' restarts, written by
# the RECORD step once every node's step has succeeded. It is `estate render`'s tree, as
# `estate apply -o DIR` keeps one.
APPLIED_TREE = "build/pulumi/{stack}/applied-tree"
RECORD = "exec {cli} render {spec} --out {tree} --output text"
RECORD_NAME = "applied-tree"
# The stage whose nodes restart in the diff's batches: the Slurm workers' (estate apply's
# compute phase). A node in an earlier stage (a controller that also runs slurmd) runs
# with that stage: waiting there for a batch of workers would wait for itself.
BATCHED_STAGE = ROLES["slurm_worker"].stage



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
    digest: str                  # of the artifacts the node consumes (trigger)
    secrets: tuple[str, ...]     # keys of services.KEYS: "munge", "jwt", "tls", "cluster-ca"
    code: str = ""               # of the role code it runs and Estate's version (trigger)
    deploys: tuple[str, ...] = ()
    join: str | None = None      # "source": outputs the join material; "sink": takes it
    joiners: tuple[str, ...] = ()  # on the source: the nodes that join with its outputs
    control_plane: bool = False  # a sink that joins as a control plane (needs the cert key)

    @property
    def triggers(self) -> list[str]:
        # A source re-runs when the set of joining nodes changes: a node added later gets
        # a fresh token (the last one was revoked once the others had joined).
        joined = [f"joined by {','.join(self.joiners)}"] if self.joiners else []
        return [self.digest, self.code, *joined]


@dataclass(frozen=True)
class StackConfig:
    """What a stack's config says beside its spec (stacks/Pulumi.<stack>.yaml)."""
    spec: str
    accept: tuple[str, ...] = ()   # estate:acceptUnsupported
    lab: bool = False              # estate:lab: connect as the container lab does
    keep_up: str | float | None = None   # estate:keepUp, as given (see share)
    applied_tree: str = ""         # estate:appliedTree; empty: APPLIED_TREE

    def share(self) -> float:
        """The share of each partition kept up while workers restart: estate:keepUp, else
        `estate apply --keep-up`'s default (estate.operate.diff.order.KEEP_UP)."""
        from estate.operate.diff.order import KEEP_UP
        if self.keep_up in (None, ""):
            return KEEP_UP
        try:
            share = float(self.keep_up)
        except (TypeError, ValueError):
            share = -1.0
        if not 0.0 <= share <= 0.99:
            raise ValueError(f"estate:keepUp is {self.keep_up!r}: give the share of each "
                             "partition kept up while workers restart, a number from 0 to "
                             f"0.99 (default {KEEP_UP}), e.g. `pulumi config set keepUp 0.5`")
        return share

    def tree(self, stack: str) -> str:
        return self.applied_tree or APPLIED_TREE.format(stack=stack)


def read_stack_config(config: dict) -> StackConfig:
    """From a stack file's `config:` mapping (keys "estate:spec", ...)."""
    accept = config.get("estate:acceptUnsupported") or []
    if isinstance(accept, str):
        accept = json.loads(accept)   # `pulumi config` hands structured values as JSON
    lab = config.get("estate:lab", False)
    return StackConfig(str(config["estate:spec"]), tuple(accept),
                       lab in (True, "true", "True"), config.get("estate:keepUp"),
                       str(config.get("estate:appliedTree") or ""))


@dataclass
class Record:
    """The step that keeps the tree the stack applied, once every node's step succeeded."""
    command: str
    tree: str                    # relative to the project directory
    triggers: list[str]          # the whole tree's digest and where it is kept


@dataclass
class Plan:
    steps: list[NodeStep]        # in stage order
    stages: dict[str, list[str]]
    secrets: tuple[str, ...]     # the secrets any node needs
    revoke: str | None = None    # the command that revokes the join token after the joins
    # The workers that restart, in the diff's batches (estate.operate.diff.order.apply_order),
    # each after the one before; empty where nothing restarts in batches (a first deploy).
    batches: list[list[str]] = dataclasses.field(default_factory=list)
    record: Record | None = None

    def after(self, step: NodeStep) -> list[str]:
        """Nodes that must be provisioned before this one (a second control plane waits
        for the first: it joins with the first one's outputs; a batch of workers waits for
        the batch before it)."""
        stage = next(s for s in STAGES if s.name == step.stage)
        before = [n for s in stage.after for n in self.stages[s] if n != step.node]
        source = self.join_source
        if step.join == "sink" and source and source not in before:
            before.append(source)
        return before + self.previous_batch(step.node)

    def previous_batch(self, node: str) -> list[str]:
        for earlier, batch in zip(self.batches, self.batches[1:]):
            if node in batch:
                return list(earlier)
        return []

    @property
    def join_source(self) -> str | None:
        return next((s.node for s in self.steps if s.join == "source"), None)

    def step(self, node: str) -> NodeStep:
        return next(s for s in self.steps if s.node == node)


def stage_of(roles: list[str]) -> str | None:
    return next((s.name for s in STAGES if s.roles & set(roles)), None)


def cli() -> list[str]:
    """The installed CLI, by absolute path: the engine's PATH and directory are not ours.
    $ESTATE_PULUMI_CLI (an absolute path) names another, e.g. Estate installed elsewhere."""
    chosen = os.environ.get(CLI_ENV)
    if chosen:
        if not Path(chosen).is_absolute():
            raise ValueError(f"{CLI_ENV}={chosen!r} is not an absolute path")
        return [chosen]
    exe = Path(sys.executable)
    script = exe.with_name("estate")
    return [str(script)] if script.is_file() else [str(exe), "-m", "estate.cli"]


def step_command(spec_path: str, node: str, accept: tuple[str, ...] = (),
                 lab: bool = False) -> str:
    line = STEP.format(cli=shlex.join(cli()), spec=shlex.quote(spec_path),
                       node=shlex.quote(node))
    return line + "".join(f" --accept-unsupported {shlex.quote(r)}" for r in accept) + \
        (" --lab" if lab else "")


# What a joining worker needs: kubeadm's certificate key decrypts the control plane's
# certificates (kubeadm-certs Secret), which only a joining control plane downloads.
WORKER_JOIN = ("token", "ca_cert_hash")


def join_environment(stdout: str, control_plane: bool = True) -> dict[str, str]:
    """The join material in a control plane's step outputs, as a joining step's environment
    (empty where it handed out none, e.g. kubeadm unsupported there): the certificate key
    only for a joining control plane."""
    join = step_outputs(stdout).get("join") or {}
    return {JOIN_ENV[k]: v for k, v in join.items()
            if k in JOIN_ENV and v and (control_plane or k in WORKER_JOIN)}


def admin_conf(stdout: str) -> str:
    return step_outputs(stdout).get("admin_conf") or ""


def step_outputs(stdout: str) -> dict:
    """A step's outputs: the last JSON line of its stdout (`estate pulumi step` prints one)."""
    lines = [line for line in (stdout or "").splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and
                  not {"tests", "__pycache__"} & set(p.relative_to(directory).parts))


def code_digest(deploys: tuple[str, ...], roles_dir: Path | None = None) -> str:
    """The role code a node runs (its deploys' directories and roles/_lib) and Estate's
    version: editing a role re-triggers exactly the nodes that run it."""
    roles_dir = roles_dir or ROLES_DIR
    h = hashlib.sha256(f"estate {estate_version()}\0".encode())
    for name in (*SHARED_ROLE_CODE, *sorted(deploys)):
        for f in _files(roles_dir / name):
            h.update(f"{name}/{f.relative_to(roles_dir / name).as_posix()}\0".encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def estate_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("estate")
    except PackageNotFoundError:
        return "unknown"


def join_role(consumes: list[str]) -> str | None:
    if INIT in consumes:
        return "source"
    return "sink" if any(p.startswith(JOIN) for p in consumes) else None


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
        # the TLS front's certificates are issued from it on the slurmrestd nodes' runs
        out["tls"] = Hostlist.from_names(estate.role_hosts("slurmrestd"))
        # the cluster CA's seed: on the first control plane's run (the CA) and the
        # controllers' (the minter's credentials), where a tenant has the bridge
        ca_host = bridge.ca_host(estate)
        if ca_host:
            out["cluster-ca"] = Hostlist.from_names(dict.fromkeys(
                [ca_host, *bridge.minter_hosts(estate)]))
    return out


def tree_digest(artifacts: Artifacts) -> str:
    """Of the whole rendered tree (its MANIFEST.json: every file's hash, consumers, mode,
    owner): the record re-runs when anything rendered changes."""
    return hashlib.sha256(json.dumps(artifacts.manifest(), sort_keys=True).encode()).hexdigest()


def record(artifacts: Artifacts, spec_path: str, tree: str) -> Record:
    command = RECORD.format(cli=shlex.join(cli()), spec=shlex.quote(spec_path),
                            tree=shlex.quote(tree))
    return Record(command, tree, [tree_digest(artifacts), tree])


def restart_batches(spec: Path, tree: Path, keep_up: float, log=print) -> list[list[str]]:
    """The workers that restart, in the batches `estate apply` uses (estate.operate.diff.logic's
    worker_batches, the same function): the spec against the tree the stack last applied.
    Empty on a first deploy (no tree) or where no worker restarts: the workers run at once."""
    from estate.operate.diff.logic import worker_batches
    found = worker_batches(spec, tree, keep_up, warn=log)
    if found is None:
        log(f"no applied tree at {tree} (a first deploy, or the tree is kept elsewhere): "
            "the workers run at once")
        return []
    if len(found) > 1:
        log(f"workers restart in {len(found)} batches keeping {keep_up:.0%} of each "
            f"partition up: {' | '.join(','.join(b) for b in found)}")
    return found


def _batched(batches: list[list[str]] | None, stages: dict[str, list[str]]) -> list[list[str]]:
    """The batches' nodes that are in the batched stage, in their order; a single batch
    orders nothing."""
    workers = set(stages.get(BATCHED_STAGE, ()))
    kept = [[n for n in b if n in workers] for b in batches or ()]
    kept = [b for b in kept if b]
    return kept if len(kept) > 1 else []


def plan(estate: Estate, artifacts: Artifacts, spec_path: str,
         accept: tuple[str, ...] = (), roles_dir: Path | None = None, lab: bool = False,
         batches: list[list[str]] | None = None, tree: str | None = None) -> Plan:
    """accept: the roles whose "unsupported here" the stack accepts (estate:acceptUnsupported);
    lab: the steps connect as the container lab does (estate:lab); batches: the workers
    that restart, in restart_batches' order; tree: where the record step keeps the tree
    once every node's step succeeded (None: no record)."""
    unknown = sorted(set(accept) - set(ROLES))
    if unknown:
        raise ValueError(f"acceptUnsupported names no role: {', '.join(unknown)} (roles: "
                         f"{', '.join(ROLES)})")
    holders = secret_hosts(estate, artifacts)
    stages: dict[str, list[str]] = {s.name: [] for s in STAGES}
    steps: dict[str, list[NodeStep]] = {s.name: [] for s in STAGES}
    runs = {t.name: t for t in targets(estate, artifacts.manifest())}
    codes: dict[tuple[str, ...], str] = {}
    for group, hosts in zip(estate.spec.nodes, estate.group_hosts):
        stage = stage_of(group.roles)
        if stage is None:
            continue
        for node in hosts:
            secrets = tuple(k for k, hl in holders.items() if node in hl)
            deploys = tuple(runs[node].deploys)
            if deploys not in codes:
                codes[deploys] = code_digest(deploys, roles_dir)
            steps[stage].append(NodeStep(
                node, stage, step_command(spec_path, node, accept, lab),
                artifacts.digest_for_node(node), secrets, codes[deploys], deploys,
                join_role(runs[node].consumes),
                control_plane=any(p.startswith(MANIFESTS) for p in runs[node].consumes)))
            stages[stage].append(node)
    used = tuple(k for k, hl in holders.items() if hl)
    ordered = [st for s in STAGES for st in steps[s.name]]
    sinks = tuple(st.node for st in ordered if st.join == "sink")
    source = next((st for st in ordered if st.join == "source"), None)
    revoke = None
    if source is not None and sinks:
        ordered = [dataclasses.replace(st, joiners=sinks) if st is source else st
                   for st in ordered]
        revoke = step_command(spec_path, source.node, accept, lab) + " --revoke-join"
    return Plan(ordered, stages, used, revoke, _batched(batches, stages),
                record(artifacts, spec_path, tree) if tree is not None else None)


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
                       "rack": group.rack or "", "addresses": addrs})
    return {"nodes": sum(g["count"] for g in groups), "groups": groups,
            "stages": {k: str(Hostlist.from_names(v)) for k, v in the_plan.stages.items() if v}}


def endpoints(estate: Estate) -> dict:
    spec = estate.spec
    seg = spec.slurm.address_segment
    out: dict[str, Any] = {"slurmctld": [f"{estate.address(c, seg) or c}:{PORTS['slurmctld']}"
                         for c in spec.slurm.controllers]}
    rest = spec.slurm.slurmrestd
    if rest is not None:
        out["slurmrestd"] = [f"http://{estate.address(n, rest.segment) or n}:{rest.port}"
                             for n in estate.role_hosts("slurmrestd")]
    if spec.kubernetes is not None and k8s_render.control_planes(estate):
        out["kubernetes_api"] = f"https://{k8s_render.api_endpoint(estate)}"
    return out


def manifests(artifacts: Artifacts) -> list[tuple[str, bytes]]:
    """The Kubernetes objects to create, in the order a control plane applies them; not the
    pod network's, which the control plane's step applies itself (cni.ROLE_MANIFESTS)."""
    return [(p, a.content) for p, a in sorted(artifacts.items())
            if p.startswith(MANIFESTS) and not cni.role_applied(p)]
