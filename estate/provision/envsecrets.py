"""Secrets handed to `estate apply` in its environment (the Pulumi program's way).

ESTATE_MUNGE_KEY_B64 / ESTATE_JWT_KEY_B64 hold the keys base64-encoded; they are
written to a private temporary directory for the run (0700/0600) and removed
afterwards. Neither the variables nor the keys are ever printed. A secret the spec names
by {file, env} (the directory's bind password) comes the same way (spec_secrets).
"""
from __future__ import annotations

import base64
import binascii
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from estate.model.services import KEYS

FILES = {key.env: key.file for key in KEYS.values()}


def spec_secrets(spec) -> dict[str, str]:
    """The secrets a spec names itself, variable -> file: the directory's bind password,
    where the spec gives its {file, env} (a password written inline is refused by check)."""
    from estate.spec.model import SecretRef
    ref = getattr(spec.identity.directory, "bind_secret", None)
    return {ref.env: ref.file} if isinstance(ref, SecretRef) else {}


@contextlib.contextmanager
def secrets_from_env(environ=os.environ, named: dict[str, str] | None = None):
    """Yield a directory with the keys found in the environment, or None if there are none.
    named: more variable -> file pairs to look for (spec_secrets)."""
    present = {var: name for var, name in (FILES | (named or {})).items() if environ.get(var)}
    if not present:
        yield None
        return
    d = Path(tempfile.mkdtemp(prefix="estate-secrets-"))
    try:
        os.chmod(d, 0o700)
        for var, name in present.items():
            try:
                data = base64.b64decode(environ[var], validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"{var} is not valid base64 (its value is not shown)") from None
            fd = os.open(d / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
