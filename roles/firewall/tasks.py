"""nftables from the node's rendered ruleset (it manages only its own table)."""
from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationError, deploy
from pyinfra.operations import systemd

from roles._lib import consumed, digest_of, install, install_packages, service_current


@deploy("firewall")
def firewall() -> None:
    rulesets = consumed("network/nftables/*.nft")
    if not rulesets:
        return
    if len(rulesets) > 1:
        raise OperationError(f"{host.name} consumes {len(rulesets)} nftables rulesets "
                             f"({', '.join(rulesets)}); the renderer must give each node one")
    install_packages("firewall")
    install(rulesets[0])
    # reload, not restart: stopping nftables.service flushes every table, not only ours.
    service_current(name="Ruleset loaded", service="nftables", digest=digest_of(rulesets),
                    action="reload-or-restart")
    systemd.service(name="Enable nftables", service="nftables", running=True, enabled=True)
