"""The Pulumi program under the real engine, through the Automation API, against a local
file backend: `pulumi preview`, `pulumi up`, a second `up` that changes nothing, and a role
edit that replaces exactly the steps of the nodes running that role.

Runs only where the Pulumi CLI works: it is in none of the registries this project's
machines reach, so elsewhere the test skips and says so. The steps run a stand-in for
`estate pulumi step` ($ESTATE_PULUMI_CLI) that prints what the real one prints, so the
engine, the graph, the secret outputs and the state are real while no node is touched
(the real commands run against the container lab in tests/lab, without the engine).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODES = ("nfs1", "ctl1", "login1", "gpu1", "gpu2", "k8s1", "k8s2")
TOKEN = "abcdef.0123456789abcdef"
ADMIN_CONF = "apiVersion: v1  # the control plane's admin.conf, stand-in"

FAKE_STEP = f'''#!{sys.executable}
"""Stands in for `estate pulumi step SPEC NODE ...`: records its call, prints outputs."""
import json, os, sys
args = sys.argv[1:]
node = args[3] if args[0] == "pulumi" else args[0]   # `pulumi step SPEC NODE`, `render`
with open(os.environ["FAKE_STEP_LOG"], "a") as log:
    log.write(json.dumps({{"node": node, "args": args,
                          "join": os.environ.get("ESTATE_KUBEADM_TOKEN", "")}}) + "\\n")
out = {{"node": node, "status": "unchanged", "ok": True, "changed": 0}}
if node == "k8s1" and "--revoke-join" not in args:
    out["join"] = {{"token": "{TOKEN}", "ca_cert_hash": "sha256:" + "a" * 64,
                   "certificate_key": "b" * 64}}
    out["admin_conf"] = "{ADMIN_CONF}"
print(json.dumps(out))
'''


def _pulumi() -> str:
    exe = shutil.which("pulumi")
    if exe is None:
        pytest.skip("the pulumi CLI is not installed (no reachable registry ships it); "
                    "install it from pulumi.com to run the Automation API test here")
    done = subprocess.run([exe, "version"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"`pulumi version` failed: {done.stderr.strip()}")
    return exe


def _project(tmp_path: Path) -> Path:
    """A copy of the project, so `stack init` writes its salt there, not into stacks/."""
    project = tmp_path / "project"
    (project / "stacks").mkdir(parents=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, project / name)
    for spec in (ROOT / "stacks").glob("*.yaml"):
        shutil.copy(spec, project / "stacks" / spec.name)
    # estate/ and roles/ too: the triggers digest the roles beside the estate package
    for code in ("estate", "roles"):
        shutil.copytree(ROOT / code, project / code, ignore=shutil.ignore_patterns("__pycache__"))
    (project / ".venv").symlink_to(ROOT / ".venv")
    return project


@pytest.mark.pulumi_cli
def test_preview_up_and_a_second_up_on_a_local_backend(tmp_path):
    _pulumi()
    from pulumi import automation as auto
    project = _project(tmp_path)
    (tmp_path / "state").mkdir()
    passphrase = tmp_path / "passphrase"
    passphrase.write_text("test-only\n")
    fake = tmp_path / "estate-step"
    fake.write_text(FAKE_STEP)
    fake.chmod(0o755)
    log = tmp_path / "steps.jsonl"
    env = {"PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
           "PULUMI_CONFIG_PASSPHRASE_FILE": str(passphrase), "PULUMI_SKIP_UPDATE_CHECK": "1",
           "ESTATE_PULUMI_CLI": str(fake), "FAKE_STEP_LOG": str(log),
           # the program imports the copy's estate/ and roles/
           "PYTHONPATH": str(project)}
    stack = auto.create_or_select_stack(
        "lab", work_dir=str(project), opts=auto.LocalWorkspaceOptions(env_vars=env))

    preview = stack.preview()
    assert preview.change_summary.get("create", 0) >= len(NODES) + 3   # + keys, revocation

    up = stack.up()
    assert up.summary.result == "succeeded"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    order = [c["node"] for c in calls if "--revoke-join" not in c["args"]]
    # the applied tree is recorded once, after every node's step
    assert order[-1] == "render" and order.count("render") == 1
    order = order[:-1]
    assert sorted(order) == sorted(NODES)
    assert order.index("nfs1") == 0 and order.index("k8s1") < order.index("k8s2")
    assert order.index("ctl1") < min(order.index(n) for n in ("login1", "gpu1", "gpu2"))
    # the worker and the revocation got the control plane's token in their environment
    assert [c["join"] for c in calls if c["node"] == "k8s2"] == [TOKEN]
    assert [c["join"] for c in calls if "--revoke-join" in c["args"]] == [TOKEN]
    assert "skipped" in up.outputs["kubernetes"].value   # the lab stack accepts no control plane

    state = json.dumps(stack.export_stack().deployment)
    for shown in (state, up.stdout, up.stderr):   # the state, and what `pulumi up` printed
        assert TOKEN not in shown and ADMIN_CONF not in shown and "b" * 64 not in shown

    log.write_text("")
    again = stack.up()
    assert set(again.summary.resource_changes) == {"same"}
    assert log.read_text() == ""

    worker = project / "roles" / "slurm_worker" / "tasks.py"
    worker.write_text(worker.read_text() + "\n# edited\n")
    edited = stack.up()
    assert edited.summary.resource_changes.get("replace") == 2
    assert sorted(json.loads(line)["node"] for line in log.read_text().splitlines()) == \
        ["gpu1", "gpu2"]
    stack.destroy()
