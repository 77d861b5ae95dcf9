"""Cluster check of the Kubernetes plane, where a cluster exists (ESTATE_KUBECONFIG): its GPU
workers advertise, and are labelled with, what the spec says (estate.verify.k8s_view).
Reported on the first control plane checked; skipped, with the reason, without a cluster."""
from __future__ import annotations

import pytest

from estate.model import kubernetes as k8s
from estate.verify.k8s_view import compare, kubectl_nodes, no_cluster_reason
from estate.verify.plugin import on_nodes

ROLE = "cluster"


def _first_control_plane(ctx) -> list[str]:
    if not ctx.estate.spec.kubernetes:
        return []
    return [n.name for n in k8s.control_planes(ctx.estate) if n.name in ctx.nodes][:1]


@on_nodes(_first_control_plane)
def test_gpu_nodes_match_spec(node, ctx):
    nodes = kubectl_nodes()
    if nodes is None:
        pytest.skip(no_cluster_reason())
    mismatches = compare(ctx.estate, nodes)
    assert not mismatches, "; ".join(str(m) for m in mismatches)
