"""Slurm's policy facts that the spec states in few words and Slurm reads in several
places: privacy (PrivateData, operators, coordinators) and preemption (which partitions
preempt which, and where Slurm takes the grace time from).

slurm.conf, slurmdbd.conf and accounting.sh are written from these, and the validators
read them, so a check and the rendered files never disagree.
"""
from __future__ import annotations

from dataclasses import dataclass

from estate.model import model
from estate.model.slurm_keys import private_data as release_private_data
from estate.spec.hostset import HostSet
from estate.spec.resolved import Estate

# What a user of a shared estate must not see of the others' work: their jobs (squeue,
# scontrol, slurmrestd's /jobs; sacct), their usage (sshare, sreport) and their
# associations and accounts (sacctmgr show assoc/account). Slurm's own readers stay
# privileged: SlurmUser and root always (validate_slurm_user), AdminLevel=Operator users
# (validate_operator), and an account's coordinators for that account's jobs
# (slurmctld/proc_req.c _hide_job_user_rec: assoc_mgr_is_user_acct_coord).
SHARED_DEFAULT = ("accounts", "jobs", "usage", "users")
# slurmdbd.conf's PrivateData parses the same words but cloud (src/slurmdbd/read_config.c,
# 22.05 and 24.11), which concerns slurmctld's node list only.
NOT_IN_DBD = frozenset({"cloud"})


def shared(estate: Estate) -> bool:
    """More than one tenant or account: someone's work is someone else's business."""
    spec = estate.spec
    tenants = spec.kubernetes.tenants if spec.kubernetes else []
    return len(tenants) > 1 or len(spec.slurm.accounts) > 1


def private_data(estate: Estate) -> list[str]:
    """slurm.conf's PrivateData values: the spec's (or the shared-estate default), with
    cloud where power saving is on and the release still reads it (22.05: powered-down
    cloud nodes stay in sinfo; 23.02 made that the default and dropped the value)."""
    slurm = estate.spec.slurm
    own = slurm.private_data
    values: list[str] = list(own) if own is not None else (list(SHARED_DEFAULT) if shared(estate) else [])
    known = release_private_data(slurm.version)
    if slurm.power_saving and (known is None or "cloud" in known) and "cloud" not in values:
        values.append("cloud")
    return values


def dbd_private_data(estate: Estate) -> list[str]:
    """slurmdbd.conf's PrivateData: slurmdbd answers sacct, sreport and sacctmgr itself,
    so the same privacy must be said to it too."""
    return [v for v in private_data(estate) if v not in NOT_IN_DBD]


def coordinators(slurm) -> list[tuple[str, list[str]]]:
    """(account, its coordinators) in spec order."""
    return [(a.name, list(a.coordinators)) for a in slurm.accounts if a.coordinators]


def coordinated(slurm) -> list[tuple[str, str]]:
    """(account, user) for every coordinator the spec names, on its account and each
    sub-account below it: slurmdbd makes a coordinator one of the sub-accounts too
    (`sacctmgr show account withcoord` lists vision|alice for research's alice, and
    refuses to delete that one alone)."""
    children: dict[str, list[str]] = {}
    for a in slurm.accounts:
        children.setdefault(a.parent.lower(), []).append(a.name.lower())
    out: list[tuple[str, str]] = []
    for account, users in coordinators(slurm):
        queue, seen = [account.lower()], set()
        while queue:
            name = queue.pop(0)
            if name in seen:
                continue
            seen.add(name)
            out += [(name, u) for u in users if (name, u) not in out]
            queue += children.get(name, [])
    return out


# --- preemption ----------------------------------------------------------------

@dataclass(frozen=True)
class Tier:
    """A partition as preempt/partition_prio sees it."""
    index: int
    name: str
    tier: int
    mode: str           # its jobs' PreemptMode: off, cancel, requeue, suspend
    members: HostSet | None


def partition_mode(slurm, part) -> str:
    """The PreemptMode Slurm applies to the partition's jobs: its own, else the
    cluster's (preempt/partition_prio.c _job_preempt_mode); off without preemption."""
    if not slurm.preemption:
        return "off"
    return part.preempt_mode or slurm.preemption.mode


def tiers(estate: Estate) -> list[Tier]:
    slurm = estate.spec.slurm
    members = {p.name: p.members for p in model(estate).partitions}
    return [Tier(i, p.name, p.priority_tier, partition_mode(slurm, p), members.get(p.name))
            for i, p in enumerate(slurm.partitions) if p.name in members]


def below(estate: Estate, part: Tier) -> list[Tier]:
    """The partitions preempt/partition_prio lets this one preempt a job of, mode aside:
    a lower PriorityTier on shared nodes (preempt_p_job_preempt_check)."""
    return [t for t in tiers(estate) if t.tier < part.tier
            and part.members is not None and t.members is not None
            and part.members & t.members]


def preempted_by(estate: Estate, part: Tier) -> list[Tier]:
    """The partitions whose jobs can preempt this one's (it must not be mode off:
    preempt_p_preemptable)."""
    if part.mode == "off":
        return []
    return [t for t in tiers(estate) if part.name in {b.name for b in below(estate, t)}]
