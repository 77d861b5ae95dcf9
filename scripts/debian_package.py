"""Which Debian package, at which version, installed a file: asked of the dpkg database
of a root ('/' or a debootstrapped release root). Shared by the scripts that record
where their Slurm facts came from (slurm-conf-keys.py, slurm-update-policy.py); a script
run as `python3 scripts/X.py` finds it beside itself."""
from __future__ import annotations

import subprocess


def package_version(path: str, root: str = "/") -> str:
    """'slurm-client 22.05.8-4+deb12u3' for a file of that package (empty if none)."""
    admin = ["--admindir", f"{root.rstrip('/')}/var/lib/dpkg"]
    owner = subprocess.run(["dpkg-query", *admin, "-S", path], capture_output=True,
                           text=True).stdout
    pkg = owner.split(":")[0].strip()
    version = subprocess.run(["dpkg-query", *admin, "-W", "-f", "${Version}", pkg],
                             capture_output=True, text=True).stdout
    return f"{pkg} {version}".strip()
