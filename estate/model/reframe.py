"""ReFrame on the login nodes: the acceptance suite sites run (estate.render.reframe renders
its configuration, estate/acceptance/estate_checks.py holds the checks, the slurm_login
role installs both and ReFrame, estate.verify.reframe runs it as a user).

Debian packages no ReFrame (bookworm nor trixie): the role installs it, pinned, into a venv
of its own (Debian's python3-venv), outside any user's reach, from wheels the provisioning
machine downloads from its package index: the login node itself reaches no index."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from estate.model.destinations import destination

VERSION = "4.10.4"        # reframe-hpc; pyproject's test extra pins the same (tests/unit)
HOME = "/opt/estate/reframe"
REFRAME = f"{HOME}/bin/reframe"
SETTINGS = "reframe/settings.py"
CHECKS = "reframe/estate_checks.py"


def settings_path() -> str:
    return destination(SETTINGS)


def checks_path() -> str:
    return destination(CHECKS)


def wheels() -> Path:
    """reframe-hpc and its dependencies as wheels, downloaded once on this machine (the
    provisioner, which reaches the package index as its user has set it up), for the
    slurm_login role to install on a node that reaches no index."""
    dest = Path(tempfile.gettempdir()) / f"estate-reframe-{VERSION}-wheels"
    done = dest / ".complete"
    if not done.exists():
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q",
                               "--only-binary=:all:", "-d", str(dest),
                               f"reframe-hpc=={VERSION}"], capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"cannot fetch reframe-hpc=={VERSION} here to install it "
                               f"on the login nodes: {proc.stderr.strip()[-400:]}")
        done.touch()
    return dest
