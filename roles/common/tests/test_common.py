"""common: users and groups with the spec's ids, time sync."""
from __future__ import annotations

import pytest

ROLE = "common"
IDENTITY = "common/identity.json"


def test_groups_have_the_specs_gids(host, node, ctx):
    for g in ctx.rendered_json(IDENTITY)["groups"]:
        group = host.group(g["name"])
        assert group.exists, f"group {g['name']} is missing"
        assert group.gid == g["gid"], f"group {g['name']} has gid {group.gid}, not {g['gid']}"


def test_users_have_the_specs_ids(host, node, ctx):
    for u in ctx.rendered_json(IDENTITY)["users"]:
        user = host.user(u["name"])
        assert user.exists, f"user {u['name']} is missing"
        assert (user.uid, user.gid, user.home, user.shell) == \
            (u["uid"], u["gid"], u["home"], u["shell"]), f"user {u['name']} differs"


def test_time_sync(host, node):
    assert host.package("chrony").is_installed
    assert host.service("chrony").is_enabled
    virt = host.run("systemd-detect-virt --container").stdout.strip()
    if virt and virt != "none":
        pytest.skip(f"unsupported here: a {virt} container shares the host's clock and may not "
                    "set it (chrony is installed and enabled, and runs on real nodes)")
    assert host.service("chrony").is_running
