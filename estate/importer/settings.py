"""slurm.conf's global keys onto the spec's typed Slurm fields, else slurm.extra, else
the report (with the reason)."""
from __future__ import annotations

import posixpath
from typing import get_args

from pydantic import TypeAdapter, ValidationError

from estate.importer import programs
from estate.importer.parse import ConfLine
from estate.importer.report import ImportReport
from estate.model.slurm_keys import (OWNED, conf_keys, moved, next_versions,
                                     scheduler_options, versions)
from estate.spec.model import (PriorityFlag, PrivateDataValue, ResourceLimit, SelectParameter,
                               Slurm)
from estate.spec.types import SlurmConfValue, system_directory_problem

# Where an imported cluster's slurmctld state goes when the source keeps it in a system
# directory: the spec's own default
STATE_DIR = Slurm.model_fields["state_dir"].default

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
                     "accountingstorageport"} | programs.KEYS


def _time(value: str) -> str:
    return "INFINITE" if value.upper() in ("UNLIMITED", "INFINITE") else value


def _list(value: str, allowed, what: str, report, file, line, gone=None) -> list[str]:
    known = {a.lower(): a for a in allowed}
    out = []
    for item in filter(None, value.split(",")):
        if item.lower() in known:
            out.append(known[item.lower()])
        elif item.lower() in (gone or {}):
            report.change(file, line.number, f"{what} {item}",
                          f"dropped: {gone[item.lower()]['says']}")
        else:
            report.drop(file, line.number, f"{what} {item}", f"not one the spec expresses "
                        f"({', '.join(sorted(allowed))})")
    return out


def _scheduler(slurm: dict, value: str, report, file, line, version: str) -> dict:
    """SchedulerParameters: flags and numbers; an option Slurm moved to another key goes
    there (reported as changed); one the release does not document is dropped."""
    gone, known = moved("SchedulerParameters", version), scheduler_options(version)
    out: dict[str, bool | int | str] = {}
    for item in filter(None, value.split(",")):
        key, sep, val = item.partition("=")
        if key.lower() in gone:
            entry = gone[key.lower()]
            _extend(slurm, entry["to"], entry.get("as", key) + sep + val)
            report.change(file, line.number, f"SchedulerParameters {item}",
                          f"written as {entry['to']}={entry.get('as', key)}{sep}{val}: "
                          f"{entry['says']}")
        elif key not in known:
            report.drop(file, line.number, f"SchedulerParameters {item}", f"not a "
                        f"SchedulerParameters option of Slurm {version} (slurm.conf(5))"
                        + _elsewhere(key, scheduler_options))
        elif not sep:
            out[key] = True
        elif val.isdigit():
            out[key] = int(val)
        else:
            report.drop(file, line.number, f"SchedulerParameters {item}",
                        "the spec takes flags and numbers only")
    return out


def _elsewhere(name: str, table) -> str:
    """'; Slurm 24.11 knows it (--slurm-version)' where another release does, or the
    next suite's release that Estate does not render for yet."""
    others = [v for v in versions() if name in table(v)]
    if others:
        return (f"; Slurm {', '.join(others)} knows it (import with --slurm-version "
                f"{others[-1]})")
    newer = [v for v in next_versions() if name in table(v)]
    return (f"; only Slurm {', '.join(newer)} (Debian's next suite) knows it, which Estate "
            "does not render for yet") if newer else ""


def _extend(slurm: dict, key: str, item: str) -> None:
    """slurm.extra[key] = item, or item added to its comma-separated options where a
    moved option got there first (a translated kill_invalid_depend and the source's own
    DependencyParameters line are one key)."""
    extra = slurm.setdefault("extra", {})
    items = [i for i in extra.get(key, "").split(",") if i]
    extra[key] = ",".join(dict.fromkeys(items + [item]))


def _plugin(value: str) -> str:
    return value.split("/", 1)[-1]


_VALUE = TypeAdapter(SlurmConfValue)


def _one_value(value: str) -> bool:
    """Whether slurm.extra can carry the value (the spec's own type decides)."""
    try:
        _VALUE.validate_python(value)
    except ValidationError:
        return False
    return True


