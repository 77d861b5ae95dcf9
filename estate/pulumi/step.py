"""One node's provisioning step, as the Pulumi program runs it (`estate pulumi step`).

It is `estate apply SPEC --limit NODE --no-manifests` with what a step of a graph needs:

- its environment is cut down first to what provisioning uses (PATH, HOME, locale, the
  SSH agent, ESTATE_*): the engine's own variables (PULUMI_CONFIG_PASSPHRASE, access
  tokens) reach no process it starts;
- "unsupported here" fails the step, naming the role and the reason, unless the stack
  accepts it for that role (estate:acceptUnsupported);
- the join material comes in through the environment (ESTATE_KUBEADM_*), never argv;
- it prints one JSON document on stdout, its outputs: status and counts, and on the
  first Kubernetes control plane the join material and admin.conf (the program marks
  that step's stdout secret). Everything for people goes to stderr.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from estate.pulumi.plan import JOIN_ENV

KEEP = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TMPDIR", "TZ",
        "SSH_AUTH_SOCK", "PYTHONPATH", "VIRTUAL_ENV", "COLUMNS"}
KEEP_PREFIXES = ("LC_", "ESTATE_")
TOKEN = re.compile(r"^([a-z0-9]{6})\.[a-z0-9]{16}$")


def scrub_environment(environ=os.environ) -> list[str]:
    """Drop every variable provisioning does not use; returns the names dropped."""
    dropped = sorted(k for k in environ if k not in KEEP and not k.startswith(KEEP_PREFIXES))
    for k in dropped:
        del environ[k]
    return dropped


def join_from_env(environ=os.environ) -> dict[str, str]:
    return {k: environ[v] for k, v in JOIN_ENV.items() if environ.get(v)}


def token_id(token: str) -> str:
    """The public half of a bootstrap token ("abcdef" of "abcdef.0123456789abcdef")."""
    m = TOKEN.match(token)
    if not m:
        raise ValueError(f"{JOIN_ENV['token']} is not a bootstrap token (its value is not shown)")
    return m.group(1)


@dataclass
class Verdict:
    ok: bool
    reasons: list[str]        # why the step fails
    accepted: list[str]       # unsupported roles the stack accepts


def verdict(result, accept: tuple[str, ...]) -> Verdict:
    """Failed nodes fail; an unsupported role fails unless the stack accepts that role."""
    reasons, accepted = [], []
    for node, failed in result.failed.items():
        reasons += [f"{node}: failed: {f}" for f in failed]
    for node, unsupported in result.unsupported.items():
        for u in unsupported:
            role = u.split(":", 1)[0]
            if role in accept:
                accepted.append(f"{node}: {u}")
            else:
                reasons.append(f"{node}: unsupported here: {u} (the stack can accept it: "
                               f"estate:acceptUnsupported: [{role}])")
    return Verdict(not reasons, reasons, accepted)


def outputs(node: str, result, v: Verdict, join: dict | None) -> dict:
    r = result.hosts.get(node)
    out = {"node": node, "status": r.status if r else "absent", "ok": v.ok,
           "changed": len(r.changed) if r else 0, "unsupported": r.unsupported if r else [],
           "accepted_unsupported": v.accepted}
    if join is not None:
        out["join"] = {k: join.get(k, "") for k in JOIN_ENV}
        out["admin_conf"] = join.get("admin_conf", "")
    return out


def run_step(spec: Path, node: str, conn, secrets_dir: Path | None, accept: tuple[str, ...],
             revoke: bool = False, log=print) -> tuple[dict, Verdict]:
    """Render SPEC privately, apply the node's roles (or, with revoke, only delete the
    join token on the control plane), and return the step's outputs and verdict."""
    from estate.pipeline import render_to
    from estate.provision.apply import apply
    from estate.provision.inventory import pyinfra_inventory
    from estate.pulumi.plan import join_role
    work = Path(tempfile.mkdtemp(prefix=f"estate-step-{node}-"))
    os.chmod(work, 0o700)   # the join material is written here, 0600
    material = work / "join.json"
    try:
        result = render_to(spec, work / "tree")
        inv = pyinfra_inventory(result.estate, work / "tree", secrets_dir, conn, node,
                                manifests=False)
        source = join_role(_consumes(result.artifacts, node)) == "source"
        join = join_from_env()
        for _, data in inv.hosts:   # the join material is this node's alone
            if revoke:
                data["estate_revoke_join"] = token_id(join["token"])
                continue
            if join:
                data["estate_join"] = join
            if source:
                data["estate_join_out"] = str(material)
        res = apply(inv, only=["k8s_control_plane"] if revoke else None, log=log)
        v = verdict(res, accept)
        handed = None
        if source and not revoke:
            handed = json.loads(material.read_text()) if material.is_file() else {}
        out = outputs(node, res, v, handed)
        if revoke:
            out["revoked"] = v.ok and not res.unsupported
        return out, v
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _consumes(artifacts, node: str) -> list[str]:
    return [p for p, a in artifacts.items() if node in a.consumers]
