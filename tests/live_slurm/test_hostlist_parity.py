"""estate.spec.hostlist against Slurm's own hostlist code (`scontrol show hostnames/hostlist`).

Random hostlists (prefixes with and without digits, zero padding, mixed widths,
singletons, unsorted terms, duplicates, several bracket groups, suffixes) must expand
and compress exactly as Slurm 22.05 does, and be rejected exactly where Slurm
rejects them. scontrol needs no running controller, only a slurm.conf to read.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from estate.spec.hostlist import Hostlist, HostlistError, compress

pytestmark = [
    pytest.mark.live_slurm,
    pytest.mark.skipif(shutil.which("scontrol") is None,
                       reason="needs Debian's slurm-client (scontrol); make test installs it"),
]


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory):
    conf = tmp_path_factory.mktemp("parity") / "slurm.conf"
    conf.write_text("ClusterName=parity\nSlurmctldHost=localhost\n")
    return str(conf)


def scontrol(conf: str, what: str, expr: str) -> tuple[str, bool]:
    """Slurm's answer and whether it rejected the hostlist."""
    proc = subprocess.run(["scontrol", "show", what, expr], capture_output=True, text=True,
                          env={"SLURM_CONF": conf, "PATH": "/usr/bin:/bin"}, timeout=30)
    rejected = "Invalid hostlist" in proc.stderr or proc.returncode != 0
    return proc.stdout.strip(), rejected


# --- hostlists as people write them, and as they get them wrong -----------------------

# Host names start with a letter or digit (scontrol would take "-a" for an option).
PREFIX = st.one_of(st.just(""), st.builds(lambda a, b: a + b, st.sampled_from("abnx"),
                                          st.text(alphabet="abnx-_.", max_size=2)))
DIGITY_PREFIX = st.builds(lambda p, d: p + d, st.text(alphabet="abn", min_size=1, max_size=2),
                          st.sampled_from(["", "1", "01", "2-"]))


def padded(value: int, pad: int) -> str:
    return f"{value:0{len(str(value)) + pad}d}"


@st.composite
def bracket(draw, descending: bool = False, small: bool = False) -> str:
    """small: for multi-group terms, whose expansion is a product."""
    items = []
    for _ in range(draw(st.integers(1, 2 if small else 3))):
        lo, pad = draw(st.integers(0, 105)), draw(st.integers(0, 2))
        span = draw(st.integers(-1 if descending else 0, 3 if small else 12))  # -1: rejected
        if span == 0 and draw(st.booleans()):
            items.append(padded(lo, pad))
        else:
            hi_pad = draw(st.sampled_from([0, pad]))
            items.append(f"{padded(lo, pad)}-{padded(max(lo + span, 0), hi_pad)}")
    return "[" + ",".join(items) + "]"


@st.composite
def term(draw) -> str:
    prefix = draw(st.one_of(PREFIX, DIGITY_PREFIX))
    kind = draw(st.sampled_from(["name", "numbered", "bracket", "multi", "suffix"]))
    if kind == "name":
        return prefix + draw(st.text(alphabet="abz", min_size=1, max_size=2))
    if kind == "numbered":
        return prefix + padded(draw(st.integers(0, 130)), draw(st.integers(0, 2)))
    if kind == "bracket":
        return prefix + draw(bracket(descending=True))
    infix = draw(st.text(alphabet="abz-", min_size=0, max_size=2))
    if kind == "multi":   # several bracket groups: a[1-2]b[3-4], rack[1-2]-n[01-03]
        groups = draw(st.lists(bracket(small=True), min_size=2, max_size=3))
        return prefix + infix.join(groups)
    return prefix + draw(bracket()) + (infix or "x")   # text after the last bracket


@st.composite
def hostlist_expr(draw) -> str:
    terms = draw(st.lists(term(), min_size=1, max_size=4))
    if draw(st.booleans()):                     # duplicates
        terms.append(draw(st.sampled_from(terms)))
    return ",".join(terms)


EDGES = ["a[9-011]", "a9,a10,a011", "a[1-2]b[3-4]c[5-6]", "b[01-02]x", "x01y1,x1y2",
         "c3,c1,c2,a01,a1,c3,a02", "a[99-100]", "a8,a09", "[1-3]", "123,124,0125",
         "a1,,a2", "n[1-3],n[4-6],n2", "a[3-1]", "a[]", "r1[2-3]", "a[0-5]b"]


def check(conf: str, expr: str, names_order) -> None:
    expanded, rejected = scontrol(conf, "hostnames", expr)
    if rejected:
        with pytest.raises(HostlistError):
            Hostlist.parse(expr)
        return
    want = expanded.split()
    hl = Hostlist.parse(expr)
    assert hl.expand() == want, expr
    assert len(hl) == len(want)
    assert str(hl) == scontrol(conf, "hostlist", expr)[0], expr
    assert Hostlist.parse(str(hl)).expand() == want, expr       # our string reads back
    names = names_order(want)
    if names:
        assert compress(names) == scontrol(conf, "hostlist", ",".join(names))[0], names


# ESTATE_PARITY_EXAMPLES=1000 for a deeper search (~25 s); CI keeps it short (~4 s).
EXAMPLES = int(os.environ.get("ESTATE_PARITY_EXAMPLES", "150"))


def shuffled(data, names: list[str]) -> list[str]:
    """Slurm's expansion unsorted, sometimes with a duplicate: input for compress()."""
    out = data.draw(st.permutations(names)) if len(names) < 40 else list(names)
    if out and data.draw(st.booleans()):
        out.append(data.draw(st.sampled_from(out)))
    return out


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=hostlist_expr(), data=st.data())
@example(expr="a[1-2]b[3-4]c[5-6]", data=None)
def test_expand_and_compress_match_slurm(slurm_conf, expr, data):
    check(slurm_conf, expr, list if data is None else lambda names: shuffled(data, names))


def test_bad_range_in_an_inner_prefix_group_is_an_error_here(slurm_conf):
    """Deliberately stricter than Slurm 22.05: _push_range_list folds a bad range two
    groups before the end into MAX(rc, -1) == 0, so Slurm silently expands the term
    to nothing; a spec with such a term gets an error instead."""
    assert scontrol(slurm_conf, "hostnames", "a1,x[1-0]y[0-0]z[0-1]") == ("a1", False)
    with pytest.raises(HostlistError, match="descending"):
        Hostlist.parse("a1,x[1-0]y[0-0]z[0-1]")


def test_a_range_without_a_high_bound_is_an_error_here(slurm_conf):
    """Deliberately stricter than Slurm 22.05, which reads a[1-] as a1: a range without a
    high bound is a truncated edit far more often than a way to write one host."""
    assert scontrol(slurm_conf, "hostnames", "a[1-]") == ("a1", False)
    with pytest.raises(HostlistError, match="no high bound"):
        Hostlist.parse("a[1-]")


@pytest.mark.parametrize("expr", EDGES)
def test_known_edges_match_slurm(slurm_conf, expr):
    check(slurm_conf, expr, lambda names: list(reversed(names)) + names[:1])
