"""Every file the roles installed is the rendered one: bytes (sha256 from MANIFEST.json),
mode and owner. Reported under the role that installs it."""
from __future__ import annotations

ROLE = "*"


def test_installed_as_rendered(host, node, artifact, ctx):
    dest = next(d for a, d, _ in ctx.artifacts_of(node) if a == artifact)
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
