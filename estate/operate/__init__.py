"""The operations on a running estate, one folder each (estate/operate/<op>/):

- logic.py: what the operation decides, pure (the live side is passed in); a large one
  is split further by concern (diff: sides.py renders or reads a tree, order.py the
  order `estate apply` follows);
- live.py: what reaches the live estate (ssh, sacct, Prometheus, kubectl), where the
  operation has its own;
- cli.py: the thin command, `register(app)`, which estate.cli.LAZY names.

diff (two renders, what restarts where), drift (the live estate against the spec),
handoff (nodes lent between the planes), report (GPU-hours per tenant), rotate (a secret
to its holders).
"""
