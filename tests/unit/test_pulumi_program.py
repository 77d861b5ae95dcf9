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

from estate.operate.diff.logic import worker_batches
from estate.operate.diff.order import KEEP_UP
from estate.model import cni
from estate.model import kubernetes as k8s_model
from estate.pipeline import build
from estate.pulumi import plan as planning
from estate.pulumi.component import build_or_fail
from estate.model.services import CLUSTER_CA_SEED, JWT_KEY, MUNGE_KEY

JWT_KEY_ENV, MUNGE_KEY_ENV, CA_SEED_ENV = JWT_KEY.env, MUNGE_KEY.env, CLUSTER_CA_SEED.env
from estate.render import write_tree

ROOT = Path(__file__).resolve().parents[2]
MAIN = ROOT / "__main__.py"
LAB = ROOT / "stacks" / "lab.yaml"
KUBECONFIG = "{apiVersion: v1, kind: Config, clusters: [], users: [{name: admin}]}"
SOURCE = "node-k8s1"   # the first control plane: its step outputs the join material
# Where a run keeps its applied tree unless a test gives one: never there, so that a tree
# a `pulumi up` left in build/ does not change what these tests see (a first deploy).
NO_TREE = "/nonexistent/estate-tests/applied-tree"


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

    def __init__(self, admin_conf: bool = True):
        self.admin_conf = admin_conf          # whether the control plane prints admin.conf
        self.generated: dict[str, str] = {}   # resource name -> base64 key
        self.plain: list[str] = []            # every form a key was handed out in
        self.join: dict[str, str] = {}        # what the control plane's step printed

    def new_resource(self, args):
        state = dict(args.inputs)
        if args.typ == "random:index/randomBytes:RandomBytes":
            raw = secrets.token_bytes(int(args.inputs["length"]))
            state.update(base64=base64.b64encode(raw).decode(), hex=raw.hex())
            self.generated[args.name] = state["base64"]
            self.plain += [state["base64"], state["hex"]]
        if args.typ == "command:local:Command":
            state["stdout"] = json.dumps({"node": args.name, "status": "changed"})
            if args.name == SOURCE:   # what `estate pulumi step` prints there
                self.join = {"token": f"{secrets.token_hex(3)}.{secrets.token_hex(8)}",
                             "ca_cert_hash": "sha256:" + secrets.token_hex(32),
                             "certificate_key": secrets.token_hex(32),
                             "admin_conf": f"apiVersion: v1 # {secrets.token_hex(16)}"}
                material = {k: v for k, v in self.join.items() if k != "admin_conf"}
                state["stdout"] = json.dumps({"node": "k8s1", "status": "changed",
                                              "join": material,
                                              "admin_conf": self.join["admin_conf"]
                                              if self.admin_conf else ""})
                self.plain += list(self.join.values())
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
    join: dict[str, str] = field(repr=False)

    def commands(self) -> dict[str, Reg]:
        """The node steps (not the token's revocation)."""
        return {n[len("node-"):]: r for n, r in self.regs.items()
                if r.type == "command:local:Command" and n.startswith("node-")}

    def triggers(self) -> dict[str, list]:
        return {n: r.inputs["triggers"] for n, r in self.commands().items()}


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def run_stack(spec: Path, kubeconfig: str | None = None, mocks: Mocks | None = None,
              **extra: str) -> Run:
    """extra: further stack config, e.g. acceptUnsupported='["storage"]' (JSON, as the
    engine hands structured values)."""
    mocks, logs = mocks or Mocks(), _Collect()
    logger = logging.getLogger("pulumi-mocks")
    logger.addHandler(logs)
    logger.setLevel(logging.INFO)   # what `pulumi up` shows: info too, not only warnings
    monitor = Recorder(mocks)
    pulumi.runtime.set_mocks(mocks, project="estate", stack="lab", preview=False,
                             monitor=monitor, logger=logger)
    config = {"estate:spec": str(spec), "estate:appliedTree": NO_TREE}
    if kubeconfig is not None:
        config["estate:kubeconfig"] = kubeconfig
    config.update({f"estate:{k}": v for k, v in extra.items()})
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
    return Run(monitor.regs, exports, mocks.generated, mocks.plain, logs.messages, mocks.join)


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
    "node-ctl1": {"node-nfs1", "munge-key", "slurmrestd-jwt-key",
                  "slurmrestd-tls-seed", "kubernetes-ca-seed"},
    "node-login1": {"node-nfs1", "node-ctl1", "munge-key"},
    "node-gpu1": {"node-nfs1", "node-ctl1", "munge-key"},
    "node-gpu2": {"node-nfs1", "node-ctl1", "munge-key"},
    # the cluster CA's own seed: the CA the bridge's minter certificate chains to
    # (kube_pki); not the TLS front's, which k8s1 does not hold
    "node-k8s1": {"node-nfs1", "kubernetes-ca-seed"},
    "node-k8s2": {"node-nfs1", "node-k8s1"},
    "kubernetes": {"node-k8s1"},
    "manifests": {"node-k8s1", "node-k8s2"},   # and the provider: see below
    # the join token is deleted once every node that joins with it has run
    "join-token-revoke": {"node-k8s1", "node-k8s2"},
    "munge-key": set(),
    "slurmrestd-jwt-key": set(),
    "slurmrestd-tls-seed": set(),
    "kubernetes-ca-seed": set(),
    # the tree this run applied is kept once every node's step has succeeded
    "applied-tree": {"node-nfs1", "node-ctl1", "node-login1", "node-gpu1", "node-gpu2",
                     "node-k8s1", "node-k8s2"},
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


