"""slurm_controller: slurmctld up on its state directory and the estate's JWT key."""
from __future__ import annotations

import shlex

import pytest

from estate.verify.plugin import assert_installed_secret

ROLE = "slurm_controller"


def test_slurmctld_running_and_enabled(host, node):
    svc = host.service("slurmctld")
    assert svc.is_running and svc.is_enabled


def test_answers_ping(host, node):
    out = host.run("scontrol ping")
    assert out.rc == 0 and "UP" in out.stdout, out.stdout + out.stderr


def test_state_directory(host, node, ctx):
    d = host.file(ctx.runtime["slurm_state_dir"])
    user = ctx.runtime.get("slurm_user", "slurm")
    assert d.is_directory and (d.user, d.group, d.mode) == (user, user, 0o700)


def test_jwt_key(host, node, ctx):
    path = ctx.runtime.get("jwt_key")
    if not path:
        pytest.skip("the rendered slurm.conf enables no JWT authentication")
    assert_installed_secret(host, ctx, path, "jwt_hs256.key", mode=0o600,
                            owner=ctx.runtime.get("slurm_user", "slurm"),
                            what="the estate's JWT key")


def test_the_minter_keeps_a_token_per_bridged_tenant(host, node, ctx):
    """The timer has run: each bridged tenant's token lies root-only on the controller and
    names the grant's user (only the claims are read; the token is never printed)."""
    import base64
    import json

    from estate.model.bridge import TOKEN_DIR, grants
    if not grants(ctx.estate):
        pytest.skip("no tenant is granted the bridge")
    for g in grants(ctx.estate):
        f = host.file(f"{TOKEN_DIR}/{g.tenant}.token")
        assert f.exists, f"no token for tenant {g.tenant}: is estate-bridge-mint.timer active?"
        assert (f.user, f.mode) == ("root", 0o600), f"{f.path} is {f.user} {f.mode:04o}"
        payload = f.content_string.strip().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        assert claims.get("sun") == g.user, f"{g.tenant}'s token names {claims.get('sun')}"
        assert 0 < claims["exp"] - claims["iat"] <= g.token_lifetime


def test_the_minter_holds_each_tenants_kubeconfig_root_only(host, node, ctx):
    """Each bridged tenant's kubeconfig (the minter's client certificate and key, issued
    from the cluster CA at apply time) lies in a root-only directory, root 0600, and is the
    one apply issued (digests compared; the file is never read back here)."""
    import posixpath

    from estate.model.bridge import grants, kubeconfig_path, kubeconfig_secret
    if not grants(ctx.estate):
        pytest.skip("no tenant is granted the bridge")
    for g in grants(ctx.estate):
        path = kubeconfig_path(g.tenant)
        d = host.file(posixpath.dirname(path))
        assert (d.user, d.group, d.mode) == ("root", "root", 0o700), \
            f"{d.path} is {d.user}:{d.group} {d.mode:04o}"
        assert_installed_secret(host, ctx, path, kubeconfig_secret(g.tenant), mode=0o600,
                                what=f"tenant {g.tenant}'s kubeconfig apply issued")


def test_the_minters_last_run_succeeded(host, node, ctx):
    """The minter's unit ends well even where no API server answers (the lab has none): it
    keeps the token, logs that the Secret waits, and fails only on a refusal."""
    from estate.model.bridge import grants
    from estate.render.bridge import MINT_UNIT
    if not grants(ctx.estate):
        pytest.skip("no tenant is granted the bridge")
    out = host.run(f"systemctl show -p Result --value {shlex.quote(MINT_UNIT + '.service')}")
    assert out.stdout.strip() == "success", \
        f"{MINT_UNIT}.service: {out.stdout.strip()}; journalctl -u {MINT_UNIT} says why"
