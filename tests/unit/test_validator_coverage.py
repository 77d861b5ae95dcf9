"""Every validator in the registry, whatever its domain or stage, has a seeded failing case.

The case tables live beside the validators' domain tests; this walks the whole registry
rather than a hand-kept list of domains, so a validator added in a new module, domain or
stage without a case fails here.
"""
from __future__ import annotations

from estate.check import load_domains
from estate.check.registry import REGISTRY
from tests.unit import test_check_validators as spec_cases
from tests.unit import test_cni as cni_cases
from tests.unit import test_kubernetes_check as k8s_cases
from tests.unit import test_mig as mig_cases
from tests.unit import test_ownership as ownership_cases


def seeded() -> dict[str, set]:
    """Validator id -> the severities its seeded cases expect (None: the table has none)."""
    out: dict[str, set] = {}
    for vid, severity, *_ in spec_cases.CASES + k8s_cases.CASES + cni_cases.CASES:
        out.setdefault(vid, set()).add(severity)
    for _path, _edit, vid, _text in k8s_cases.TAMPER + k8s_cases.TAMPER_HA + \
            ownership_cases.TAMPER + cni_cases.TAMPER + mig_cases.TAMPER:
        out.setdefault(vid, set()).add(None)
    return out


def test_every_registered_validator_has_a_seeded_case():
    load_domains()
    cases = seeded()
    missing = sorted(f"{v.id} ({v.domain}, {v.stage})" for v in REGISTRY.values()
                     if v.id not in cases)
    assert not missing, f"validators without a seeded failing case: {missing}"


def test_seeded_cases_name_registered_validators_with_their_severity():
    load_domains()
    for vid, severities in seeded().items():
        assert vid in REGISTRY, f"a case names {vid}, which no validator has"
        assert severities - {None} <= {REGISTRY[vid].severity}, vid
