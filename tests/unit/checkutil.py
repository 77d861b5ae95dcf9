"""Helpers for the validator tests: example specs as dicts, mutate, check."""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import yaml

from estate.check import check_spec
from estate.findings import Finding
from estate.spec.load import load_text
from estate.spec.resolved import Estate

ROOT = Path(__file__).resolve().parents[2]
SPECS = {"lab": ROOT / "stacks" / "lab.yaml", "prod": ROOT / "stacks" / "example-prod.yaml"}


# "ha": example-prod with three control planes behind an API VIP (kube-vip) from the
# service segment's reserved addresses
HA_VIP = "10.30.0.10"


@lru_cache(maxsize=None)
def _base(name: str) -> dict:
    if name == "ha":
        return ha_spec(yaml.safe_load(SPECS["prod"].read_text()))
    return yaml.safe_load(SPECS[name].read_text())


def ha_spec(data: dict) -> dict:
    [cp] = [g for g in data["nodes"] if "k8s_control_plane" in g["roles"]]
    cp["hosts"] = "k8s-cp[1-3]"
    data["kubernetes"].update(control_plane=["k8s-cp1", "k8s-cp2", "k8s-cp3"], api_vip=HA_VIP,
                              api_vip_interface="eth0")
    return data


def spec_dict(name: str) -> dict:
    """A fresh, mutable copy of an example spec."""
    return copy.deepcopy(_base(name))


def findings_for(data: dict, filename: str = "<test>") -> list[Finding]:
    """Load findings (schema) plus validator findings for a spec given as a dict."""
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), filename)
    if loaded.spec is None:
        return loaded.findings
    return loaded.findings + check_spec(Estate(loaded.spec), loaded.source.locate)


def keyed(findings: list[Finding]) -> dict[tuple[str, str], Finding]:
    return {(f.id, f.path): f for f in findings}
