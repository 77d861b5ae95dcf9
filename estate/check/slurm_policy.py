"""Slurm policy validators: preemption as Slurm really applies it, and privacy.

Preemption is read from Slurm's source, the same in 22.05 and 24.11
(src/slurmctld/preempt.c in 22.05, src/interfaces/preempt.c in 24.11, and the
preempt/partition_prio and preempt/qos plugins):
- preempt/partition_prio takes the grace time from the preempted job's partition
  (_get_grace_time: job_ptr->part_ptr->grace_time); preempt/qos from its QOS
  (job_ptr->qos_ptr->grace_time). Neither reads the other's.
- A job is preempted only by a job of a partition with a higher PriorityTier on shared
  nodes (preempt_p_job_preempt_check), and never where its PreemptMode is OFF
  (preempt_p_preemptable).
- The grace (SIGCONT and SIGTERM to the job's steps, then the requeue or cancel at the new
  end time) is given in slurm_job_preempt for CANCEL and REQUEUE only: gang scheduling
  suspends a SUSPEND job without it (node_scheduler.c _preempt_jobs), and without GANG in
  the cluster's PreemptMode a SUSPEND job falls through to SIGKILL.
- preempt/qos takes the mode from the QOS, else the cluster (preempt_qos.c
  _job_preempt_mode): a partition's PreemptMode is never read there.
"""
from __future__ import annotations

from estate.check._common import problem
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model.slurm_keys import private_data as release_private_data
from estate.model.slurm_policy import below, preempted_by, tiers
from estate.model.slurm_refusals import sentence as refusal
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING


def _never_preempted(estate, tier) -> str | None:
    """Why jobs of this partition are never preempted under preempt/partition_prio."""
    if tier.mode == "off":
        return "its PreemptMode is OFF, so its jobs are never preempted"
    if tier.mode == "suspend":
        return ("its jobs are suspended by gang scheduling, which gives no grace time "
                "(node_scheduler.c _preempt_jobs)")
    if not preempted_by(estate, tier):
        return ("no partition with a higher priority_tier shares its nodes, so nothing "
                "preempts its jobs")
    return None


@validator("slurm.grace_time_unused", W, "slurm",
           "a grace time Slurm never reads: the job is never preempted there, or the "
           "PreemptType takes it from elsewhere")
