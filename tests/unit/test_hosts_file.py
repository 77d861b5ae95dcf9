"""/etc/hosts as rendered: every node's every address, written without ipaddress."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from estate.render.network import HOSTS_HEADER, _dotted_run, hosts_file
from estate.spec.load import load
from estate.spec.resolved import Estate

STACKS = sorted(p for p in (Path(__file__).resolve().parents[2] / "stacks").glob("*.yaml")
                if not p.name.startswith("Pulumi."))


@given(st.integers(0, 2**32 - 1), st.integers(0, 1200))
def test_a_run_of_addresses_is_what_ipaddress_writes(first, count):
    count = min(count, 2**32 - first)
    assert _dotted_run(first, count) == [str(ipaddress.IPv4Address(first + i))
                                         for i in range(count)]


@pytest.mark.parametrize("stack", STACKS, ids=lambda p: p.stem)
def test_each_name_resolves_to_the_address_the_estate_gives_it(stack):
    loaded = load(stack)
    estate = Estate(loaded.spec, loaded.files)
    text = hosts_file(estate).decode()
    assert text.startswith(HOSTS_HEADER)
    lines = [line.split("\t") for line in text[len(HOSTS_HEADER):].splitlines()]
    primary = estate.spec.slurm.address_segment
    want = []
    for group, hosts in zip(estate.spec.nodes, estate.group_hosts):
        for name in hosts:
            for seg in group.addresses:
                addr = estate.address(name, seg)
                if addr is not None:
                    want.append([str(addr), name if seg == primary else f"{name}-{seg}"])
    assert lines == want and want
