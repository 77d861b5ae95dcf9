"""The slurm.conf keys a Slurm version knows, read from slurm_conf/keys/<version>.json.

That file is written by scripts/slurm-conf-keys.py from the installed Slurm (its parser
table in libslurmfull.so, and slurm.conf(5) for SchedulerParameters), and names its
source. ``slurm.extra`` may set any key listed there except those Estate writes itself.
"""
from __future__ import annotations

import json
from functools import lru_cache

from estate import paths
from estate.catalogue import DEFAULT_SLURM as DEFAULT_VERSION  # noqa: F401 (re-exported)

KEYS_DIR = paths.KEYS

# Keys slurm.conf.j2 writes from typed fields or derives, and the line keywords that give
# slurm.conf its structure: slurm.extra must not set them (a second value would silently
# win or lose). tests/unit/test_slurm_settings.py checks every key the template writes is here.
OWNED = frozenset(k.lower() for k in (
    "ClusterName", "SlurmctldHost", "SlurmUser", "SlurmdUser", "SlurmctldPort", "SlurmdPort",
    "AuthType", "AuthAltTypes", "AuthAltParameters", "StateSaveLocation", "SlurmdSpoolDir",
    "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile", "SlurmdLogFile",
    "SlurmctldParameters", "SlurmdParameters", "ReturnToService", "MpiDefault",
    "ProctrackType", "TaskPlugin", "SelectType", "SelectTypeParameters", "GresTypes",
    "TopologyPlugin", "SchedulerType", "SchedulerParameters", "PriorityType",
    "PriorityWeightFairshare", "PriorityWeightAge", "PriorityWeightQOS",
    "PriorityWeightPartition", "PriorityWeightJobSize", "PriorityWeightAssoc",
    "PriorityWeightTRES", "PriorityFlags", "PriorityDecayHalfLife", "PriorityMaxAge",
    "AccountingStorageType", "AccountingStorageHost", "AccountingStoragePort",
    "AccountingStorageEnforce", "AccountingStorageTRES", "JobAcctGatherType",
    "PropagateResourceLimitsExcept", "PropagateResourceLimits", "SlurmctldTimeout",
    "SlurmdTimeout", "MessageTimeout", "UnkillableStepTimeout", "KillWait",
    "BatchStartTimeout", "InactiveLimit", "PreemptType", "PreemptMode", "SrunPortRange",
    "Prolog", "Epilog", "TaskProlog", "PrologFlags", "HealthCheckProgram", "HealthCheckInterval",
    "HealthCheckNodeState", "RebootProgram", "ResumeProgram", "SuspendProgram", "SuspendTime",
    "ResumeTimeout", "SuspendTimeout", "ResumeRate", "SuspendRate", "SuspendExcNodes",
    "PrivateData", "MailProg", "EnforcePartLimits",
    "NodeName", "PartitionName", "NodeSet", "FrontendName", "DownNodes", "Include",
    "ControlMachine", "ControlAddr", "BackupController", "BackupAddr"))

# Keys Estate writes from a typed field merged with slurm.extra's value for the same key
# (options the spec has no field for): extra may set them, the template writes one line.
MERGED = frozenset({"dependencyparameters"})


@lru_cache(maxsize=None)
def _load(version: str) -> dict:
    path = KEYS_DIR / f"{version}.json"
    if not path.exists():    # a release of Debian's next suite (catalogue.NEXT_SUITES)
        path = KEYS_DIR / "next" / f"{version}.json"
    return json.loads(path.read_text())


def _release(version: str) -> tuple[int, int]:
    """'23.11' -> (23, 11)."""
    major, minor = version.split(".")
    return int(major), int(minor)


def at_least(version: str, oldest: tuple[int, int]) -> bool:
    """'24.11' >= (23, 11)."""
    major, minor = version.split(".")
    return (int(major), int(minor)) >= oldest


def versions() -> list[str]:
    return sorted(p.stem for p in KEYS_DIR.glob("[0-9]*.json"))


def next_versions() -> list[str]:
    """Releases with a key table that Estate does not render for yet (Debian's next
    suite's: slurm_conf/keys/next/)."""
    return sorted(p.stem for p in (KEYS_DIR / "next").glob("[0-9]*.json"))


def conf_keys(version: str = DEFAULT_VERSION) -> dict[str, str]:
    """lowercase key -> Slurm's spelling (slurm.conf keys are case-insensitive)."""
    return {k.lower(): k for k in _load(version)["slurm.conf"]}


def scheduler_options(version: str = DEFAULT_VERSION) -> frozenset[str]:
    return frozenset(_load(version)["SchedulerParameters"])


def private_data(version: str = DEFAULT_VERSION) -> frozenset[str] | None:
    """The PrivateData values the release's slurm.conf(5) lists (22.05 has cloud, which
    23.02 made the default and dropped); None where the key table does not say."""
    values = _load(version).get("PrivateData")
    return frozenset(values) if values is not None else None


def plugins(version: str = DEFAULT_VERSION) -> frozenset[str]:
    """The plugin files the release ships, as 'auth_jwt' for auth_jwt.so."""
    return frozenset(_load(version)["plugins"])


def ships(version: str, plugin: str) -> bool:
    """Whether the release has the plugin 'auth/jwt' (Slurm's file naming: auth_jwt.so)."""
    return plugin.replace("/", "_") in plugins(version)


def source(version: str = DEFAULT_VERSION) -> dict[str, str]:
    return _load(version)["source"]


def closest(word: str, known) -> str | None:
    """The known name nearest to word (case-insensitively), if any is near."""
    import difflib   # only for a misspelt key: not on every command's start
    lower = {k.lower(): k for k in known}
    match = difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=0.6)
    return lower[match[0]] if match else None


@lru_cache(maxsize=None)
def _moved() -> dict:
    return json.loads((KEYS_DIR / "moved.json").read_text())


def moved(table: str, version: str) -> dict[str, dict]:
    """What Slurm moved, renamed or removed by `version` (slurm_conf/keys/moved.json): one
    of its tables ('keys', 'SchedulerParameters', 'PartitionName'...), lowercase name ->
    entry, for the entries whose 'since' is at or before the release."""
    return {name.lower(): entry for name, entry in _moved()[table].items()
            if at_least(version, _release(entry["since"]))}
