"""Versions that are alive: the spec's Kubernetes minor is within its support window and
within the range the pinned Kueue release is tested on.

The dates live in estate/kubernetes_releases.py with their source; the clock is
kubernetes_releases.today(), which tests freeze and CI can fix (ESTATE_TODAY), so a check
that passes today does not start failing because time passes unless the spec's version
really is dead.
"""
from __future__ import annotations

from estate import kubernetes_releases as releases
from estate.check._common import problem
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model import kubernetes as k8s
from estate.spec.resolved import Estate

W = Severity.WARNING


def _supported(day) -> str:
    alive = [f"{a}.{b}" for (a, b), eol in sorted(releases.END_OF_LIFE.items()) if eol >= day]
    return ", ".join(alive) or "none Estate knows"


@validator("kubernetes.version_end_of_life", W, "kubernetes",
           "the Kubernetes minor is past its end of life: no more security patches")
def version_end_of_life(estate: Estate) -> Problems:
    k = estate.spec.kubernetes
    eol = releases.end_of_life(k.version) if k else None
    day = releases.today()
    if eol is None or eol >= day:
        return
    yield problem(("kubernetes", "version"),
                  f"Kubernetes {k.version}: its minor reached end of life on {eol.isoformat()} "
                  f"({releases.EOL_SOURCE}); as of {day.isoformat()} it gets no security "
                  "patches",
                  f"upgrade to a supported minor ({_supported(day)}; Estate's default is "
                  f"{releases.DEFAULT_VERSION})")


@validator("kubernetes.kueue_untested_version", W, "kubernetes",
           "the pinned Kueue release is not tested on the spec's Kubernetes minor")
def kueue_untested_version(estate: Estate) -> Problems:
    k = estate.spec.kubernetes
    minor = releases.minor_of(k.version) if k and k.tenants else None
    low, high = k8s.KUEUE_TESTED
    if minor is None or low <= minor <= high:
        return
    yield problem(("kubernetes", "version"),
                  f"Kueue {k8s.KUEUE_VERSION}, which Estate installs, is tested on Kubernetes "
                  f"{low[0]}.{low[1]} to {high[0]}.{high[1]}, not {k.version}",
                  f"use a Kubernetes minor from {low[0]}.{low[1]} to {high[0]}.{high[1]}")
