"""Results kept between processes, addressed by the content they were computed from.

The Kubernetes plane carries large files that are the same for every spec (Kueue's release:
1.7 MB, 79 documents). Parsing and strictly validating them cost every `estate check`
about 0.6 s, more than the rest of a 10,000-node check. The result of a pure function of
bytes is the same in every process, so it is kept under a key that names everything it
depends on: the bytes' sha256, the library versions and a fingerprint of Estate's own
schema data (see the callers). A stale entry cannot be read back: any change gives a new
key.

Only marshal-able values are kept (dicts, lists, strings, numbers; not datetimes), in a
per-user directory that must be the caller's own and closed to others (0700), as Jinja's
bytecode cache is. Any trouble (no safe directory, a full disk, a damaged entry) means
computing again, never an error. ESTATE_NO_CACHE=1 turns the cache off.
"""
from __future__ import annotations

import hashlib
import marshal
import os
import stat
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")
# Below this size computing is cheaper than a lookup (8,000 small kubeadm files). The
# vendored upstream manifests are above it and the same bytes in every tree: Calico's
# operator (20 KB, 8 ms to parse, 50 ms when it is a process's first YAML),
# node-feature-discovery (59 KB), Kueue (1.7 MB). Estate's own files, which change with
# the spec, are below it at example-prod's size; a large estate's big ones (the kind
# config of 8,000 workers) are kept like any other, under their bytes' sha256.
MIN_BYTES = 16 * 1024
# Entries kept; beyond it a store drops the least recently used half (a fuzz run
# checks thousands of distinct trees, each with its own validation results).
MAX_ENTRIES = 256
# Bytes kept; beyond it a store drops the least recently used until under (the YAML of
# 8,000 workers' documents is 8 MB, and a new Estate version keys everything anew).
MAX_BYTES = 256 * 1024 * 1024


@lru_cache(maxsize=1)
def directory() -> Path | None:
    if os.environ.get("ESTATE_NO_CACHE"):
        return None
    path = Path(tempfile.gettempdir()) / f"estate-cache-{os.geteuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    safe = (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    return path if safe else None


def key(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        data = p if isinstance(p, bytes) else p.encode()
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def remembered(name: str, parts: tuple, compute: Callable[[], T]) -> T:
    """compute(), or what it returned for the same key in an earlier process."""
    where = directory()
    if where is None:
        return compute()
    path = where / f"{name}-{key(name, *parts)}.marshal"
    value = _read(path)
    if value is not _MISSING:
        _touch(path)
        return value
    value = compute()
    _store(path, value)
    return value


def remembered_each(name: str, parts: tuple, items: dict[str, Callable[[], T]]
                    ) -> dict[str, T]:
    """Each item's compute(), or what it returned for the same item key in an earlier
    process (one Memo: a tree that changed in a few files computes only those, one more
    worker among 8,000 kubeadm join files)."""
    memo = Memo(name, parts)
    out = {k: memo.get(k, compute) for k, compute in items.items()}
    memo.save()
    return out


class Memo:
    """Values of a pure function by item key, kept between processes in one entry per
    (name, parts): read at the first lookup, and written again by save() only when
    something was computed, with the items it held before while they are not many more
    than this run's (two trees checked in turn both stay; a much smaller one replaces
    them). Without a cache directory it only remembers within the process."""

    def __init__(self, name: str, parts: tuple):
        where = directory()
        self._path = where / f"{name}-{key(name, *parts)}.marshal" if where else None
        self._known: dict | None = None
        self._used: dict = {}
        self._computed = False

    def get(self, item: str, compute: Callable[[], T]) -> T:
        if item in self._used:
            return self._used[item]
        if self._known is None:
            known = _read(self._path) if self._path else _MISSING
            self._known = known if isinstance(known, dict) else {}
        if item in self._known:
            value = self._known[item]
        else:
            value = compute()
            self._computed = True
        self._used[item] = value
        return value

    def save(self, reread: bool = False) -> None:
        """reread: merge with the entry as it is now, not as this process first read it
        (a forked child that saved its own items since: estate.compiled)."""
        if self._path is None or not self._used:
            return
        if not self._computed:
            _touch(self._path)
            return
        known = _read(self._path) if reread else self._known
        merged = {**(known if isinstance(known, dict) else {}), **self._used}
        _store(self._path, merged if len(merged) <= 3 * len(self._used) + 64 else self._used)


_MISSING = object()


def _read(path: Path):
    """The entry's value; _MISSING when there is none or it is damaged."""
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return _MISSING


def _touch(path: Path) -> None:
    try:
        os.utime(path)   # recently used: the last to be pruned
    except OSError:
        pass


def _store(path: Path, value) -> None:
    try:
        data = marshal.dumps(value)
    except ValueError:  # a type marshal cannot keep: no entry
        return
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return
    _prune(path.parent)


def _prune(where: Path) -> None:
    """Drop the least recently used entries: half of them beyond MAX_ENTRIES, and then as
    many as take the whole over MAX_BYTES (never the entry just written)."""
    entries = []
    for p in where.glob("*.marshal"):
        try:
            st = p.stat()
        except OSError:  # another process pruned it first
            continue
        entries.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    if len(entries) <= MAX_ENTRIES and total <= MAX_BYTES:
        return
    entries.sort()
    half = len(entries) // 2 if len(entries) > MAX_ENTRIES else 0
    for i, (_, size, p) in enumerate(entries[:-1]):
        if i >= half and total <= MAX_BYTES:
            break
        try:
            p.unlink(missing_ok=True)
        except OSError:
            pass
        total -= size
