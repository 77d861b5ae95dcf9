"""Accounts and QOS for an imported spec: the ones slurm.conf names, and where sacctmgr is
reachable (`estate import --accounting`), slurmdbd's associations for real.

slurm.conf only names accounts (AllowAccounts, DenyAccounts) and QOS (AllowQos, QOS=);
they live in slurmdbd. Without --accounting each becomes a spec account (fairshare 1,
under root) or QOS (Slurm's defaults), and the header says their shares and limits are
slurmdbd's, so the spec checks clean and the user knows what to fill in.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from typing import Callable

from estate.importer.report import ImportReport
from estate.spec.bounds import MAX_FAIRSHARE

SOURCE = "sacctmgr"
# sacctmgr -nP: one row per line, '|' between fields, in the order asked for
ACCOUNT_FIELDS = ("Account", "ParentName", "User", "Partition", "Fairshare", "QOS")
QOS_FIELDS = ("Name", "Priority", "MaxWall", "MaxTRESPU")
_GPUS = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")
Runner = Callable[[list[str]], str]


@dataclass
class Accounting:
    """sacctmgr's rows (field name -> value), as read by read()."""
    associations: list[dict[str, str]] = field(default_factory=list)
    qos: list[dict[str, str]] = field(default_factory=list)


def _local(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True,
                          timeout=60).stdout


def _rows(text: str, fields: tuple[str, ...]) -> list[dict[str, str]]:
    return [dict(zip(fields, line.split("|"))) for line in text.splitlines() if line]


def read(cluster: str | None = None, run: Runner = _local) -> Accounting:
    """slurmdbd's associations and QOS through sacctmgr (argument lists, parsable output);
    `run` runs one argv and returns its stdout (the local sacctmgr by default)."""
    where = [f"cluster={cluster}"] if cluster else []
    assoc = run(["sacctmgr", "-nP", "show", "associations", *where,
                 "format=" + ",".join(ACCOUNT_FIELDS)])
    qos = run(["sacctmgr", "-nP", "show", "qos", "format=" + ",".join(QOS_FIELDS)])
    return Accounting(_rows(assoc, ACCOUNT_FIELDS), _rows(qos, QOS_FIELDS))


def associations(doc: dict, accounting: Accounting | None, report: ImportReport) -> None:
    """doc's slurm.accounts and slurm.qos: slurmdbd's where read, then every name the
    partitions give that is still missing."""
    slurm = doc["slurm"]
    accounts = _accounts(accounting, report) if accounting else {}
    qos = _qos(accounting, report) if accounting else {}
    named_accounts = [a for p in slurm["partitions"] for key in ("allow_accounts",
                                                                 "deny_accounts")
                      for a in p.get(key, []) if a not in accounts]
    named_qos = [q for p in slurm["partitions"]
                 for q in [*p.get("allow_qos", []), *filter(None, [p.get("qos")])]]
    named_qos += [q for a in accounts.values() for q in a.get("qos", [])]
    for name in dict.fromkeys(named_accounts):
        accounts[name] = {"name": name, "fairshare": 1}
    missing_qos = [q for q in dict.fromkeys(named_qos) if q not in qos]
    for name in missing_qos:
        qos[name] = {"name": name}
    if named_accounts or missing_qos:
        report.default(_note(named_accounts, missing_qos, accounting is not None))
    if accounts:
        slurm["accounts"] = list(accounts.values())
    if qos:
        slurm["qos"] = list(qos.values())


def _note(accounts: list[str], qos: list[str], read_dbd: bool) -> str:
    what = " and ".join(filter(None, [
        f"accounts {', '.join(dict.fromkeys(accounts))} (fairshare 1, under root)"
        if accounts else "", f"QOS {', '.join(dict.fromkeys(qos))} (Slurm's defaults)"
        if qos else ""]))
    where = ("slurmdbd has no such association" if read_dbd else
             "their parents, shares and limits live in slurmdbd: rerun with --accounting "
             "where sacctmgr reaches it, or fill them in")
    return f"{what}: named by the partitions; {where}"


def _accounts(accounting: Accounting, report: ImportReport) -> dict[str, dict]:
    """Account associations (no user) as spec accounts; user associations as their users.
    root is Slurm's own; a partition-bound user association is reported (the spec grants
    an account's users every partition the account may use)."""
    out: dict[str, dict] = {}
    for i, row in enumerate(accounting.associations, 1):
        name, user = row.get("Account", ""), row.get("User", "")
        if name == "root" or not name:
            continue
        if not user:
            out[name] = _account(row, i, report)
    for i, row in enumerate(accounting.associations, 1):
        name, user = row.get("Account", ""), row.get("User", "")
        if not user or name not in out or user == "root":
            continue
        if row.get("Partition"):
            report.change(SOURCE, i, f"association {user}@{name} partition="
                          f"{row['Partition']}", "written as a user of the account, on "
                          "every partition the account may use")
        users = out[name].setdefault("users", [])
        if user not in users:
            users.append(user)
    return out


def _account(row: dict[str, str], i: int, report: ImportReport) -> dict:
    acct = {"name": row["Account"], "parent": row.get("ParentName") or "root",
            "fairshare": _fairshare(row, i, report)}
    if row.get("QOS"):
        acct["qos"] = [q for q in row["QOS"].split(",") if q]
    return acct


def _fairshare(row: dict[str, str], i: int, report: ImportReport) -> int:
    share = row.get("Fairshare", "1")
    if share.isdigit() and 1 <= int(share) <= MAX_FAIRSHARE:
        return int(share)
    report.change(SOURCE, i, f"account {row['Account']} Fairshare={share}",
                  f"written as fairshare 1 (the spec takes 1-{MAX_FAIRSHARE})")
    return 1


def _qos(accounting: Accounting, report: ImportReport) -> dict[str, dict]:
    out = {}
    for i, row in enumerate(accounting.qos, 1):
        name = row.get("Name", "")
        if not name:
            continue
        q: dict = {"name": name}
        if row.get("Priority", "0").isdigit() and int(row.get("Priority", "0")):
            q["priority"] = int(row["Priority"])
        if row.get("MaxWall"):
            q["max_wall"] = row["MaxWall"]
        tres = row.get("MaxTRESPU", "")
        if (gpus := _GPUS.search(tres)) is not None:
            q["max_gpus_per_user"] = int(gpus.group(1))
        if tres and _GPUS.sub("", tres).strip(","):
            report.drop(SOURCE, i, f"QOS {name} MaxTRESPU={tres}", "the spec's QOS limits "
                        "a user's GPUs only (max_gpus_per_user)")
        out[name] = q
    return out

