"""The reachability matrix (estate.verify.reachability): from each node, every designed
flow to the other nodes checked succeeds and every undesigned one fails. Tried once for
all nodes (listeners everywhere, every source at once); each node's test reports the
violations whose source it is."""
from __future__ import annotations

import pytest

from estate.verify.plugin import on_nodes

ROLE = "firewall"


def _probed(ctx):
    return list(ctx.nodes) if ctx.reachability_probe else []


@on_nodes(_probed)
def test_reachability(node, ctx):
    outcomes = ctx.reachability()
    mine = [o for o in outcomes if o.probe.src == node]
    if not mine:
        pytest.skip("no other node to probe")
    bad = [str(o) for o in mine if not o.ok]
    assert not bad, f"{len(bad)} of {len(mine)} probes from {node} violate the flow " \
                    f"matrix: " + "; ".join(bad)
