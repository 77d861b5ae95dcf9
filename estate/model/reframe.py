"""ReFrame on the login nodes: the acceptance suite sites run (estate.render.reframe renders
its configuration, estate/acceptance/estate_checks.py holds the checks, the slurm_login
role installs both and ReFrame, estate.verify.reframe runs it as a user).

Debian packages no ReFrame (bookworm nor trixie): the role installs it, pinned, into a venv
of its own (Debian's python3-venv), outside any user's reach, from wheels the provisioning
machine downloads from its package index: the login node itself reaches no index."""
from __future__ import annotations

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
