"""Bridge validators: a tenant's grant to submit to Slurm names things that exist, and
Slurm can enforce it (estate.model.bridge)."""
from __future__ import annotations

from estate.check._common import problem
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING


def _bridged(estate):
    """(tenant index, tenant, its bridge) for every tenant granted the bridge."""
    k8s = estate.spec.kubernetes
    for i, t in enumerate(k8s.tenants if k8s else ()):
        if t.bridge:
            yield i, t, t.bridge


def _at(i: int, *rest) -> tuple:
    return ("kubernetes", "tenants", i, "bridge", *rest)


@validator("bridge.no_slurmrestd", E, "bridge",
           "a tenant is granted the bridge but the estate runs no slurmrestd or accounting")
def no_slurmrestd(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    for i, t, _ in _bridged(estate):
        if slurm.slurmrestd is None or not estate.role_hosts("slurmrestd"):
            yield problem(_at(i), f"tenant '{t.name}' is granted the bridge, but no node runs "
                          "slurmrestd", "give a controller the slurmrestd role and set "
                          "slurm.slurmrestd, or drop the bridge")
        elif slurm.accounting is None:
            yield problem(_at(i), f"tenant '{t.name}' is granted the bridge, but without "
                          "slurm.accounting Slurm has no associations to hold its jobs to "
                          "the grant", "configure slurm.accounting")


@validator("bridge.unknown_user", E, "bridge", "a bridge's user is not in identity.users")
def unknown_user(estate: Estate) -> Problems:
    users = {u.name: u for u in estate.spec.identity.users}
    for i, t, b in _bridged(estate):
        user = users.get(b.user)
        if user is None:
            yield problem(_at(i, "user"), f"bridge user '{b.user}' of tenant '{t.name}' is "
                          "not in identity.users: its jobs could not run on any node",
                          "add the user (with a fixed uid) under identity.users")
        elif user.system or user.uid == 0:
            yield problem(_at(i, "user"), f"bridge user '{b.user}' is a system user: a "
                          "token for it would act as a daemon", "give the tenant a user of "
                          "its own")


@validator("bridge.shared_user", E, "bridge",
           "a bridge's user is also an account member or another tenant's bridge user")
def shared_user(estate: Estate) -> Problems:
    members = {u: a.name for a in estate.spec.slurm.accounts for u in a.users}
    seen: dict[str, str] = {}
    for i, t, b in _bridged(estate):
        if b.user in members:
            yield problem(_at(i, "user"), f"bridge user '{b.user}' is a member of account "
                          f"'{members[b.user]}' (slurm.accounts), which lets it use every "
                          "partition, beyond the grant", "give the tenant a user of its own")
        if b.user in seen:
            yield problem(_at(i, "user"), f"bridge user '{b.user}' is also tenant "
                          f"'{seen[b.user]}''s: one tenant's token would act for the other",
                          "give each tenant a user of its own")
        seen.setdefault(b.user, t.name)


@validator("bridge.unknown_account", E, "bridge", "a bridge's account is not in slurm.accounts")
def unknown_account(estate: Estate) -> Problems:
    accounts = {a.name for a in estate.spec.slurm.accounts}
    for i, t, b in _bridged(estate):
        if b.account not in accounts:
            yield problem(_at(i, "account"), f"tenant '{t.name}''s bridge charges account "
                          f"'{b.account}', which slurm.accounts does not define",
                          f"add it under slurm.accounts, or use one of {sorted(accounts)}")


@validator("bridge.unknown_partition", E, "bridge",
           "a bridge names a partition that does not exist or refuses its account")
def unknown_partition(estate: Estate) -> Problems:
    parts = {p.name: p for p in estate.spec.slurm.partitions}
    for i, t, b in _bridged(estate):
        for j, name in enumerate(b.partitions):
            p = parts.get(name)
            where = _at(i, "partitions", j)
            if p is None:
                yield problem(where, f"tenant '{t.name}''s bridge names partition '{name}', "
                              "which slurm.partitions does not define",
                              f"use one of {sorted(parts)}")
            elif (p.allow_accounts and b.account not in p.allow_accounts) \
                    or b.account in p.deny_accounts:
                yield problem(where, f"partition '{name}' refuses account '{b.account}' "
                              "(allow_accounts/deny_accounts): no job of the grant could "
                              "run there", "grant another partition or account")


@validator("bridge.unknown_qos", E, "bridge",
           "a bridge names a QOS that does not exist or its account may not use")
def unknown_qos(estate: Estate) -> Problems:
    slurm = estate.spec.slurm
    known = {q.name for q in slurm.qos}
    accounts = {a.name: a for a in slurm.accounts}
    for i, t, b in _bridged(estate):
        account = accounts.get(b.account)
        for j, name in enumerate(b.qos):
            if name not in known:
                yield problem(_at(i, "qos", j), f"tenant '{t.name}''s bridge names QOS "
                              f"'{name}', which slurm.qos does not define",
                              f"use one of {sorted(known)}")
            elif account and account.qos and name not in account.qos:
                yield problem(_at(i, "qos", j), f"account '{b.account}' may not use QOS "
                              f"'{name}' (its qos: {account.qos})", "add the QOS to the "
                              "account, or grant one of the account's")
