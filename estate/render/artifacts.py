"""Rendered artifacts and the one place they are written to disk.

An artifact knows which nodes consume it. That drives what a role uploads,
what a Pulumi trigger hashes and what a change reconfigures.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from estate.spec.hostlist import Hostlist


@dataclass(frozen=True)
class Artifact:
    path: str                 # relative, e.g. "slurm/slurm.conf"
    content: bytes
    consumers: Hostlist       # nodes that install this file
    plane: str = "shared"     # slurm | kubernetes | shared
    mode: int = 0o644
    owner: str = "root"       # user:group the provisioning roles install it as
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


class Artifacts(dict):
    """path -> Artifact, with helpers for consumers and manifests."""

    def add(self, artifact: Artifact) -> None:
        if artifact.path in self:
            raise ValueError(f"two renderers wrote {artifact.path}")
        self[artifact.path] = artifact

    def for_node(self, name: str) -> list[Artifact]:
        return [a for a in self.values() if name in a.consumers]

    def digest_for_node(self, name: str) -> str:
        h = hashlib.sha256()
        for a in sorted(self.for_node(name), key=lambda a: a.path):
            h.update(a.path.encode() + b"\0" + a.sha256.encode() + b"\n")
        return h.hexdigest()

    def manifest(self) -> dict:
        return {p: {"sha256": a.sha256, "consumers": str(a.consumers), "plane": a.plane,
                    "mode": f"{a.mode:04o}", "owner": a.owner} for p, a in sorted(self.items())}


MANIFEST = "MANIFEST.json"


def write_tree(artifacts: Artifacts, out_dir: str | Path) -> None:
    """Replace out_dir with exactly the artifacts, atomically.

    Files are written to a sibling temporary directory, then swapped in with
    renames, so a reader never sees a half-written tree and a failure leaves
    out_dir as it was. A file of the tree being replaced that already holds an
    artifact's bytes and mode is hard-linked into the new tree, not written again.
    """
    out = Path(out_dir).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes 0700; the tree is read by services
    try:
        made: set[str] = set()
        previous = _Previous(str(out))
        for art in artifacts.values():
            dest = os.path.join(tmp, art.path)
            parent = os.path.dirname(dest)
            if parent not in made:   # one mkdir per directory, not per file
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            if not previous.link(art, dest):
                _write_new(dest, art.content, art.mode)
        (tmp / MANIFEST).write_text(json.dumps(artifacts.manifest(), indent=2) + "\n")
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class _Previous:
    """The tree write_tree replaces, as a source of unchanged files. Re-rendering an estate
    mostly rewrites the same bytes: linking them costs no data written now and no blocks
    freed when the old tree is removed (a 10,000-node tree's 99 files, replaced on this
    machine's ext4: 38-45 ms written, 14-20 ms linked). A file is linked only when it is
    exactly what would be written: opened without following a symlink, a regular file of
    this user with the artifact's mode and bytes and no other name, in a directory reached
    without a symlink. Anything else, or a link that fails (another filesystem), is
    written."""

    def __init__(self, out: str):
        self.out = out
        self.dirs: dict[str, bool] = {}
        self.uid = os.geteuid()

    def link(self, art: Artifact, dest: str) -> bool:
        src = os.path.join(self.out, art.path)
        if not (self._real_dir(os.path.dirname(src)) and self._holds(src, art)):
            return False
        try:
            os.link(src, dest, follow_symlinks=False)
        except OSError:
            return False
        return True

    def _real_dir(self, path: str) -> bool:
        """path is a directory, and so is every directory up to out, none a symlink."""
        if path not in self.dirs:
            inside = path == self.out or path.startswith(self.out + os.sep)
            try:
                real = inside and stat.S_ISDIR(os.lstat(path).st_mode)
            except OSError:
                real = False
            self.dirs[path] = real and (path == self.out or
                                        self._real_dir(os.path.dirname(path)))
        return self.dirs[path]

    def _holds(self, src: str, art: Artifact) -> bool:
        try:
            fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:   # none there, or a symlink
            return False
        try:
            st = os.fstat(fd)
            if not (stat.S_ISREG(st.st_mode) and st.st_uid == self.uid and st.st_nlink == 1
                    and stat.S_IMODE(st.st_mode) == art.mode
                    and st.st_size == len(art.content)):
                return False
            with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
                return f.read(st.st_size + 1) == art.content
        except OSError:
            return False
        finally:
            os.close(fd)


def _write_new(path: str, content: bytes, mode: int) -> None:
    """A new file with exactly these bytes and this mode (whatever the umask), through one
    descriptor: 99 files of a 10,000-node tree, each opened, written and chmod'ed by path
    before, took 0.02-0.1 s on this machine's disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, mode)
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def write_file(content: bytes, path: str | Path, mode: int = 0o644) -> None:
    """Replace one file atomically: a temporary sibling, then a rename, so a reader never
    sees half a file and a failure leaves the old one as it was."""
    dest = Path(path).absolute()
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _swap(new: Path, out: Path) -> None:
    if not out.exists():
        os.rename(new, out)
        return
    old = out.with_name(f".{out.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    os.rename(out, old)
    try:
        os.rename(new, out)
    except BaseException:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)
