"""The live_slurm tier: real slurmctld, slurmd, slurmdbd and munged, one network
namespace per node (see estate/lab/netns.py). Runs as root with Debian's Slurm packages;
elsewhere it skips and says what is missing."""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
import yaml

from estate.catalogue import HOST_SUITE, SLURM_SUITES, host_packages
from estate.lab.netns import Lab, down
from estate.lab.netns import leftovers as netns_leftovers
from estate.model.services import hooks
from estate.spec.model import Spec
from estate.verify import slurm_view

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("slurmctld", "slurmd", "srun", "sinfo", "scontrol", "sshare", "munged", "nsenter",
         "unshare", "setpriv", "ip", "nft")
ACCOUNTING_TOOLS = ("slurmdbd", "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb")
PACKAGES = " ".join(host_packages())
SAVE_MAX_WAIT = 5   # seconds a job's change may take to reach StateSaveLocation (state_save.c)


def require_live_slurm(accounting: bool, version: str | None = None) -> None:
    """Skip, naming what is missing, where the tier cannot run. Another Slurm release than
    the host's runs from a root that debootstrap builds (scripts/slurm-root.sh)."""
    if os.geteuid() != 0:
        pytest.skip("live_slurm needs root (network namespaces, mknod, daemons)")
    other = version is not None and SLURM_SUITES[version] != HOST_SUITE
    missing = [t for t in TOOLS + (ACCOUNTING_TOOLS if accounting else ())
               + (("debootstrap", "chroot") if other else ()) if shutil.which(t) is None]
    if missing:
        pytest.skip(f"live_slurm needs {', '.join(missing)}: apt-get install {PACKAGES}")


def leftovers() -> list[str]:
    """What netns.leftovers() reports, one "kind name" line each (empty: nothing left)."""
    return [f"{kind} {name}" for kind, names in netns_leftovers().items() for name in names]


# Every Slurm release Estate renders for: the host's, and the others from their roots.
RELEASES = sorted(SLURM_SUITES)


def spec_on(spec: Path, version: str, tmp: Path) -> Path:
    """The spec with slurm.version set, written under tmp (a test module's lab on each
    release from one spec file)."""
    data = yaml.safe_load(spec.read_text())
    data["slurm"]["version"] = version
    out = tmp / spec.name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    for hook in hooks(Spec.model_validate(data)):     # the files the spec brings along
        (out.parent / hook.file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(spec.parent / hook.file, out.parent / hook.file)
    return out


def lab_on_each_release(spec: Path, controllers_only: bool = False,
                        accept: frozenset = frozenset()):
    """A module-scoped `lab` fixture: the spec's cluster on every release of RELEASES (the
    host's 22.05, and 24.11 with every node's daemons from the Debian 13 root), one after
    another. A test module says `lab = lab_on_each_release(SPEC)`."""
    @pytest.fixture(scope="module", params=RELEASES)
    def lab(request, tmp_path_factory):
        yield from running_lab(spec_on(spec, request.param,
                                       tmp_path_factory.mktemp(f"slurm-{request.param}")),
                               controllers_only, accept)
    return lab


def running_lab(spec: Path, controllers_only: bool = False, accept: frozenset = frozenset()):
    """Bring the spec's cluster up, hand it to the tests, always tear it down
    (controllers_only: slurmctld and slurmdbd, no slurmd; accept: findings that do not
    stop it; estate.lab.netns.Lab)."""
    lab = Lab(spec, controllers_only=controllers_only, accept=accept)
    require_live_slurm(bool(lab.slurm.accounting), lab.slurm.version)
    t0 = time.monotonic()
    try:
        lab.up()
        print(f"\n{spec.name}: lab up in {time.monotonic() - t0:.1f} s {lab.timings}")
        yield lab
    finally:
        down()
        left = leftovers()
        assert not left, f"teardown left {left}"


def assert_view_matches(lab, version_probe: list[str]) -> slurm_view.SlurmView:
    """The lab runs the spec's Slurm release (the probe's `--version` on the client), every
    worker is a node slurmctld reports, and Slurm's view equals the spec. Returns the view
    for a module's own further checks."""
    version = lab.run(lab.client(), version_probe).stdout
    assert version.startswith(f"slurm-wlm {lab.slurm.version}."), version
    view = lab.view()
    assert set(view.nodes) == set(lab.workers())
    assert slurm_view.compare(lab.estate, view) == []
    return view


def unregistered(m: slurm_view.Mismatch) -> bool:
    """What only a registered slurmd changes (controllers-only labs have none): its state
    (never UNKNOWN here), and the sockets it binds the GPUs to, which slurmd adds to Gres
    when it registers."""
    if m.field == "State":
        return True
    return m.field == "Gres" and re.sub(r"\(S:[^)]*\)", "", m.expected) == m.actual