def test_each_node_runs_its_step_triggered_by_what_it_consumes_and_runs(lab):
    result = build(LAB)
    deploys = {t.name: tuple(t.deploys)
               for t in planning.targets(result.estate, result.artifacts.manifest())}
    commands = lab.commands()
    assert sorted(commands) == sorted(["nfs1", "ctl1", "login1", "gpu1", "gpu2", "k8s1", "k8s2"])
    cli = planning.cli()
    assert Path(cli[0]).is_absolute()   # not whatever `estate` the engine's PATH finds
    for node, reg in commands.items():
        # `estate pulumi step` applies with --no-manifests: the ConfigGroup owns them
        assert reg.inputs["create"] == f"exec {' '.join(cli)} pulumi step {LAB} {node}"
        assert reg.inputs["dir"] == str(ROOT)
        joined = ["joined by k8s2"] if node == "k8s1" else []
        assert reg.inputs["triggers"] == [result.artifacts.digest_for_node(node),
                                          planning.code_digest(deploys[node]), *joined]


def test_workers_join_with_the_control_planes_secret_outputs(lab):
    """k8s2's step takes the join material that k8s1's step printed (its stdout, a secret
    output) in its environment; the revocation takes the token the same way."""
    assert lab.regs[SOURCE].secret_outputs == ["stdout"]
    # the command provider logs stdout unless told not to: there, only stderr
    assert lab.regs[SOURCE].inputs["logging"] == "stderr"
    assert not [n for n, r in lab.commands().items() if "logging" in r.inputs and n != "k8s1"]
    assert not [n for n, r in lab.commands().items() if r.secret_outputs and n != "k8s1"]
    worker = lab.regs["node-k8s2"]
    assert SOURCE in worker.deps
    env = worker.inputs["environment"]
    assert rpc.is_rpc_secret(env)
    # a worker joins with the token and the CA hash only: kubeadm's certificate key, which
    # decrypts the control plane's certificates, is for joining control planes
    right = rpc.unwrap_rpc_secret(env) == {
        "ESTATE_KUBEADM_TOKEN": lab.join["token"],
        "ESTATE_KUBEADM_CA_CERT_HASH": lab.join["ca_cert_hash"]}
    assert right, "k8s2's environment is not the worker's share of the join material"
    assert lab.join["certificate_key"] not in str(rpc.unwrap_rpc_secret(env))
    revoke = lab.regs["join-token-revoke"]
    assert revoke.inputs["create"] == \
        f"exec {' '.join(planning.cli())} pulumi step {LAB} k8s1 --revoke-join"
    assert rpc.is_rpc_secret(revoke.inputs["environment"])
    assert rpc.unwrap_rpc_secret(revoke.inputs["environment"]) == \
        {"ESTATE_KUBEADM_TOKEN": lab.join["token"]}
    # the join material is never an argument: no command line carries it
    lines = " ".join(r.inputs["create"] for r in lab.regs.values() if "create" in r.inputs)
    assert not [v for v in lab.join.values() if v in lines]


