"""The Pulumi program under Pulumi's own mocks: the graph the engine would receive.

Each run executes __main__.py for real; a recording mock monitor keeps every
RegisterResource request (inputs as serialized for the engine, dependencies,
provider, parent). Mocks stand in for the engine and the providers only.
"""
from __future__ import annotations

import base64
import json
import logging
import runpy
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pytest
import yaml
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.settings import get_root_resource

from estate.pipeline import build
from estate.pulumi.component import build_or_fail
from estate.model.services import JWT_KEY, MUNGE_KEY

JWT_KEY_ENV, MUNGE_KEY_ENV = JWT_KEY.env, MUNGE_KEY.env
from estate.render import write_tree

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "__main__.py"
LAB = ROOT / "stacks" / "lab.yaml"
KUBECONFIG = "{apiVersion: v1, kind: Config, clusters: [], users: [{name: admin}]}"


@dataclass
class Reg:
    type: str
    inputs: dict
    deps: set[str]          # names of the resources it depends on
    provider: str
    parent: str
    secret_outputs: list[str]
    urn: str


class Mocks(pulumi.runtime.Mocks):
    """Random keys like the random provider's, remembered so tests can look for them."""

    def __init__(self):
        self.generated: dict[str, str] = {}   # resource name -> base64 key
        self.plain: list[str] = []            # every form a key was handed out in

    def new_resource(self, args):
        state = dict(args.inputs)
        if args.typ == "random:index/randomBytes:RandomBytes":
            raw = secrets.token_bytes(int(args.inputs["length"]))
            state.update(base64=base64.b64encode(raw).decode(), hex=raw.hex())
            self.generated[args.name] = state["base64"]
            self.plain += [state["base64"], state["hex"]]
        return f"{args.name}-id", state

    def call(self, args):
        return {}


class Recorder(MockMonitor):
    def __init__(self, mocks):
        super().__init__(mocks)
        self.regs: dict[str, Reg] = {}

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.regs[request.name] = Reg(
                request.type, rpc.deserialize_properties(request.object),
                {_name(u) for u in request.dependencies}, request.provider,
                _name(request.parent), list(request.additionalSecretOutputs), response.urn)
        return response


def _name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1] if urn else ""


@dataclass
class Run:
    # repr=False: a failing test prints its fixtures, and these hold the (mock) keys.
    regs: dict[str, Reg] = field(repr=False)
    exports: dict
    generated: dict[str, str] = field(repr=False)
    plain: list[str] = field(repr=False)
    logs: list[str] = field(repr=False)

    def commands(self) -> dict[str, Reg]:
        return {n[len("node-"):]: r for n, r in self.regs.items()
                if r.type == "command:local:Command"}

    def triggers(self) -> dict[str, list]:
        return {n: r.inputs["triggers"] for n, r in self.commands().items()}


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def run_stack(spec: Path, kubeconfig: str | None = None) -> Run:
    mocks, logs = Mocks(), _Collect()
    logger = logging.getLogger("pulumi-mocks")
    logger.addHandler(logs)
    monitor = Recorder(mocks)
    pulumi.runtime.set_mocks(mocks, project="estate", stack="lab", preview=False,
                             monitor=monitor, logger=logger)
    config = {"estate:spec": str(spec)}
    if kubeconfig is not None:
        config["estate:kubeconfig"] = kubeconfig
    pulumi.runtime.set_all_config(config, ["estate:kubeconfig"])
    exports: dict = {}

    @pulumi.runtime.test
    def program():
        root = get_root_resource()
        root.outputs.clear()
        runpy.run_path(str(MAIN))
        exports.update(root.outputs)

    try:
        program()
    finally:
        logger.removeHandler(logs)
    return Run(monitor.regs, exports, mocks.generated, mocks.plain, logs.messages)


@pytest.fixture(scope="module")
def lab() -> Run:
    return run_stack(LAB, kubeconfig=KUBECONFIG)


def _spec_copy(tmp_path: Path, mutate=None) -> Path:
    data = yaml.safe_load(LAB.read_text())
    if mutate:
        mutate(data)
    out = tmp_path / "lab.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    assert build(out).ok, [str(f) for f in build(out).findings]
    return out


def _changed(tmp_path: Path, base, change) -> set[str]:
    """Nodes whose trigger differs between two versions of a spec at the same path."""
    spec = _spec_copy(tmp_path, base)
    before = run_stack(spec).triggers()
    _spec_copy(tmp_path, lambda d: (base(d) if base else None, change(d)))
    after = run_stack(spec).triggers()
    assert before.keys() == after.keys()
    return {n for n in before if before[n] != after[n]}


