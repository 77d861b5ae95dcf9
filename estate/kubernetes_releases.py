"""Kubernetes releases Estate knows: the default version, each minor's end of life, the
pause image kubeadm pins per minor, and the clock the end-of-life check reads.

One place for these facts: the spec's default, the renderer (pause image, kind image, apt
suite) and the validators read them here. No imports from the rest of Estate, so the spec
layer may use it too.
"""
from __future__ import annotations

import os
import re
from contextlib import contextmanager
from datetime import date
from typing import Iterator

# The default: a supported minor (end of life 2027-06-28) that kubernetes-validate ships
# schemas for and the pinned Kueue release tests (estate.model.kubernetes.KUEUE_TESTED).
# 1.36.1 is kind's default node image in kind v0.32.0
# (pkg/apis/config/defaults/image.go: kindest/node:v1.36.1@sha256:3489c767...), so the
# rendered kind config names an image that exists.
DEFAULT_VERSION = "1.36.1"

# End of life (maintenance ends, no more patches) per minor. Source: the "End Of Life
# Date" of each release page under https://kubernetes.io/releases/ (from the project's
# data/releases/schedule.yaml), read 2026-12-02. Add a minor when it is released.
EOL_SOURCE = "https://kubernetes.io/releases/ (End Of Life Date of each minor)"
END_OF_LIFE: dict[tuple[int, int], date] = {
    (1, 31): date(2025, 10, 28),
    (1, 32): date(2026, 2, 28),
    (1, 33): date(2026, 6, 28),
    (1, 34): date(2026, 10, 27),
    (1, 35): date(2027, 2, 28),
    (1, 36): date(2027, 6, 28),
    (1, 37): date(2027, 10, 28),
}

# The sandbox (pause) image kubeadm pins (cmd/kubeadm/app/constants PauseVersion): containerd's
# sandbox image must match it or kubeadm warns and pulls a second one. From a minor on,
# until the next entry. Sources: kubeadm 1.31 constants.go ("3.10"); kubeadm v1.35.8
# constants.go ("3.10.1"); 1.36: kubeclipper/kubeclipper#947 ("k8s 1.36 uses pause:3.10.2").
PAUSE_VERSIONS: dict[tuple[int, int], str] = {
    (1, 31): "3.10",
    (1, 35): "3.10.1",
    (1, 36): "3.10.2",
}
PAUSE_IMAGE = "registry.k8s.io/pause:{version}"

# containerd. Kubernetes 1.35 is the last minor that supports containerd 1.x (SIG Node), and
# containerd's own table (RELEASES.md, "Kubernetes Support") recommends 2.1 for every
# minor Estate accepts (1.31 on). Debian 12 ships 1.6.20 and Debian 13 1.7.24; Debian
# testing (forky) ships 2.1.9 (read 2026-12-02), built for the same libc as Debian 13 and
# reachable from every Debian mirror. Nodes take that one package from forky through an
# apt pin that admits nothing else of the suite (its runc dependency, >= 0.1, is met by the
# node's own release). Config version 3 is containerd 2's (the CRI plugin split into
# io.containerd.cri.v1.runtime and io.containerd.cri.v1.images).
CONTAINERD_SUITE = "forky"
CONTAINERD_MAJOR = 2
CONTAINERD_CONFIG_VERSION = 3
CONTAINERD_SOURCE = "https://github.com/containerd/containerd/blob/main/RELEASES.md"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

# The clock the end-of-life check reads. ESTATE_TODAY=YYYY-MM-DD fixes it for a run (CI
# that must not start failing because time passes); tests use frozen_today().
TODAY_ENV = "ESTATE_TODAY"
_frozen: date | None = None


def minor_of(version: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"(\d+)\.(\d+)\.\d+", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def pause_image(version: str) -> str:
    """The pause image kubeadm of this version pins (the newest entry at or below its minor)."""
    minor = minor_of(version) or max(PAUSE_VERSIONS)
    known = [m for m in sorted(PAUSE_VERSIONS) if m <= minor] or [min(PAUSE_VERSIONS)]
    return PAUSE_IMAGE.format(version=PAUSE_VERSIONS[known[-1]])


def end_of_life(version: str) -> date | None:
    """The minor's end of life, or None when Estate does not know it (too new)."""
    minor = minor_of(version)
    return END_OF_LIFE.get(minor) if minor else None


def today() -> date:
    """Today, as the end-of-life check sees it: a frozen_today() day, else ESTATE_TODAY,
    else the system clock."""
    if _frozen is not None:
        return _frozen
    fixed = os.environ.get(TODAY_ENV)
    return date.fromisoformat(fixed) if fixed else date.today()


@contextmanager
def frozen_today(day: date) -> Iterator[None]:
    """Run with today() fixed at day (tests: deterministic whatever the real date)."""
    global _frozen
    saved, _frozen = _frozen, day
    try:
        yield
    finally:
        _frozen = saved