def test_manifests_are_the_rendered_ones_in_apply_order(lab):
    # not the pod network's: the control plane's step applies it (estate.model.cni)
    docs = [a.content.decode() for p, a in sorted(build(LAB).artifacts.items())
            if p.startswith("kubernetes/manifests/") and not cni.role_applied(p)]
    assert docs and lab.regs["manifests"].inputs["yaml"] == "\n---\n".join(docs)
    assert "kind: Installation" not in lab.regs["manifests"].inputs["yaml"]


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
        {"munge-key": 128, "slurmrestd-jwt-key": 32, "slurmrestd-tls-seed": 32,
         "kubernetes-ca-seed": 32}
    assert all("base64" in r.secret_outputs for r in keys.values())
    envs = {n: r.inputs.get("environment") for n, r in lab.commands().items()}
    # The whole environment reaches the engine as one secret value.
    assert all(rpc.is_rpc_secret(e) for e in envs.values() if e is not None)
    envs = {n: rpc.unwrap_rpc_secret(e) for n, e in envs.items()}
    assert {n: sorted(e or {}) for n, e in envs.items()} == {
        "nfs1": [], "k8s1": [CA_SEED_ENV],   # the cluster CA (estate.provision.kube_pki)
        "k8s2": ["ESTATE_KUBEADM_CA_CERT_HASH", "ESTATE_KUBEADM_TOKEN"],
        "ctl1": [JWT_KEY_ENV, CA_SEED_ENV, MUNGE_KEY_ENV, "ESTATE_TLS_SEED_B64"],
        "login1": [MUNGE_KEY_ENV], "gpu1": [MUNGE_KEY_ENV], "gpu2": [MUNGE_KEY_ENV]}
    munge, jwt = lab.generated["munge-key"], lab.generated["slurmrestd-jwt-key"]
    seed = lab.generated["slurmrestd-tls-seed"]
    # Compared outside the assert so a failure does not print the keys.
    right = envs["ctl1"] == {MUNGE_KEY_ENV: munge, JWT_KEY_ENV: jwt,
                             "ESTATE_TLS_SEED_B64": seed,
                             CA_SEED_ENV: lab.generated["kubernetes-ca-seed"]} \
        and envs["gpu1"] == {MUNGE_KEY_ENV: munge}
    assert right, "the commands' environments do not carry the generated keys"
    assert rpc.is_rpc_secret(lab.regs["kubernetes"].inputs["kubeconfig"])


def test_no_secret_in_plain_text_anywhere_the_engine_or_a_user_sees(lab, tmp_path):
    # the keys, the join token, CA hash, certificate key and admin.conf, the kubeconfig
    plain = lab.plain + [KUBECONFIG]
    assert len(lab.join) == 4 and all(v in plain for v in lab.join.values())
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
    assert all([v in wrapped for v in [*lab.generated.values(), KUBECONFIG, lab.join["token"]]])


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
    assert lab.exports["kubernetes"].startswith("managed: 14 manifest files")


def test_without_kubeconfig_the_control_planes_admin_conf_feeds_the_provider():
    """One `pulumi up`: the provider takes admin.conf from k8s1's step, as a secret."""
    run = run_stack(LAB)
    provider = run.regs["kubernetes"]
    assert SOURCE in provider.deps
    assert rpc.is_rpc_secret(provider.inputs["kubeconfig"])
    right = rpc.unwrap_rpc_secret(provider.inputs["kubeconfig"]) == run.join["admin_conf"]
    assert right, "the provider's kubeconfig is not k8s1's admin.conf"
    assert run.exports["kubernetes"] == ("managed: 14 manifest files (kubernetes/manifests/) "
                                         "through the admin.conf that k8s1's step outputs")


def test_no_admin_conf_from_the_control_plane_fails_rather_than_use_another_cluster():
    # an empty kubeconfig would send the provider to ~/.kube/config
    with pytest.raises(Exception, match="k8s1's step printed no admin.conf"):
        run_stack(LAB, mocks=Mocks(admin_conf=False))


def test_a_stack_accepting_an_unsupported_control_plane_skips_the_objects_and_says_so():
    run = run_stack(LAB, acceptUnsupported='["k8s_packages", "k8s_control_plane"]')
    assert not [r for r in run.regs.values() if r.type.startswith(("kubernetes:", "pulumi:prov"))]
    assert run.exports["kubernetes"].startswith("skipped: no kubeconfig")
    assert "accepts k8s_control_plane as unsupported" in run.exports["kubernetes"]
    for node, reg in run.commands().items():
        assert reg.inputs["create"].endswith(
            f"{node} --accept-unsupported k8s_packages --accept-unsupported k8s_control_plane")


