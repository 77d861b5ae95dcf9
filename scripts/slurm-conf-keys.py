#!/usr/bin/env python3
"""Write slurm_conf/keys/<version>.json: the slurm.conf keys the installed Slurm parses and
the SchedulerParameters options its manual documents.

The keys come from Slurm itself, not from a hand-kept list: slurm.conf is parsed with a
table of s_p_options_t entries (src/common/read_config.c, slurm_conf_options), each
starting with a pointer to the key's name. In libslurmfull.so those pointers are
R_X86_64_RELATIVE relocations; the table is the run of fixed-size entries (key, type,
handler, destroy, line options, ...) around the entry naming SlurmctldTimeout. The entry
size is found, not assumed: the smallest stride at which the anchor's neighbours are keys
too (40 bytes in 22.05, 56 in 24.11). SchedulerParameters
options are parsed with string searches, so they come from slurm.conf(5) as installed.
"plugins" lists the plugin files of the release (type_name, as in auth_jwt.so) with the
packages the project installs (estate.catalogue): which plugins a release ships at all
(24.11 has no mpi_none.so and no mpi_pmix_v4.so).

    python3 scripts/slurm-conf-keys.py [LIBSLURMFULL] [MANPAGE] > slurm_conf/keys/22.05.json
    python3 scripts/slurm-conf-keys.py --root "$(scripts/slurm-root.sh 24.11)" \
        > slurm_conf/keys/24.11.json

--root ROOT reads another release's files from a Debian root (scripts/slurm-root.sh) and
asks that root's dpkg database which packages they came from. --debs DIR reads them from
the .deb files in DIR (Debian's packages of a release Estate does not render for yet, such
as the next suite's: slurm_conf/keys/next/), unpacked with dpkg-deb:

    python3 scripts/slurm-conf-keys.py --debs /tmp/forky-debs > slurm_conf/keys/next/26.05.json
"""
from __future__ import annotations

import glob
import gzip
import hashlib
import os
import json
import re
import struct
import subprocess
import sys

from debian_package import package_version as dpkg_package_version

LIB = "/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so"
MAN = "/usr/share/man/man5/slurm.conf.5.gz"
STRIDES = range(16, 129, 8)   # candidate sizeof(s_p_options_t) on x86_64
ANCHOR = "SlurmctldTimeout"


class Elf:
    def __init__(self, data: bytes):
        self.b = data
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3a)
        phoff, = struct.unpack_from("<Q", data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        self.loads = []
        for i in range(phnum):
            kind, _, off, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data,
                                                                      phoff + i * phentsize)
            if kind == 1:  # PT_LOAD
                self.loads.append((vaddr, off, filesz))
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                    for i in range(shnum)]
        names = sections[shstrndx][4]
        self.sections = {self._cstr(names + s[0]): s for s in sections}

    def _cstr(self, off: int) -> str | None:
        end = self.b.find(b"\0", off, off + 256)
        try:
            return self.b[off:end].decode("ascii") if end > off else None
        except UnicodeDecodeError:
            return None

    def string_at(self, vaddr: int) -> str | None:
        for start, off, size in self.loads:
            if start <= vaddr < start + size:
                return self._cstr(vaddr - start + off)
        return None

    def relative_relocations(self) -> dict[int, int]:
        """Address of each relocated pointer -> the address it points to."""
        _, _, _, _, off, size, *_ = self.sections[".rela.dyn"]
        out = {}
        for i in range(size // 24):
            where, info, addend = struct.unpack_from("<QQq", self.b, off + i * 24)
            if info & 0xFFFFFFFF == 8:  # R_X86_64_RELATIVE
                out[where] = addend
        return out


def conf_keys(path: str) -> list[str]:
    elf = Elf(open(path, "rb").read())
    rel = elf.relative_relocations()

    def key(at: int) -> str | None:
        name = elf.string_at(rel[at]) if at in rel else None
        return name if name and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) else None

    [(anchor, entry)] = [(at, stride) for at, to in rel.items() if elf.string_at(to) == ANCHOR
                         for stride in [next((n for n in STRIDES if key(at + n) and
                                              key(at - n) and key(at + 2 * n)), None)]
                         if stride]
    first = anchor
    while key(first - entry):
        first -= entry
    out, at = [], first
    while (name := key(at)):
        out.append(name)
        at += entry
    for needed in ("ClusterName", "NodeName", "PartitionName", "SlurmctldHost"):
        assert needed in out, f"{needed} not in the table read from {path}: layout changed?"
    return out


