"""Versions that are alive: the end-of-life table, the injectable clock, the default."""
from __future__ import annotations

import os
import re
from datetime import date

import kubernetes_validate
import pytest

from estate import kubernetes_releases as releases
from estate.check.kubernetes_schema import MIN_MINOR, schema_version
from estate.model import kubernetes as k8s
from tests.unit.checkutil import findings_for, keyed, spec_dict
from tests.unit.test_check_validators import put

EOL = "kubernetes.version_end_of_life"


def _eol_findings(version: str | None = None):
    data = spec_dict("lab")
    if version:
        put(data, "kubernetes.version", version)
    return [f for f in findings_for(data) if f.id == EOL]


@pytest.mark.parametrize("day,version,warns", [
    (date(2025, 10, 28), "1.31.4", False),      # the last day of support
    (date(2025, 10, 29), "1.31.4", True),
    (date(2026, 12, 2), "1.34.6", True),        # 2026-10-27
    (date(2026, 12, 2), "1.35.3", False),       # 2027-02-28
    (date(2027, 6, 28), None, False),           # the default, 1.36: 2027-06-28
    (date(2027, 6, 29), None, True),
])
def test_end_of_life_follows_the_injected_day(day, version, warns):
    with releases.frozen_today(day):
        found = _eol_findings(version)
    assert bool(found) is warns, found
    if warns:
        assert found[0].path == "kubernetes.version" and "end of life" in found[0].message


def test_frozen_day_wins_over_the_environment_and_is_restored():
    assert os.environ[releases.TODAY_ENV] == "2026-12-02"      # tests/conftest.py
    assert releases.today() == date(2026, 12, 2)
    with releases.frozen_today(date(2030, 1, 1)):
        assert releases.today() == date(2030, 1, 1)
    assert releases.today() == date(2026, 12, 2)


def test_the_system_clock_is_used_without_an_override(monkeypatch):
    monkeypatch.delenv(releases.TODAY_ENV)
    assert releases.today() == date.today()


def test_default_version_is_supported_validated_and_kueue_tested():
    v = releases.DEFAULT_VERSION
    assert releases.end_of_life(v) >= date(2026, 12, 2)
    assert schema_version(v) is not None
    low, high = k8s.KUEUE_TESTED
    assert low <= releases.minor_of(v) <= high
    assert keyed(findings_for(spec_dict("lab"))) == {}


def test_every_minor_estate_can_validate_has_an_end_of_life():
    """A kubernetes-validate upgrade that ships a new minor must come with its date."""
    shipped = {tuple(map(int, re.match(r"(\d+)\.(\d+)", v).groups()))
               for v in kubernetes_validate.utils.all_versions()}
    missing = sorted(m for m in shipped if m >= (1, MIN_MINOR) and m not in releases.END_OF_LIFE)
    assert missing == []


@pytest.mark.parametrize("version,image", [
    ("1.31.4", "registry.k8s.io/pause:3.10"), ("1.34.2", "registry.k8s.io/pause:3.10"),
    ("1.35.3", "registry.k8s.io/pause:3.10.1"), ("1.36.1", "registry.k8s.io/pause:3.10.2"),
    ("1.37.0", "registry.k8s.io/pause:3.10.2"),
])
def test_pause_image_follows_the_minor(version, image):
    assert releases.pause_image(version) == image