# --- the resource graph ----------------------------------------------------------------

# Storage first; the munge key before every Slurm node; controllers before workers and
# login; the Kubernetes control plane before its workers, and both before the objects.
LAB_DEPENDENCIES = {
    "node-nfs1": set(),
    "node-ctl1": {"node-nfs1", "munge-key", "slurmrestd-jwt-key"},
    "node-login1": {"node-nfs1", "node-ctl1", "munge-key"},
    "node-gpu1": {"node-nfs1", "node-ctl1", "munge-key"},
    "node-gpu2": {"node-nfs1", "node-ctl1", "munge-key"},
    "node-k8s1": {"node-nfs1"},
    "node-k8s2": {"node-nfs1", "node-k8s1"},
    "kubernetes": {"node-k8s1"},
    "manifests": {"node-k8s1", "node-k8s2"},   # and the provider: see below
    "munge-key": set(),
    "slurmrestd-jwt-key": set(),
}


def test_resource_graph_and_its_dependencies(lab):
    assert {n: r.deps for n, r in lab.regs.items() if r.type != "estate:index:Deployment"} \
        == LAB_DEPENDENCIES
    deployment = [n for n, r in lab.regs.items() if r.type == "estate:index:Deployment"]
    assert deployment == ["lab"]
    assert all(r.parent == "lab" for n, r in lab.regs.items() if n != "lab")
    assert lab.regs["kubernetes"].type == "pulumi:providers:kubernetes"
    group = lab.regs["manifests"]
    assert group.type == "kubernetes:yaml/v2:ConfigGroup"
    assert group.provider == f"{lab.regs['kubernetes'].urn}::kubernetes-id"


def test_each_node_runs_estate_apply_triggered_by_what_it_consumes(lab):
    artifacts = build(LAB).artifacts
    commands = lab.commands()
    assert sorted(commands) == sorted(["nfs1", "ctl1", "login1", "gpu1", "gpu2", "k8s1", "k8s2"])
    for node, reg in commands.items():
        # the stack's ConfigGroup owns the manifests: the roles must not apply them too
        assert reg.inputs["create"] == f"estate apply {LAB} --limit {node} --no-manifests"
        assert reg.inputs["triggers"] == [artifacts.digest_for_node(node)]


def test_manifests_are_the_rendered_ones_in_apply_order(lab):
    docs = [a.content.decode() for p, a in sorted(build(LAB).artifacts.items())
            if p.startswith("kubernetes/manifests/")]
    assert docs and lab.regs["manifests"].inputs["yaml"] == "\n---\n".join(docs)


# --- triggers: a change reprovisions only the nodes that consume what changed ----------

def test_partition_change_reprovisions_only_slurm_conf_readers(tmp_path):
    def longer(d):
        d["slurm"]["partitions"][0]["max_time"] = "2-00:00:00"
    # slurm.conf is installed on controllers and login nodes; workers run configless.
    assert _changed(tmp_path, None, longer) == {"ctl1", "login1"}


def _second_gpu_class(d):
    d["node_classes"].append({"name": "gpu-1x", "sockets": 1, "cores_per_socket": 4,
                              "memory_mb": 8192, "nics": [{"name": "eth0", "speed_gbps": 25}],
                              "gpus": {"model": "a10", "product": "NVIDIA-A10", "count": 1,
                                       "memory_gb": 24}})
    d["nodes"].append({"hosts": "gpu3", "class": "gpu-1x", "plane": "slurm",
                       "roles": ["slurm_worker"], "rack": "r1", "switch": "leaf1",
                       "addresses": {"management": "auto", "fabric": "auto",
                                     "storage": "auto"}})
    d["slurm"]["partitions"][0]["nodes"] = "gpu[1-3]"


def test_gpu_class_change_reprovisions_its_workers_and_controllers(tmp_path):
    def more_gpus(d):
        next(c for c in d["node_classes"] if c["name"] == "gpu-2x")["gpus"]["count"] = 4
    # gpu3 (another class) and the Kubernetes and storage nodes stay as they are.
    assert _changed(tmp_path, _second_gpu_class, more_gpus) == {"ctl1", "login1", "gpu1", "gpu2"}


# --- secrets ---------------------------------------------------------------------------

def _strip_secrets(value):
    if rpc.is_rpc_secret(value):
        return "[secret]"
    if isinstance(value, dict):
        return {k: _strip_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_secrets(v) for v in value]
    return value