def test_accepting_an_unknown_role_stops_the_program():
    with pytest.raises(pulumi.RunError, match="acceptUnsupported names no role: k8s_pakages"):
        run_stack(LAB, acceptUnsupported='["k8s_pakages"]')


def test_the_lab_stack_connects_as_the_lab_and_accepts_what_containers_cannot_run():
    config = yaml.safe_load((ROOT / "stacks" / "Pulumi.lab.yaml").read_text())["config"]
    stack = planning.read_stack_config(config)
    assert stack.lab and set(stack.accept) == {"storage", "k8s_node", "k8s_packages", "gpu_node",
                                               "k8s_control_plane", "k8s_worker",
                                               "dcgm_exporter"}
    prod = yaml.safe_load((ROOT / "stacks" / "Pulumi.example-prod.yaml").read_text())["config"]
    assert planning.read_stack_config(prod).accept == ()   # everything must converge


def test_project_declares_the_config_it_reads():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"]
    assert project["spec"]["type"] == "string"
    # optional and secret: declared without a default, every stack would have to set it
    # (`pulumi` refuses a stack missing a declared key's value), and an empty default
    # would send the provider to ~/.kube/config
    assert "kubeconfig" not in project
    assert project["acceptUnsupported"]["items"] == {"type": "string"}
    assert project["lab"]["type"] == "boolean"
    # Pulumi's config types have no fractional number: a string, read as one, whose
    # default is `estate apply --keep-up`'s
    assert project["keepUp"]["type"] == "string"
    assert float(project["keepUp"]["default"]) == KEEP_UP
    assert project["appliedTree"] == {**project["appliedTree"], "type": "string", "default": ""}
    read = {m for m in __import__("re").findall(r'config\.\w+\("(\w+)"\)', MAIN.read_text())}
    assert read == set(project) | {"kubeconfig"}


