"""Cluster secrets for the lab: generated once, kept outside the rendered tree.

The munge key and the JWT signing key never enter the rendered tree (which is
diffed, hashed and snapshot-tested). Roles receive the directory's path and
upload the files; nothing here prints or returns their contents. Real estates
bring their own (e.g. from Pulumi); point estate_secrets_dir at them.
"""
from __future__ import annotations

import os
from pathlib import Path

from estate import paths
from estate.model.services import KEYS

# File name -> size in bytes; the Pulumi program sizes its keys by the same table, so a
# lab and a Pulumi-managed estate hold the same kind of key.
SECRETS = {key.file: key.size for key in KEYS.values()}

# Where the labs (and `--lab` runs of apply, verify and doctor) keep theirs.
LAB_DIR = paths.work() / ".lab"
LAB_SECRETS = LAB_DIR / "secrets"
LAB_SSH_KEY = LAB_DIR / "ssh" / "id_ed25519"


def ensure_secrets(directory: str | Path) -> Path:
    """Create missing secrets (0600, directory 0700); never rewrite existing ones."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    for name, size in SECRETS.items():
        path = d / name
        if path.exists():
            continue
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(size))
        finally:
            os.close(fd)
    return d
