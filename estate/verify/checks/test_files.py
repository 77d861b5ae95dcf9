"""Every file the roles installed is the rendered one: bytes (sha256 from MANIFEST.json),
mode and owner. Reported under the role that installs it."""
from __future__ import annotations

import importlib

import pytest

from estate.verify.plugin import UNSUPPORTED

ROLE = "*"


def _unsupported(role: str, host, ctx, node) -> str | None:
    """A role's suite may say a node cannot have it here (unsupported_here); its files
    are then not expected either, and the report says why."""
    try:
        suite = importlib.import_module(f"roles.{role}.tests.test_{role}")
    except ModuleNotFoundError:
        return None
    check = getattr(suite, "unsupported_here", None)
    return check(host, ctx, node) if check else None


def test_installed_as_rendered(host, node, artifact, ctx):
    dest, who = next((d, w) for a, d, w in ctx.artifacts_of(node) if a == artifact)
    problem = _unsupported(who, host, ctx, node)
    if problem:
        pytest.skip(f"{UNSUPPORTED}: {problem}")
    info = ctx.manifest[artifact]
    f = host.file(dest)
    assert f.exists, f"{dest} is missing"
    assert f.sha256sum == info["sha256"], f"{dest} differs from the rendered {artifact}"
    if dest == "/etc/hosts":
        return  # Docker bind-mounts it; its mode and owner are the container runtime's
    assert f"{f.mode:04o}" == info["mode"], f"{dest} has mode {f.mode:04o}, not {info['mode']}"
    user, _, group = info["owner"].partition(":")
    assert (f.user, f.group) == (user, group or user), \
        f"{dest} is owned by {f.user}:{f.group}, not {info['owner']}"