def scheduler_parameters(path: str) -> list[str]:
    return man_options(path, "SchedulerParameters")


def man_options(path: str, key: str) -> list[str]:
    """The options slurm.conf(5) lists under a key (each a .TP item in lower case),
    SchedulerParameters' and PrivateData's."""
    lines = gzip.open(path, "rt").read().splitlines()
    start = lines.index(rf"\fB{key}\fR")
    end = next(i for i in range(start + 1, len(lines))
               if re.fullmatch(r"\\fB[A-Z][A-Za-z]+\\fR", lines[i]) and lines[i - 1] == ".TP"
               and not lines[i].startswith(rf"\fB{key}"))
    names = {m.group(1) for i in range(start, end) if lines[i - 1] == ".TP"
             for m in [re.match(r"\\fB([a-z][a-z0-9_]*)", lines[i])] if m}
    return sorted(names)


def plugins(plugin_dir: str) -> list[str]:
    return sorted(os.path.basename(p)[:-3] for p in glob.glob(f"{plugin_dir}/*.so")
                  if not os.path.basename(p).startswith("lib"))


OWNERS: dict[str, str] = {}   # path -> "package version", where --debs unpacked them


def unpack(debs: str, root: str) -> None:
    """Unpack every .deb in debs into root, noting which package each file came from."""
    for deb in sorted(glob.glob(f"{debs}/*.deb")):
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
        pkg = subprocess.run(["dpkg-deb", "-f", deb, "Package", "Version"], check=True,
                             capture_output=True, text=True).stdout.split()
        listing = subprocess.run(["dpkg-deb", "-c", deb], check=True, capture_output=True,
                                 text=True).stdout
        for line in listing.splitlines():
            path = line.split()[-1].lstrip(".")
            OWNERS[path] = f"{pkg[1]} {pkg[3]}"


def package_version(path: str, root: str = "/") -> str:
    return OWNERS.get(path) or dpkg_package_version(path, root)


def main(lib: str = LIB, man: str = MAN, root: str = "/") -> None:
    where = f"{root.rstrip('/')}"
    keys = conf_keys(where + lib)
    doc = {
        "source": {
            "slurm.conf": f"{lib} ({package_version(lib, root)}, sha256 "
                          f"{hashlib.sha256(open(where + lib, 'rb').read()).hexdigest()}): the "
                          "slurm_conf_options parser table, read by scripts/slurm-conf-keys.py",
            "SchedulerParameters": f"{man} ({package_version(man, root)}), the options listed "
                                   "under SchedulerParameters",
            "PrivateData": f"{man} ({package_version(man, root)}), the values listed under "
                           "PrivateData",
            "plugins": f"{os.path.dirname(lib)}/*.so with the packages of "
                       "python3 -m estate.catalogue host (or root)",
        },
        "slurm.conf": keys,
        "SchedulerParameters": scheduler_parameters(where + man),
        "PrivateData": man_options(where + man, "PrivateData"),
        "plugins": plugins(where + os.path.dirname(lib)),
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    root = "/"
    if args[:1] == ["--root"]:
        root, args = args[1], args[2:]
    if args[:1] == ["--debs"]:
        import tempfile
        root = tempfile.mkdtemp(prefix="slurm-debs.")
        unpack(args[1], root)
        args = args[2:]
    main(*args, root=root)