def _moved_key(slurm: dict, entry: dict, written: str, value: str, line: ConfLine,
               report: ImportReport, file: str, version: str) -> None:
    """A key Slurm renamed (to), replaced by value (values) or removed: the replacement is
    imported as if the source had written it, and the line reported as changed."""
    if "to" in entry:
        instead = f"{entry['to']}={value}"
    elif value.lower() in entry.get("values", {}):
        instead = entry["values"][value.lower()]
    else:
        report.drop(file, line.number, f"{written}={value}", entry["says"])
        return
    if instead:
        key, _, val = instead.partition("=")
        apply(slurm, key.lower(), key, val, line, report, file, version)
    report.change(file, line.number, f"{written}={value}",
                  f"written as {instead}: {entry['says']}" if instead else
                  f"dropped, Slurm's default behaviour: {entry['says']}")


def _state_dir(slurm: dict, written: str, value: str, line: ConfLine, report: ImportReport,
               file: str) -> None:
    """StateSaveLocation as the spec's state_dir: the same directory, or where the source
    names a system directory (/tmp, /var/spool, or a directory under /tmp), the spec's
    dedicated one, reported with what to move at cutover (the slurm_controller role
    chowns state_dir to SlurmUser with mode 0700; estate.spec.types.OwnedDirectory)."""
    path = posixpath.normpath(value) if value.startswith("/") else value
    problem = system_directory_problem(path) if path.startswith("/") else None
    if problem:
        report.change(file, line.number, f"{written}={value}", f"written as {written}="
                      f"{STATE_DIR}: {problem}, and Estate gives slurmctld's state a "
                      "directory of its own (owned by SlurmUser, mode 0700). At cutover, "
                      f"stop slurmctld and move its state files from {path} to {STATE_DIR} "
                      "(job_state, node_state, part_state, resv_state and the rest, with "
                      "their .old copies and the hash.* job script directories), or "
                      "slurmctld starts without the running jobs")
        path = STATE_DIR
    elif path != value:
        report.change(file, line.number, f"{written}={value}",
                      f"written as {written}={path} (the same directory)")
    slurm["state_dir"] = path


def apply(slurm: dict, key: str, written: str, value: str, line: ConfLine, report: ImportReport,
          file: str, version: str) -> None:
    """One global setting into `slurm` (the spec's slurm section as a dict), for the
    Slurm release `version`."""
    if key in (gone := moved("keys", version)):
        _moved_key(slurm, gone[key], written, value, line, report, file, version)
    elif key in TIMEOUTS:
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
        slurm["select_type_parameters"] = _list(
            value, get_args(SelectParameter), "SelectTypeParameters", report, file, line,
            moved("SelectTypeParameters", version))
    elif key == "schedulerparameters":
        slurm["scheduler_parameters"] = _scheduler(slurm, value, report, file, line, version)
    elif key == "selecttype" and value.lower() == "select/linear":
        pass   # mapping.linear: it changes the partitions too
    elif key == "selecttype" and value.lower() in (was := moved("SelectType", version)):
        entry = was[value.lower()]
        report.change(file, line.number, f"{written}={value}",
                      f"written as {written}={entry['to']}: {entry['says']}")
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
    elif key == "enforcepartlimits" and value.upper() in ("ALL", "ANY", "NO", "YES"):
        # YES is ANY's old spelling (slurm.conf(5))
        slurm["enforce_part_limits"] = "ANY" if value.upper() == "YES" else value.upper()
    elif key == "privatedata":
        # Slurm matches each word by substring (read_config.c); the spec lists them whole
        slurm["private_data"] = _list(value, get_args(PrivateDataValue), written, report,
                                      file, line)
    elif key == "statesavelocation":
        _state_dir(slurm, written, value, line, report, file)
    elif key in RENDERED and RENDERED[key].lower() == value.lower():
        pass
    elif key in OWNED:
        report.drop(file, line.number, f"{written}={value}",
                    "Estate writes this key itself; the rendered value is Estate's")
    elif key in conf_keys(version) and not _one_value(value):
        report.drop(file, line.number, f"{written}={value}", "slurm.extra holds one "
                    "slurm.conf token per key (no blanks, quotes or '#'); set it on the "
                    "nodes another way, or leave Slurm's default")
    elif key in conf_keys(version):
        _extend(slurm, conf_keys(version)[key], value)
    else:
        report.drop(file, line.number, f"{written}={value}",
                    f"not a slurm.conf key Slurm {version} knows"
                    + _elsewhere(key, conf_keys))