def grace_time_unused(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    preempt = slurm.preemption
    by_name = {t.name: t for t in tiers(estate)}
    for i, part in enumerate(slurm.partitions):
        if not part.grace_time_s:
            continue
        where = ("slurm", "partitions", i, "grace_time_s")
        if preempt and preempt.type == "qos":
            yield problem(where, f"partition '{part.name}' sets grace_time_s, but "
                          "preempt/qos takes a preempted job's grace time from its QOS, "
                          "never from its partition", "set slurm.qos[].grace_time_s on the "
                          "QOS of the jobs that get preempted")
            continue
        why = ("slurm.preemption is not set (PreemptType=preempt/none)" if not preempt
               else _never_preempted(estate, by_name[part.name]) if part.name in by_name
               else None)
        if why:
            targets = [t.name for t in tiers(estate)
                       if t.mode in ("requeue", "cancel") and preempted_by(estate, t)]
            yield problem(where, f"partition '{part.name}' sets grace_time_s "
                          f"{part.grace_time_s}, but {why}: Slurm takes the grace time from "
                          "the preempted job's partition (preempt_partition_prio.c "
                          "_get_grace_time)", "set grace_time_s on the partition whose jobs "
                          f"get preempted ({', '.join(targets) or 'none here'})")
    for i, qos in enumerate(slurm.qos):
        if qos.grace_time_s and not (preempt and preempt.type == "qos"):
            yield problem(("slurm", "qos", i, "grace_time_s"), f"QOS '{qos.name}' sets "
                          "grace_time_s, which only preempt/qos reads",
                          "set slurm.preemption.type: qos, or put the grace time on the "
                          "preempted partition (partitions[].grace_time_s)")


@validator("slurm.preemptor_without_preemptee", W, "slurm",
           "preemption where no partition can preempt another")
def preemptor_without_preemptee(estate: Estate) -> Problems:
    preempt = estate.spec.slurm.preemption
    if not preempt or preempt.type != "partition_prio":
        return
    all_tiers, pairs = tiers(estate), 0
    for tier in all_tiers:
        lower = below(estate, tier)
        preemptable = [t for t in lower if t.mode != "off"]
        pairs += len(preemptable)
        if lower and not preemptable:
            yield problem(("slurm", "partitions", tier.index, "priority_tier"),
                          f"partition '{tier.name}' (priority_tier {tier.tier}) outranks "
                          f"{', '.join(t.name for t in lower)} on shared nodes, but their "
                          "PreemptMode is OFF: its jobs preempt nothing and wait",
                          "give a partition below it preempt_mode requeue or cancel, or drop "
                          "its higher priority_tier")
    if not pairs and not any(below(estate, t) for t in all_tiers):
        yield problem(("slurm", "preemption"), "slurm.preemption is set, but no partition "
                      "has a higher priority_tier than another on shared nodes, so "
                      "preempt/partition_prio never preempts a job",
                      "raise the priority_tier of the partition that should preempt, or "
                      "drop slurm.preemption")


@validator("slurm.preempt_mode_ignored", E, "slurm",
           "a partition PreemptMode that the cluster's PreemptType or PreemptMode overrides")
def preempt_mode_ignored(estate: Estate) -> Problems:
    preempt = estate.spec.slurm.preemption
    if not preempt:
        return      # slurm.preempt_mode_unused
    for i, part in enumerate(estate.spec.slurm.partitions):
        where = ("slurm", "partitions", i, "preempt_mode")
        if part.preempt_mode and preempt.type == "qos":
            yield problem(where, f"partition '{part.name}' sets preempt_mode, but "
                          "preempt/qos takes the mode from the job's QOS or the cluster "
                          "(preempt_qos.c _job_preempt_mode), never from the partition",
                          "drop it, or use slurm.preemption.type: partition_prio")
        elif part.preempt_mode == "suspend" and preempt.mode != "suspend":
            yield problem(where, f"partition '{part.name}' sets preempt_mode suspend, but "
                          f"the cluster's PreemptMode is {preempt.mode.upper()} without GANG "
                          "(Slurm suspends only through gang scheduling): "
                          f"{refusal('preempt_suspend_without_gang')}",
                          "set slurm.preemption.mode: suspend (SUSPEND,GANG), or "
                          "preempt_mode requeue")


def _privileged(slurm):
    for i, name in enumerate(slurm.operators):
        yield ("slurm", "operators", i), name, "operator"
    for i, account in enumerate(slurm.accounts):
        for j, name in enumerate(account.coordinators):
            yield ("slurm", "accounts", i, "coordinators", j), name, \
                f"coordinator of {account.name}"


@validator("slurm.privileged_user_unknown", E, "slurm",
           "an operator or coordinator that slurmdbd has no user for")
def privileged_user_unknown(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    users = {u for a in slurm.accounts for u in a.users}
    users |= {t.bridge.user for t in (estate.spec.kubernetes.tenants
                                      if estate.spec.kubernetes else []) if t.bridge}
    for loc, name, what in _privileged(slurm):
        if not slurm.accounting:
            yield problem(loc, f"'{name}' is named {what}, but without slurm.accounting no "
                          "slurmdbd holds operators or coordinators", "set slurm.accounting, "
                          "or drop the name")
        elif name not in users:
            yield problem(loc, f"'{name}' is named {what}, but no account lists it: "
                          "sacctmgr has no such user to make one", "add it to the users of "
                          "an account (slurm.accounts[].users)")


@validator("slurm.private_data_not_in_release", W, "slurm",
           "a PrivateData value the spec's Slurm release does not read")
def private_data_not_in_release(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    known = release_private_data(slurm.version)
    if known is None:
        return
    for i, value in enumerate(slurm.private_data or []):
        if value not in known:
            note = ": it shows cloud nodes by default (since 23.02)" if value == "cloud" else ""
            yield problem(("slurm", "private_data", i), f"Slurm {slurm.version} reads no "
                          f"PrivateData={value} (its slurm.conf(5) lists "
                          f"{', '.join(sorted(known))}){note}", "drop it")
