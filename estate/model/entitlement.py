"""What each tenant is entitled to, in GPUs: a Kubernetes tenant's nominal quota, a Slurm
account's fair share of the compute nodes' GPUs. `estate report --svg` draws usage against
it; the status pages (estate.render.consoles) show it beside the allocation."""
from __future__ import annotations

from estate.model import model

LIMIT_KIND = {"slurm": "fair share", "kubernetes": "quota"}


def entitled_gpus(estate) -> dict[str, dict[str, float]]:
    """plane -> tenant -> GPUs it is entitled to: a Kubernetes tenant's nominal quota (all
    its models), a Slurm account's fair share of the partitions' GPUs (its shares among
    its siblings', times its parent's)."""
    out: dict[str, dict[str, float]] = {}
    shares = fair_shares(estate.spec.slurm.accounts)
    if shares:
        total = slurm_gpus(estate)
        out["slurm"] = {name: share * total for name, share in shares.items()}
    k8s = estate.spec.kubernetes
    if k8s and k8s.tenants:
        out["kubernetes"] = {t.name: float(sum(t.gpus.values())) for t in k8s.tenants}
    return out


def fair_shares(accounts) -> dict[str, float]:
    """account -> its normalised share of the whole (Slurm's classic fair share tree)."""
    children: dict[str, list] = {}
    for a in accounts:
        children.setdefault(a.parent, []).append(a)
    out: dict[str, float] = {}

    def walk(parent: str, share: float, seen: frozenset) -> None:
        kids = children.get(parent, [])
        total = sum(a.fairshare for a in kids)
        for a in kids:
            if a.name not in seen and total:      # a cycle is check/'s finding, not ours
                out[a.name] = share * a.fairshare / total
                walk(a.name, out[a.name], seen | {a.name})
    walk("root", 1.0, frozenset())
    return out


def slurm_gpus(estate) -> int:
    """GPUs Slurm hands out across its compute nodes."""
    m = model(estate)
    return sum(n * per for g in m.groups if g.slurm_compute for n, per in [m.schedulable(g)])
