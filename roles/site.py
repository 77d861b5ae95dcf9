"""pyinfra CLI entry for every role a node has (host data estate_deploys), in order.

    estate inventory stacks/lab.yaml --format pyinfra --lab > build/inventory.py
    pyinfra -y build/inventory.py roles/site.py --data estate_secrets_dir=.lab/secrets

`estate apply` is the supported path: it runs the same deploys in phases across
nodes (controller before workers) and reports per-node changes.
"""
import importlib

from pyinfra import host

from estate.catalogue import ORDER

for name in ORDER:
    if name in host.data.get("estate_deploys", []):
        getattr(importlib.import_module(f"roles.{name}.tasks"), name)()
