"""Hostlist in pure Python: parsing, expansion, ranged strings, membership, errors.

The comparison against a real ``scontrol show hostnames/hostlist`` lives with the
live Slurm tests; these pin the behaviour that does not need Slurm installed.
"""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from estate.spec.hostlist import Hostlist, HostlistError, Range, compress, expand, measure
from estate.spec.hostset import HostSet, overlapping


@pytest.mark.parametrize("expr,names", [
    ("gpu[001-003,005]", ["gpu001", "gpu002", "gpu003", "gpu005"]),
    ("n1,n2,n3", ["n1", "n2", "n3"]),
    ("x[9-11]", ["x9", "x10", "x11"]),                 # width comes from the low bound
    ("gpu[098-101]", ["gpu098", "gpu099", "gpu100", "gpu101"]),
    ("a[1-2]b[1-2]", ["a1b1", "a1b2", "a2b1", "a2b2"]),  # brackets multiply, left first
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("login", ["login"]),
    ("ctl1, ctl2", ["ctl1", "ctl2"]),
    ("", []),
])
def test_expand(expr, names):
    assert expand(expr) == names


@pytest.mark.parametrize("expr,ranged", [
    ("gpu[1-3],gpu[4-5]", "gpu[1-5]"),             # adjacent ranges join
    ("h[01-02],h03", "h[01-03]"),
    ("n1,n2,n3", "n[1-3]"),
    ("gpu[001-003,005]", "gpu[001-003,005]"),
    ("ctl1,gpu[01-02],ctl2", "ctl1,gpu[01-02],ctl2"),  # order is kept, not sorted
    ("x1,x01", "x[1,01]"),                         # different widths never join
    ("login", "login"),
    ("gpu7", "gpu7"),
])
def test_ranged_string(expr, ranged):
    assert str(Hostlist.parse(expr)) == ranged


@pytest.mark.parametrize("expr", [
    "gpu[3-1]", "gpu[1-2", "gpu1-2]", "gpu[a]", "gpu[[1]]", "gpu[-2]",
    # Slurm's _parse_single_range reads a missing high bound as lo (gpu1); a range with
    # no end is a typo far more often than a way to write one host, so Estate refuses it
    "gpu[1-]",
])
def test_malformed_expressions_raise(expr):
    with pytest.raises(HostlistError):
        Hostlist.parse(expr)


def test_sorted_deduplicates_like_hostlist_uniq():
    assert str(Hostlist.parse("n3,n1,n2,n2,login").sorted()) == "login,n[1-3]"


def test_compress_keeps_given_order():
    assert compress(["n1", "n2", "n4"]) == "n[1-2,4]"


def test_ten_thousand_nodes_stay_one_range():
    hl = Hostlist.parse("gpu[00001-10000]")
    assert len(hl) == 10_000 and len(hl.ranges) == 1
    assert str(hl) == "gpu[00001-10000]"


def test_membership_by_ranges_respects_padding():
    hl = Hostlist.parse("gpu[001-128],login1")
    assert "gpu064" in hl and "login1" in hl
    assert "gpu64" not in hl and "gpu129" not in hl and "login" not in hl
    assert "x10" in Hostlist.parse("x[9-11]")


def test_equality_and_hash_follow_ranges():
    a, b = Hostlist.parse("n[1-3]"), Hostlist.parse("n1,n2,n3")
    assert a == b and hash(a) == hash(b)
    assert Hostlist.parse("n[1-3]") != Hostlist.parse("n[01-03]")


# --- properties ---------------------------------------------------------------------------

prefixes = st.sampled_from(["gpu", "gpu0", "n", "rack1-n", "x", "a-b."])
ranges = st.builds(lambda p, lo, n, w: Range(p, lo, lo + n, w),
                   prefixes, st.integers(0, 2000), st.integers(0, 30), st.integers(1, 5))
singles = st.sampled_from(["login", "ctl", "nfs"]).map(lambda n: Range(n, single=True))
hostlists = st.lists(st.one_of(ranges, singles), min_size=1, max_size=6).map(Hostlist)


@given(hostlists)
def test_ranged_string_parses_back_to_the_same_hosts(hl):
    assert Hostlist.parse(str(hl)).expand() == hl.expand()


@given(hostlists)
def test_len_and_membership_agree_with_expansion(hl):
    names = hl.expand()
    assert len(hl) == len(names)
    assert all(n in hl for n in names[:50])


@given(st.lists(st.sampled_from(["n1", "n2", "n3", "n10", "n01", "gpu5", "login"]), min_size=1))
def test_from_names_round_trips(names):
    assert Hostlist.from_names(names).expand() == names


@given(hostlists)
def test_measure_bounds_the_parse_without_building_it(hl):
    parsed = Hostlist.parse(str(hl))
    hosts, nranges = measure(str(hl))
    assert hosts == len(parsed) and nranges >= len(parsed.ranges)


@given(st.lists(hostlists, min_size=1, max_size=6))
def test_overlapping_finds_exactly_the_pairs_that_share_a_host(lists):
    sets = [HostSet.of(hl) for hl in lists]
    want = {}
    for i in range(len(sets)):
        earlier = [j for j in range(i) if sets[i] & sets[j]]
        if earlier:
            want[i] = earlier
    assert overlapping(sets) == want


def test_measure_counts_prefix_brackets_and_refuses_oversized():
    assert measure("rack[1-2]-n[01-04,07]") == (10, 4)
    assert measure("n[1-65536]x[1-65536]") == (0, 0)   # over the limit: parse refuses it
    assert measure("gpu[") == (0, 0)


def test_expanded_ranges_are_shared_and_the_names_held_stay_bounded():
    """A range's names are expanded once and shared by every hostlist naming it; a
    long-lived process checking many specs holds at most _EXPANDED_MAX_NAMES of them."""
    from estate.spec import hostlist
    a, b = Hostlist.parse("gpu[00001-10000]"), Hostlist.parse("gpu[00001-10000]")
    assert a.names() is b.names()
    for i in range(40):
        names = Hostlist.parse(f"s{i}n[1-60000]").names()
        assert names[0] == f"s{i}n1" and names[-1] == f"s{i}n60000" and len(names) == 60000
        assert 0 < hostlist._expanded_names <= hostlist._EXPANDED_MAX_NAMES
        assert hostlist._expanded_names == sum(map(len, hostlist._EXPANDED.values()))


def test_a_hostlist_pickles_as_its_ranges_and_comes_back_whole():
    """The names are a cache: a pickle of 10,000 nodes' hostlist carries the ranges alone
    (the fork's result), and the copy is equal, iterates and answers membership alike."""
    import pickle
    hl = Hostlist.parse("gpu[00001-10000],login1")
    assert len(hl.names()) == 10001            # the cache filled
    data = pickle.dumps(hl, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(data) < 400 and b"gpu05000" not in data
    back = pickle.loads(data)
    assert back == hl and hash(back) == hash(hl) and str(back) == str(hl)
    assert back.names() == hl.names() and "gpu09999" in back and "gpu10001" not in back
