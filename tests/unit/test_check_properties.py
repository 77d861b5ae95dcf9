"""Properties: host sets match string sets, allocation stays in CIDR without duplicates,
and no combination of seeded mistakes makes a validator crash."""
from __future__ import annotations

from ipaddress import IPv4Network

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estate.check._common import HostSet
from estate.spec.addressing import host_bounds
from estate.spec.hostlist import Hostlist, Range
from estate.spec.model import Spec
from estate.spec.resolved import Estate
from tests.unit.checkutil import findings_for, keyed, spec_dict
from tests.unit.test_check_validators import CASES, put

# --- HostSet agrees with Python sets of the expanded names ---------------------------

prefixes = st.sampled_from(["gpu", "gpu0", "n", "rack1-n", "x9", ""])
ranges = st.builds(
    lambda p, lo, n, w: Range(p or "h", lo, lo + n, w),
    prefixes, st.integers(0, 1200), st.integers(0, 40), st.integers(1, 4))
singles = st.sampled_from(["login", "ctl", "nfs", "gpu"]).map(lambda n: Range(n, single=True))
hostlists = st.lists(st.one_of(ranges, singles), max_size=5).map(Hostlist)


@given(hostlists, hostlists)
def test_hostset_matches_string_sets(a, b):
    sa, sb = set(a), set(b)
    ha, hb = HostSet.of(a), HostSet.of(b)
    assert len(ha) == len(sa)
    assert set((ha & hb).hostlist()) == sa & sb
    assert set((ha - hb).hostlist()) == sa - sb
    assert set((ha | hb).hostlist()) == sa | sb
    assert bool(ha & hb) == bool(sa & sb)


@given(hostlists)
def test_hostset_round_trips_through_slurm_strings(a):
    again = HostSet.of(Hostlist.parse(str(HostSet.of(a)))) if a else HostSet()
    assert set(again.hostlist()) == set(a)


def test_padding_makes_different_hosts_but_shared_digits_match():
    assert not HostSet.of(Hostlist.parse("gpu1")) & HostSet.of(Hostlist.parse("gpu001"))
    assert len(HostSet.of(Hostlist.parse("gpu0[1-9]")) & HostSet.of(Hostlist.parse("gpu[01-09]"))) == 9
    # gpu[1-100] and gpu[001-100] share exactly gpu100
    both = HostSet.of(Hostlist.parse("gpu[1-100]")) & HostSet.of(Hostlist.parse("gpu[001-100]"))
    assert str(both) == "gpu100"


# --- address allocation ----------------------------------------------------------------

def _spec(prefix: int, reserved: int, groups: list[tuple[int, int | None]]) -> Spec:
    """One segment 10.0.0.0/prefix; groups of (size, explicit offset or None for auto)."""
    net = IPv4Network(f"10.0.0.0/{prefix}")
    nodes = []
    for i, (size, offset) in enumerate(groups):
        addr = "auto" if offset is None else str(net.network_address + offset)
        nodes.append({"hosts": f"g{i}n[1-{size}]", "class": "c", "roles": ["storage"],
                      "rack": "r", "addresses": {"m": addr}})
    return Spec.model_validate({
        "name": "p", "segments": [{"name": "m", "cidr": str(net), "vlan": 1,
                                   "purpose": "management", "reserved": reserved}],
        "node_classes": [{"name": "c", "sockets": 1, "cores_per_socket": 1, "memory_mb": 1024}],
        "nodes": nodes, "slurm": {"cluster_name": "p", "controllers": ["g0n1"]}})


group_st = st.lists(st.tuples(st.integers(1, 40),
                              st.one_of(st.none(), st.integers(1, 300))), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(st.integers(22, 28), st.integers(1, 30), group_st)
def test_auto_addresses_are_unique_and_inside_the_cidr(prefix, reserved, groups):
    spec = _spec(prefix, reserved, groups)
    estate = Estate(spec)
    lo, hi = host_bounds(spec.segments[0])
    given_ivs = [(b.first, b.first + b.count - 1) for b in estate.address_blocks if b.given]
    autos = [b for b in estate.address_blocks if not b.given]
    for b in autos:
        first, last = b.first, b.first + b.count - 1
        assert lo <= first and last <= hi, "auto block outside the allocatable range"
        for g_lo, g_hi in given_ivs:
            assert last < g_lo or first > g_hi, "auto block overlaps an explicit one"
    spans = sorted((b.first, b.first + b.count - 1) for b in autos)
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:])), "two auto blocks overlap"
    # every group got addresses or a shortfall, never silently nothing
    placed = {b.group for b in estate.address_blocks} | {s.group for s in estate.address_shortfalls}
    assert placed == set(range(len(groups)))


@settings(max_examples=60, deadline=None)
@given(st.integers(22, 28), st.integers(1, 30), group_st)
def test_checks_flag_every_explicit_overlap_or_overflow(prefix, reserved, groups):
    spec = _spec(prefix, reserved, groups)
    estate = Estate(spec)
    from estate.check import check_spec
    ids = {f.id for f in check_spec(estate)}
    net = spec.segments[0].cidr
    blocks = sorted((b.first, b.first + b.count - 1) for b in estate.address_blocks)
    overlapping = any(a[1] >= b[0] for a, b in zip(blocks, blocks[1:]))
    outside = any(f < int(net.network_address) + 1 or l > int(net.broadcast_address) - 1
                  for f, l in blocks)
    assert overlapping == ("network.duplicate_address" in ids)
    assert outside == ("network.address_outside_segment" in ids)
    assert bool(estate.address_shortfalls) == ("network.cidr_exhausted" in ids)


# --- robustness: any mix of mistakes is reported, never crashes ------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([c for c in CASES if c[2] == "prod"]), min_size=2, max_size=8))
def test_mixed_mistakes_never_crash_a_validator(cases):
    data = spec_dict("prod")
    for _, _, _, edits, _ in cases:
        for where, value in edits.items():
            try:
                put(data, where, value)
            except (KeyError, IndexError, TypeError):
                pass  # an earlier edit removed what this one changes
    found = keyed(findings_for(data))  # must not raise
    assert found, "a spec with seeded mistakes checks clean"


@given(st.lists(hostlists, min_size=1, max_size=4))
def test_resolved_nodes_keep_each_names_first_place_in_order(groups):
    """Estate.nodes is built in C-level loops, and again one by one when a name is there
    twice: either way each name's first group and index, in first-seen order."""
    estate = Estate(_spec(24, 1, [(2, None)]))
    estate.__dict__["group_hosts"] = groups
    want: dict = {}
    for gi, hl in enumerate(groups):
        for i, name in enumerate(hl):
            want.setdefault(name, (name, gi, i))
    assert [tuple(n) for n in estate.nodes.values()] == list(want.values())
    assert list(estate.nodes) == list(want)