def test_spec_with_errors_stops_the_program_naming_each_finding(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(LAB.read_text().replace("controllers: [ctl1]", "controllers: [nosuch1]"))
    with pytest.raises(pulumi.RunError, match=rf"(?s){bad} has errors.*nosuch1"):
        build_or_fail(str(bad))


@pytest.mark.parametrize("stack", sorted(p.name for p in (ROOT / "stacks").glob("Pulumi.*.yaml")))
def test_every_stack_names_a_spec_that_builds(stack):
    spec = yaml.safe_load((ROOT / "stacks" / stack).read_text())["config"]["estate:spec"]
    assert build((ROOT / spec)).ok


# --- triggers: a change to role code re-runs exactly the nodes that run that role ------

@pytest.fixture
def roles_copy(tmp_path, monkeypatch):
    """The program reads its role code from a copy, which a test then edits."""
    import shutil
    copy = tmp_path / "roles"
    shutil.copytree(ROOT / "roles", copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(planning, "ROLES_DIR", copy)
    return copy


def _retriggered(edit) -> set[str]:
    before = run_stack(LAB).triggers()
    edit()
    after = run_stack(LAB).triggers()
    return {n for n in before if before[n] != after[n]}


def _append(path: Path):
    return lambda: path.write_text(path.read_text() + "\n# edited\n")


@pytest.mark.parametrize("role, nodes", [
    ("slurm_worker", {"gpu1", "gpu2"}),
    ("k8s_worker", {"k8s2"}),
    ("gpu_node", {"k8s2"}),                               # k8s2's GPU, not the Slurm GPUs
    ("storage", {"nfs1", "login1", "gpu1", "gpu2", "k8s2"}),   # servers and clients (k8s1 mounts nothing)
    ("slurmdbd", {"ctl1"}),
    ("_lib", {"nfs1", "ctl1", "login1", "gpu1", "gpu2", "k8s1", "k8s2"}),
])
def test_a_role_file_change_retriggers_exactly_the_nodes_that_run_it(roles_copy, role, nodes):
    assert _retriggered(_append(roles_copy / role / "tasks.py" if role != "_lib"
                                else roles_copy / "_lib" / "facts.py")) == nodes


def test_a_role_test_change_or_a_new_file_elsewhere_retriggers_nothing_it_should_not(roles_copy):
    assert _retriggered(_append(next((roles_copy / "slurm_worker" / "tests").glob("*.py")))) \
        == set()
    assert _retriggered(lambda: (roles_copy / "k8s_control_plane" / "notes.txt")
                        .write_text("a new file is role code too\n")) == {"k8s1"}


def test_a_new_estate_version_retriggers_every_node(monkeypatch):
    before = run_stack(LAB).triggers()
    monkeypatch.setattr(planning, "estate_version", lambda: "99.0.0")
    after = run_stack(LAB).triggers()
    assert {n for n in before if before[n] != after[n]} == set(before)


# --- apply order: the workers a change restarts, in estate diff's batches (issue 31) ----

FOUR_WORKERS = ("gpu[1-2]", "gpu[1-4]")   # the lab's GPU workers, hosts and partitions
STAGE_DEPS = {"node-nfs1", "node-ctl1", "munge-key"}   # a Slurm worker's, as in the lab
WORKERS = ("gpu1", "gpu2", "gpu3", "gpu4")


def _four_workers(tmp_path: Path, change=None) -> Path:
    """The lab with four GPU workers in its two partitions, at one path (a stack's spec)."""
    data = yaml.safe_load(LAB.read_text().replace(*FOUR_WORKERS))
    if change:
        change(data)
    spec = tmp_path / "lab.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def _more_gpus(data):
    """Two more GPUs per gpu-2x node: their device files and Gres change, a slurmd restart
    on every worker of both partitions (and their steps' triggers change: they re-run)."""
    next(c for c in data["node_classes"] if c["name"] == "gpu-2x")["gpus"]["count"] = 4


def _record(run: Run) -> None:
    """Run the record step's command as the command provider does (the real CLI, in the
    project directory): the tree a successful `pulumi up` leaves for the next one."""
    import subprocess
    reg = run.regs["applied-tree"]
    subprocess.run(["/bin/sh", "-c", reg.inputs["create"]], cwd=reg.inputs["dir"], check=True,
                   capture_output=True)


def _worker_deps(run: Run) -> dict[str, set[str]]:
    return {n: run.regs[f"node-{n}"].deps - STAGE_DEPS for n in WORKERS}


def _chained(batches: list[list[str]]) -> dict[str, set[str]]:
    """What each worker waits for beyond its stage: the batch before its own."""
    out = {n: set() for n in WORKERS}
    for earlier, batch in zip(batches, batches[1:]):
        for n in batch:
            out[n] = {f"node-{e}" for e in earlier}
    return out


def test_a_first_deploy_records_its_tree_and_runs_the_workers_at_once(tmp_path):
    tree = tmp_path / "applied"
    spec = _four_workers(tmp_path)
    first = run_stack(spec, appliedTree=str(tree))
    assert _worker_deps(first) == {n: set() for n in WORKERS}
    assert any("no applied tree at" in m and "workers run at once" in m for m in first.logs)
    record = first.regs["applied-tree"]
    assert record.deps == {f"node-{n}" for n in first.commands()}
    assert record.inputs["create"] == \
        f"exec {' '.join(planning.cli())} render {spec} --out {tree} --output text"
    assert record.inputs["dir"] == str(ROOT)
    assert record.inputs["triggers"] == [planning.tree_digest(build(spec).artifacts), str(tree)]
    _record(first)
    # the next run diffs against the recorded tree: no change, nothing to batch
    assert _worker_deps(run_stack(spec, appliedTree=str(tree))) == {n: set() for n in WORKERS}


def _keeps_up(batches: list[list[str]], share: float, partitions: dict) -> bool:
    """Every batch leaves at least `share` of each partition up (or takes one node of a
    partition too small for that)."""
    return all(sum(n in members for n in batch) <= max(1, int(len(members) * (1 - share)))
               for batch in batches for members in partitions.values())


@pytest.mark.parametrize("keep_up, expected", [
    (None, [["gpu1"], ["gpu2"], ["gpu3"], ["gpu4"]]),     # the default, 0.75: one at a time
    ("0.5", [["gpu1", "gpu2"], ["gpu3", "gpu4"]]),
])
def test_a_change_restarting_workers_runs_them_in_the_diffs_batches(tmp_path, keep_up,
                                                                    expected):
    """controllers -> batch 1 -> batch 2 ...: each batch of worker steps depends on the
    one before, as estate.operate.diff.logic.worker_batches (estate apply's function) orders them."""
    tree = tmp_path / "applied"
    spec = _four_workers(tmp_path)
    config = {"appliedTree": str(tree), **({"keepUp": keep_up} if keep_up else {})}
    first = run_stack(spec, **config)
    _record(first)
    _four_workers(tmp_path, _more_gpus)
    changed = run_stack(spec, **config)
    share = float(keep_up or KEEP_UP)
    batches = worker_batches(spec, tree, share)
    assert batches == expected
    assert _worker_deps(changed) == _chained(batches)
    partitions = {p["name"]: set(p["nodes"].replace("gpu[1-4]", ",".join(WORKERS)).split(","))
                  for p in yaml.safe_load(spec.read_text())["slurm"]["partitions"]}
    assert _keeps_up(batches, share, partitions)
    # the controllers come before the first batch, the login node does not wait for any
    assert all({"node-ctl1"} <= changed.regs[f"node-{n}"].deps for n in WORKERS)
    assert not changed.regs["node-login1"].deps & {f"node-{n}" for n in WORKERS}
    # the workers' steps are ones the engine re-runs (their triggers changed), in that order
    rerun = {n for n, t in first.triggers().items() if changed.triggers()[n] != t}
    assert set(WORKERS) <= rerun
    assert any(f"workers restart in {len(expected)} batches" in m for m in changed.logs)


def test_a_change_restarting_no_worker_runs_the_workers_at_once(tmp_path):
    tree = tmp_path / "applied"
    spec = _four_workers(tmp_path)
    _record(run_stack(spec, appliedTree=str(tree)))

    def longer(data):
        data["slurm"]["partitions"][0]["max_time"] = "2-00:00:00"   # a reconfigure
    _four_workers(tmp_path, longer)
    assert worker_batches(spec, tree, KEEP_UP) == []
    assert _worker_deps(run_stack(spec, appliedTree=str(tree))) == {n: set() for n in WORKERS}


def test_batches_chain_only_workers_of_the_batched_stage():
    """A node the batches name outside the workers' stage (a controller that runs slurmd
    too) stays in its own stage: waiting there for workers would wait for itself."""
    result = build(LAB)
    the_plan = planning.plan(result.estate, result.artifacts, str(LAB),
                             batches=[["ctl1", "gpu1"], ["gpu2"]])
    assert the_plan.batches == [["gpu1"], ["gpu2"]]
    assert the_plan.after(the_plan.step("gpu2"))[-1:] == ["gpu1"]
    assert "gpu2" not in the_plan.after(the_plan.step("ctl1"))
    one = planning.plan(result.estate, result.artifacts, str(LAB), batches=[["gpu1", "gpu2"]])
    assert one.batches == [] and "gpu1" not in one.after(one.step("gpu2"))


@pytest.mark.parametrize("value", ["1", "-0.1", "most"])
def test_a_keep_up_out_of_range_stops_the_program(value):
    with pytest.raises(pulumi.RunError, match=rf"estate:keepUp is '{value}'.*from 0 to 0.99"):
        run_stack(LAB, keepUp=value)


def test_only_joining_control_planes_get_the_certificate_key():
    """kubeadm's certificate key decrypts the control plane's certificates: of the joining
    steps, the control planes' take it, the workers' take the token and CA hash only."""
    prod = ROOT / "stacks" / "example-prod.yaml"
    result = build(prod)
    the_plan = planning.plan(result.estate, result.artifacts, str(prod))
    cps = {n.name for n in k8s_model.control_planes(result.estate)}
    sinks = [s for s in the_plan.steps if s.join == "sink"]
    assert {s.node for s in sinks if s.control_plane} == cps - {the_plan.join_source}
    assert any(not s.control_plane for s in sinks)
    out = json.dumps({"join": {"token": "t", "ca_cert_hash": "h", "certificate_key": "k"}})
    assert planning.join_environment(out, control_plane=False) == {
        "ESTATE_KUBEADM_TOKEN": "t", "ESTATE_KUBEADM_CA_CERT_HASH": "h"}
    assert planning.join_environment(out, control_plane=True)[
        "ESTATE_KUBEADM_CERTIFICATE_KEY"] == "k"
