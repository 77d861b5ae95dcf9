"""`estate pulumi step` and `estate pulumi dry-run` without nodes: the step's environment,
its verdict on "unsupported here", and the dry run's order, environments and report,
with a stand-in step command ($ESTATE_PULUMI_CLI) that records how it was called."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from estate.provision.apply import HostResult, Result
from estate.pulumi import dryrun, plan as planning
from estate.pulumi.step import join_from_env, outputs, scrub_environment, token_id, verdict
from roles.k8s_control_plane import tasks as control_plane

ROOT = Path(__file__).resolve().parents[2]


def test_the_step_keeps_only_the_environment_provisioning_uses():
    env = {"PATH": "/usr/bin", "HOME": "/root", "LC_ALL": "C.UTF-8", "SSH_AUTH_SOCK": "/s",
           "ESTATE_MUNGE_KEY_B64": "a2V5", "ESTATE_KUBEADM_TOKEN": "abcdef.0123456789abcdef",
           "PULUMI_CONFIG_PASSPHRASE": "hunter2", "PULUMI_ACCESS_TOKEN": "pul-x",
           "AWS_SECRET_ACCESS_KEY": "x", "PULUMI_RUNTIME_MONITOR": "127.0.0.1:1"}
    dropped = scrub_environment(env)
    assert sorted(env) == ["ESTATE_KUBEADM_TOKEN", "ESTATE_MUNGE_KEY_B64", "HOME", "LC_ALL",
                           "PATH", "SSH_AUTH_SOCK"]
    assert dropped == ["AWS_SECRET_ACCESS_KEY", "PULUMI_ACCESS_TOKEN",
                       "PULUMI_CONFIG_PASSPHRASE", "PULUMI_RUNTIME_MONITOR"]
    assert join_from_env(env) == {"token": "abcdef.0123456789abcdef"}


def test_token_id_is_the_public_half_and_refuses_anything_else():
    assert token_id("abcdef.0123456789abcdef") == "abcdef"
    with pytest.raises(ValueError, match="not a bootstrap token") as exc:
        token_id("abcdef.0123; rm -rf /")
    assert "0123" not in str(exc.value)   # the value itself is never shown


def _result(**hosts) -> Result:
    return Result(dict(hosts), 1.0)


def test_unsupported_fails_the_step_unless_the_stack_accepts_that_role():
    res = _result(k8s2=HostResult(changed=["Install containerd"],
                                  unsupported=["k8s_packages: cannot reach pkgs.k8s.io:443",
                                               "k8s_worker: kubeadm not installed"]))
    v = verdict(res, ("k8s_packages",))
    assert not v.ok
    assert v.reasons == ["k8s2: unsupported here: k8s_worker: kubeadm not installed (the stack "
                         "can accept it: estate:acceptUnsupported: [k8s_worker])"]
    assert v.accepted == ["k8s2: k8s_packages: cannot reach pkgs.k8s.io:443"]
    assert verdict(res, ("k8s_packages", "k8s_worker")).ok
    failed = _result(gpu1=HostResult(failed=["connect: cannot reach gpu1 (10.60.0.13)"]))
    assert not verdict(failed, ("storage",)).ok   # accepting a role never hides a failure
    assert verdict(_result(ctl1=HostResult(changed=["x"])), ()).ok


def test_outputs_carry_the_join_material_only_on_the_control_plane():
    res = _result(k8s1=HostResult(changed=["kubeadm init"]))
    v = verdict(res, ())
    plain = outputs("k8s1", res, v, None)
    assert plain == {"node": "k8s1", "status": "changed", "ok": True, "changed": 1,
                     "unsupported": [], "accepted_unsupported": []}
    material = {"token": "t", "ca_cert_hash": "h", "certificate_key": "k", "admin_conf": "a"}
    out = outputs("k8s1", res, v, material)
    assert out["join"] == {"token": "t", "ca_cert_hash": "h", "certificate_key": "k"}
    assert out["admin_conf"] == "a"
    # what the program and the dry run hand the joining steps, from that stdout
    assert planning.join_environment("log line\n" + json.dumps(out)) == {
        "ESTATE_KUBEADM_TOKEN": "t", "ESTATE_KUBEADM_CA_CERT_HASH": "h",
        "ESTATE_KUBEADM_CERTIFICATE_KEY": "k"}
    assert planning.join_environment(json.dumps(plain)) == {}
    assert planning.admin_conf(json.dumps(out)) == "a"


def test_the_certificate_key_reaches_the_init_config_but_no_command_line(tmp_path):
    """kubeadm stands in: `certs certificate-key` prints a key, `init` records its own
    arguments and the config it was given; the key must be in the config, in no argv."""
    key = "c0ffee" * 10 + "c0fe"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubeadm").write_text(
        "#!/bin/sh\n"
        f'case "$1" in certs) echo {key};; init) echo "$*" > {tmp_path}/argv; '
        f'cat "$4" > {tmp_path}/given;; esac\n')
    (bin_dir / "kubeadm").chmod(0o755)
    src = tmp_path / "init.yaml"
    src.write_text('kind: InitConfiguration\ncertificateKey: "${KUBEADM_CERTIFICATE_KEY}"\n')
    line = control_plane.INIT_COMMAND.format(admin=tmp_path / "admin.conf",
                                             fill=control_plane.FILL_KEY, src=src,
                                             config=tmp_path / "filled.yaml")
    assert key not in line and "sed" not in line
    subprocess.run(["sh", "-c", line], check=True, env={**os.environ,
                                                        "PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert (tmp_path / "given").read_text() == \
        f'kind: InitConfiguration\ncertificateKey: "{key}"\n'
    assert key not in (tmp_path / "argv").read_text()
    assert not (tmp_path / "filled.yaml").exists()   # the filled copy is removed


# --- the dry run, with a stand-in step ---------------------------------------------------

FAKE = f'''#!{sys.executable}
import json, os, sys, time
args = sys.argv[1:]
node = args[3] if args[0] == "pulumi" else args[0]   # `pulumi step SPEC NODE`, `render`
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"node": node, "args": args, "cwd": os.getcwd(),
                          "env": {{k: v for k, v in os.environ.items()
                                  if k.startswith("ESTATE_")
                                  and k not in ("ESTATE_PULUMI_CLI", "ESTATE_TODAY")}},
                          "t": time.monotonic()}}) + "\\n")
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
if node == os.environ.get("FAKE_FAIL"):
    print("it broke", file=sys.stderr)
    sys.exit(1)
out = {{"node": node, "status": "unchanged", "ok": True, "changed": 0}}
if node == "k8s1" and "--revoke-join" not in args:
    out["join"] = {{"token": "abcdef.0123456789abcdef", "ca_cert_hash": "sha256:ca",
                   "certificate_key": "cafe"}}
    out["admin_conf"] = "the admin.conf"
print(json.dumps(out))
'''


@pytest.fixture
def fake_step(tmp_path, monkeypatch):
    script = tmp_path / "estate-step"
    script.write_text(FAKE)
    script.chmod(0o755)
    monkeypatch.setenv("ESTATE_PULUMI_CLI", str(script))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    return tmp_path / "log"


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_dry_run_runs_the_graph_in_order_with_the_engines_environments(fake_step, tmp_path):
    tree = tmp_path / "applied"
    report = dryrun.dry_run("lab", secrets=tmp_path / "keys", log=lambda m: None,
                            tree=str(tree))
    assert report.ok, report.as_dict()
    calls = _calls(fake_step)
    start = {(c["node"], "--revoke-join" in c["args"]): c["t"] for c in calls}
    names = [s.name for s in report.steps]
    assert names == ["node-nfs1", "node-ctl1", "node-login1", "node-gpu1", "node-gpu2",
                     "node-k8s1", "node-k8s2", "join-token-revoke", "applied-tree"]
    # each step started after everything it depends on had finished started
    assert start[("nfs1", False)] < start[("ctl1", False)] < start[("gpu1", False)]
    assert start[("k8s1", False)] < start[("k8s2", False)] < start[("k8s1", True)]
    # the tree it applied is kept after every node's step, for the next run's order
    render = [c for c in calls if c["node"] == "render"]
    calls = [c for c in calls if c["node"] != "render"]
    assert len(render) == 1 and render[0]["args"][-4:] == ["--out", str(tree), "--output", "text"]
    assert render[0]["t"] > max(c["t"] for c in calls if "--revoke-join" not in c["args"])
    assert {c["cwd"] for c in calls} == {str(ROOT)}
    env = {(c["node"], "--revoke-join" in c["args"]): c["env"] for c in calls}
    # ctl1 runs slurmrestd: its TLS front is issued from the seed; and the bridge minter,
    # whose credential is issued from the cluster CA's own seed
    assert sorted(env[("ctl1", False)]) == ["ESTATE_JWT_KEY_B64", "ESTATE_K8S_CA_SEED_B64",
                                            "ESTATE_MUNGE_KEY_B64", "ESTATE_TLS_SEED_B64"]
    assert sorted(env[("gpu1", False)]) == ["ESTATE_MUNGE_KEY_B64"]
    assert env[("nfs1", False)] == {}
    # a worker: the token and the CA hash, never the control plane's certificate key
    assert env[("k8s2", False)] == {"ESTATE_KUBEADM_TOKEN": "abcdef.0123456789abcdef",
                                    "ESTATE_KUBEADM_CA_CERT_HASH": "sha256:ca"}
    assert env[("k8s1", True)] == {"ESTATE_KUBEADM_TOKEN": "abcdef.0123456789abcdef"}
    # the lab stack's flags reach every step; the secret outputs reach no report
    assert all(c["args"][-1] in ("--lab", "--revoke-join") for c in calls)
    text = json.dumps(report.as_dict())
    assert "abcdef.0123456789abcdef" not in text and "the admin.conf" not in text
    # the keys stand in for the stack's RandomBytes: made once, reused by the next run
    keys = sorted(p.name for p in (tmp_path / "keys").iterdir())
    assert keys == ["jwt_hs256.key", "k8s-ca.seed", "munge.key", "tls-ca.seed"]


def test_a_failed_step_fails_the_run_and_its_dependants_do_not_run(fake_step, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "ctl1")
    report = dryrun.dry_run("lab", secrets=tmp_path / "keys", log=lambda m: None,
                            tree=str(tmp_path / "applied"))
    outcome = {s.name: s.outcome for s in report.steps}
    assert not report.ok
    assert outcome["node-ctl1"] == "failed" and "it broke" in report.steps[1].summary
    assert {outcome[n] for n in ("node-login1", "node-gpu1", "node-gpu2")} == {"skipped"}
    assert outcome["node-k8s2"] == "ok"   # the other side of the graph goes on
    assert outcome["applied-tree"] == "skipped"   # the last fully applied tree stays
    assert not {"login1", "gpu1", "gpu2"} & {c["node"] for c in _calls(fake_step)}


def test_dry_run_cli_names_the_failed_steps(fake_step, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "nfs1")
    proc = subprocess.run([sys.executable, "-m", "estate.cli", "pulumi", "dry-run", "lab",
                           "--secrets", str(tmp_path / "keys"), "--json",
                           str(tmp_path / "r.json"), "--applied-tree", str(tmp_path / "tree")],
                          cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1
    assert "node-nfs1 failed" in proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["ok"] is False


def _stack_root(tmp_path: Path, change=None) -> Path:
    """A project directory whose lab stack has four GPU workers in its two partitions."""
    import yaml
    stacks = tmp_path / "project" / "stacks"
    stacks.mkdir(parents=True, exist_ok=True)
    (stacks / "Pulumi.lab.yaml").write_text((ROOT / "stacks" / "Pulumi.lab.yaml").read_text())
    data = yaml.safe_load((ROOT / "stacks" / "lab.yaml").read_text()
                          .replace("gpu[1-2]", "gpu[1-4]"))
    if change:
        change(data)
    (stacks / "lab.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return stacks.parent


def _more_gpus(data):
    next(c for c in data["node_classes"] if c["name"] == "gpu-2x")["gpus"]["count"] = 4


def test_dry_run_restarts_the_changed_workers_batch_after_batch(fake_step, tmp_path,
                                                                 monkeypatch):
    """The order the program gives (tests/unit/test_pulumi_program.py): against the tree
    the last run kept, each batch of workers starts once the batch before has finished;
    on a first run (no tree) they start together."""
    from estate.operate.diff.logic import worker_batches
    from estate.pipeline import render_to
    monkeypatch.setenv("FAKE_SLEEP", "0.6")   # each step; the margins below are that long
    root, tree = _stack_root(tmp_path), tmp_path / "applied"

    def starts() -> dict[str, float]:
        fake_step.write_text("")
        report = dryrun.dry_run("lab", secrets=tmp_path / "keys", root=root,
                                log=lambda m: None, tree=str(tree), parallel=8)
        assert report.ok, report.as_dict()
        return {c["node"]: c["t"] for c in _calls(fake_step) if "--revoke-join" not in c["args"]}

    first = starts()
    together = [first[f"gpu{i}"] for i in (1, 2, 3, 4)]
    assert max(together) - min(together) < 0.6   # none waited for another
    render_to(root / "stacks" / "lab.yaml", tree)   # what the record step writes
    _stack_root(tmp_path, _more_gpus)
    batches = worker_batches(root / "stacks" / "lab.yaml", tree, 0.75)
    assert batches == [["gpu1"], ["gpu2"], ["gpu3"], ["gpu4"]]
    steps = {s.name: s.after for s in dryrun.graph("lab", root, str(tree), log=lambda m: None)[0]}
    assert steps["node-gpu2"][-1:] == ["node-gpu1"] and steps["node-gpu4"][-1:] == ["node-gpu3"]
    second = starts()
    gaps = [second[f"gpu{i + 1}"] - second[f"gpu{i}"] for i in (1, 2, 3)]
    assert min(gaps) >= 0.6, gaps   # each waited for the one before to finish
    assert second["login1"] < second["gpu2"]   # not a worker that restarts: no wait


def test_dry_run_refuses_an_unknown_stack():
    with pytest.raises(dryrun.DryRunError, match="no stack 'nosuch'"):
        dryrun.dry_run("nosuch")
