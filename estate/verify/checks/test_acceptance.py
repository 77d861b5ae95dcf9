"""The acceptance suite sites run: Estate's ReFrame checks, as the job user on a login node
(estate.verify.reframe). Here, the quick part: the checks that need no shared filesystem;
the summary says what was left to the tiers that run the rest."""
from __future__ import annotations

import pytest

from estate.verify import reframe
from estate.verify.plugin import on_nodes

ROLE = "cluster"
SUMMARY = "acceptance.txt"   # in the report directory, beside verify.json


@on_nodes(lambda ctx: [n for n in [ctx.submit_node()] if n])
def test_reframe_quick_suite_passes(node, ctx):
    if "reframe/settings.py" not in ctx.nodes[node].consumes:
        pytest.skip(f"{node} has no ReFrame configuration")
    found = reframe.run_suite(ctx, ("quick",))
    text = reframe.summary(found, left=tuple(reframe.LEFT_TO))
    # what `make lab` prints after the lab is up (pytest keeps a passing check's output)
    (ctx.outdir / SUMMARY).write_text(text + "\n")
    assert found, "ReFrame ran no check"
    failed = [o for o in found if o.result not in ("pass", "skip")]
    assert not failed, reframe.summary(failed)


@on_nodes(lambda ctx: [n for n in [ctx.submit_node()] if n])
def test_a_check_broken_on_purpose_fails_the_suite(node, ctx):
    """The suite can fail: the job array check, told to expect a fourth task, is reported
    failed by ReFrame (and nothing else is judged)."""
    if "reframe/settings.py" not in ctx.nodes[node].consumes:
        pytest.skip(f"{node} has no ReFrame configuration")
    found = reframe.run_suite(ctx, ("quick",), broken=("JobArray",), names=("JobArray",))
    assert [(o.check, o.result) for o in found] == [("JobArray", "fail")], \
        reframe.summary(found)