def test_keys_reach_the_commands_only_as_secrets(lab):
    keys = {k: r for k, r in lab.regs.items() if r.type == "random:index/randomBytes:RandomBytes"}
    assert {k: r.inputs["length"] for k, r in keys.items()} == \
        {"munge-key": 128, "slurmrestd-jwt-key": 32}
    assert all("base64" in r.secret_outputs for r in keys.values())
    envs = {n: r.inputs.get("environment") for n, r in lab.commands().items()}
    # The whole environment reaches the engine as one secret value.
    assert all(rpc.is_rpc_secret(e) for e in envs.values() if e is not None)
    envs = {n: rpc.unwrap_rpc_secret(e) for n, e in envs.items()}
    assert {n: sorted(e or {}) for n, e in envs.items()} == {
        "nfs1": [], "k8s1": [], "k8s2": [],
        "ctl1": [JWT_KEY_ENV, MUNGE_KEY_ENV],
        "login1": [MUNGE_KEY_ENV], "gpu1": [MUNGE_KEY_ENV], "gpu2": [MUNGE_KEY_ENV]}
    munge, jwt = lab.generated["munge-key"], lab.generated["slurmrestd-jwt-key"]
    # Compared outside the assert so a failure does not print the keys.
    right = envs["ctl1"] == {MUNGE_KEY_ENV: munge, JWT_KEY_ENV: jwt} \
        and envs["gpu1"] == {MUNGE_KEY_ENV: munge}
    assert right, "the commands' environments do not carry the generated keys"
    assert rpc.is_rpc_secret(lab.regs["kubernetes"].inputs["kubeconfig"])


def test_no_secret_in_plain_text_anywhere_the_engine_or_a_user_sees(lab, tmp_path):
    plain = lab.plain + [KUBECONFIG]
    registered = json.dumps({n: _strip_secrets(r.inputs) for n, r in lab.regs.items()})
    exports = json.dumps(lab.exports)
    write_tree(build(LAB).artifacts, tmp_path / "tree")
    tree = "".join(p.read_text(errors="replace") for p in (tmp_path / "tree").rglob("*")
                   if p.is_file())
    logs = "\n".join(lab.logs)
    places = {"inputs": registered, "exports": exports, "rendered tree": tree, "logs": logs}
    leaks = sorted({where for v in plain for where, text in places.items() if v in text})
    assert leaks == [], "a secret in plain text"
    # ...while the secret inputs do carry them: the search above could have found them.
    wrapped = json.dumps([r.inputs for r in lab.regs.values()])
    assert all([v in wrapped for v in [*lab.generated.values(), KUBECONFIG]])


# --- outputs and configuration -----------------------------------------------------------

def test_stack_outputs(lab):
    assert sorted(lab.exports) == ["endpoints", "gpu_budget", "inventory", "kubernetes"]
    assert lab.exports["endpoints"] == {"slurmctld": ["10.60.0.11:6817"],
                                        "slurmrestd": ["http://10.62.0.11:6820"],
                                        "kubernetes_api": "https://10.62.0.13:6443"}
    budget = lab.exports["gpu_budget"]
    assert budget["planes"] == {"kubernetes": 1, "slurm": 4}
    assert budget["partitions"]["gpu"]["gpus"] == 4
    assert budget["tenants"]["inference"]["gpus"] == 1
    inventory = lab.exports["inventory"]
    assert inventory["nodes"] == 7
    assert inventory["stages"] == {"storage": "nfs1", "slurm-controllers": "ctl1",
                                   "slurm-nodes": "login1,gpu[1-2]",
                                   "k8s-control-plane": "k8s1", "k8s-workers": "k8s2"}
    assert lab.exports["kubernetes"].startswith("managed: 6 manifest files")


def test_without_kubeconfig_kubernetes_objects_are_skipped_and_said_so():
    run = run_stack(LAB)
    assert not [r for r in run.regs.values() if r.type.startswith(("kubernetes:", "pulumi:prov"))]
    assert run.exports["kubernetes"].startswith("skipped: no kubeconfig")
    assert len(run.commands()) == 7


def test_spec_with_errors_stops_the_program_naming_each_finding(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(LAB.read_text().replace("controllers: [ctl1]", "controllers: [nosuch1]"))
    with pytest.raises(pulumi.RunError, match=rf"(?s){bad} has errors.*nosuch1"):
        build_or_fail(str(bad))


@pytest.mark.parametrize("stack", sorted(p.name for p in (ROOT / "stacks").glob("Pulumi.*.yaml")))
def test_every_stack_names_a_spec_that_builds(stack):
    spec = yaml.safe_load((ROOT / "stacks" / stack).read_text())["config"]["estate:spec"]
    assert build((ROOT / spec)).ok
