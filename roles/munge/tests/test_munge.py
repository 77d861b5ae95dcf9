"""munge: running on the estate's key, 0400 munge:munge, credentials round-trip."""
from __future__ import annotations

ROLE = "munge"
KEY = "/etc/munge/munge.key"


def test_munged_running_and_enabled(host, node):
    assert host.package("munge").is_installed
    svc = host.service("munge")
    assert svc.is_running and svc.is_enabled


def test_key_owner_and_mode(host, node):
    f = host.file(KEY)
    assert (f.user, f.group, f.mode) == ("munge", "munge", 0o400), \
        f"{KEY} is {f.user}:{f.group} {f.mode:04o}, not munge:munge 0400"


def test_key_is_the_estates(host, node, ctx):
    want = ctx.secret_sha256("munge.key")
    if want is None:
        import pytest
        pytest.skip("no secrets directory given: cannot compare the key (never printed)")
    # Compared as digests; neither the key nor its digest goes into the report.
    assert host.file(KEY).sha256sum == want, f"{KEY} is not the estate's munge key"


def test_credential_round_trip(host, node):
    assert host.run("munge -n | unmunge").rc == 0
