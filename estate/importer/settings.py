"""slurm.conf's global keys onto the spec's typed Slurm fields, else slurm.extra, else
the report (with the reason)."""
from __future__ import annotations

from typing import get_args

from estate.importer.parse import ConfLine
from estate.importer.report import Report
from estate.model.slurm_keys import OWNED, conf_keys
from estate.spec.model import PriorityFlag, ResourceLimit, SelectParameter

TIMEOUTS = {"slurmctldtimeout": "slurmctld", "slurmdtimeout": "slurmd",
            "messagetimeout": "message", "unkillablesteptimeout": "unkillable_step",
            "killwait": "kill_wait", "batchstarttimeout": "batch_start",
            "inactivelimit": "inactive_limit"}
WEIGHTS = {"priorityweightage": "age", "priorityweightfairshare": "fairshare",
           "priorityweightjobsize": "job_size", "priorityweightpartition": "partition",
           "priorityweightqos": "qos", "priorityweightassoc": "assoc"}
# Keys whose source value Estate renders the same way or that the import reads elsewhere
# (controllers, users, accounting host): not reported when their value is this one.
RENDERED = {"selecttype": "select/cons_tres", "schedulertype": "sched/backfill",
            "prioritytype": "priority/multifactor", "authtype": "auth/munge",
            "slurmdport": "6818", "slurmctldport": "6817",
            "grestypes": "gpu", "topologyplugin": "topology/tree", "slurmduser": "root",
            "returntoservice": "2", "switchtype": "switch/none",
            "slurmctldparameters": "enable_configless"}
HANDLED_ELSEWHERE = {"clustername", "slurmctldhost", "controlmachine", "controladdr",
                     "backupcontroller", "backupaddr", "slurmuser", "nodename",
                     "partitionname", "accountingstoragehost", "accountingstoragetype",
                     "accountingstorageport"}


def _time(value: str) -> str:
    return "INFINITE" if value.upper() in ("UNLIMITED", "INFINITE") else value


def _list(value: str, allowed, what: str, report, file, line) -> list[str]:
    known = {a.lower(): a for a in allowed}
    out = []
    for item in filter(None, value.split(",")):
        if item.lower() in known:
            out.append(known[item.lower()])
        else:
            report.drop(file, line.number, f"{what} {item}", f"not one the spec expresses "
                        f"({', '.join(sorted(allowed))})")
    return out


def _scheduler(value: str, report, file, line) -> dict:
    out = {}
    for item in filter(None, value.split(",")):
        key, sep, val = item.partition("=")
        if not sep:
            out[key] = True
        elif val.isdigit():
            out[key] = int(val)
        else:
            report.drop(file, line.number, f"SchedulerParameters {item}",
                        "the spec takes flags and numbers only")
    return out


def _plugin(value: str) -> str:
    return value.split("/", 1)[-1]


def apply(slurm: dict, key: str, written: str, value: str, line: ConfLine, report: Report,
          file: str) -> None:
    """One global setting into `slurm` (the spec's slurm section as a dict)."""
    if key in TIMEOUTS:
        slurm.setdefault("timeouts", {})[TIMEOUTS[key]] = int(value)
    elif key in WEIGHTS:
        slurm.setdefault("priority", {})[WEIGHTS[key]] = int(value)
    elif key == "priorityflags":
        slurm.setdefault("priority", {})["flags"] = _list(value, get_args(PriorityFlag),
                                                          "PriorityFlags", report, file, line)
    elif key == "prioritydecayhalflife":
        slurm.setdefault("priority", {})["decay_half_life"] = value
    elif key == "prioritymaxage":
        slurm.setdefault("priority", {})["max_age"] = value
    elif key == "selecttypeparameters":
        slurm["select_type_parameters"] = _list(value, get_args(SelectParameter),
                                                "SelectTypeParameters", report, file, line)
    elif key == "schedulerparameters":
        slurm["scheduler_parameters"] = _scheduler(value, report, file, line)
    elif key == "mpidefault" and value in ("none", "pmi2", "pmix", "pmix_v4"):
        slurm["mpi_default"] = value
    elif key == "jobacctgathertype" and _plugin(value) in ("linux", "cgroup", "none"):
        slurm["job_acct_gather"] = _plugin(value)
    elif key == "proctracktype" and _plugin(value) in ("cgroup", "linuxproc"):
        slurm["process_tracking"] = _plugin(value)
    elif key == "propagateresourcelimitsexcept":
        slurm["propagate_resource_limits_except"] = _list(
            value, get_args(ResourceLimit), written, report, file, line)
    elif key == "slurmdparameters" and value.lower() == "config_overrides":
        slurm["config_overrides"] = True
    elif key == "preempttype" and _plugin(value) in ("partition_prio", "qos"):
        slurm.setdefault("preemption", {})["type"] = _plugin(value)
    elif key == "preemptmode" and value.split(",")[0].lower() in ("cancel", "requeue",
                                                                  "suspend"):
        slurm.setdefault("preemption", {})["mode"] = value.split(",")[0].lower()
    elif key == "preempttype" and value.lower() == "preempt/none" or \
            key == "preemptmode" and value.lower() == "off":
        pass   # no preemption: the spec's default
    elif key == "statesavelocation":
        slurm["state_dir"] = value
    elif key in RENDERED and RENDERED[key].lower() == value.lower():
        pass
    elif key in OWNED:
        report.drop(file, line.number, f"{written}={value}",
                    "Estate writes this key itself; the rendered value is Estate's")
    elif key in conf_keys():
        slurm.setdefault("extra", {})[conf_keys()[key]] = value
    else:
        report.drop(file, line.number, f"{written}={value}",
                    "not a slurm.conf key Slurm 22.05 knows")
