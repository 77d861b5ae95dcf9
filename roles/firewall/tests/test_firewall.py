"""firewall: nftables enabled with the estate's table loaded."""
from __future__ import annotations

ROLE = "firewall"


def test_nftables_enabled(host, node):
    assert host.package("nftables").is_installed
    assert host.service("nftables").is_enabled


def test_estate_table_loaded(host, node):
    out = host.run("nft list table inet estate")
    assert out.rc == 0, f"table inet estate is not loaded: {out.stderr.strip()}"
    assert "chain input" in out.stdout


def test_input_denies_by_default(host, node):
    """The loaded chain drops what no flow names, and counts and logs it."""
    out = host.run("nft list chain inet estate input")
    assert out.rc == 0, f"no input chain in table inet estate: {out.stderr.strip()}"
    assert "policy drop;" in out.stdout, "the input chain does not deny by default"
    assert 'log prefix "estate-drop input: "' in out.stdout
