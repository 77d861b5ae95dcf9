"""The source's nodes and partitions against those the imported spec renders, so that
every difference Estate introduces (a setting it derives, such as DefMemPerCPU, or a value
it writes its own way) is reported on the source line it changes.

Both sides are read the same way, with Slurm's defaults filled in where a key is absent,
so a difference here is one `scontrol show node/partition` would show too.
"""
from __future__ import annotations

from estate.importer.parse import ConfLine, parse
from estate.importer.report import ImportReport
from estate.spec import hostlist

NODE_DEFAULTS = {"threadspercore": "1", "corespersocket": "1", "realmemory": "1",
                 "weight": "1", "state": "UNKNOWN", "boards": "1"}
PART_DEFAULTS = {"default": "NO", "prioritytier": "1", "state": "UP", "hidden": "NO",
                 "maxtime": "UNLIMITED", "oversubscribe": "NO"}
_SAME = {"infinite": "unlimited"}
_SPELLING = {"cpus": "CPUs", "sockets": "Sockets", "features": "Features"}


def _norm(value: str) -> str:
    v = value.strip().lower()
    return _SAME.get(v, v)


def _objects(lines: list[ConfLine], keyword: str, defaults: dict, spelling: dict) -> dict:
    """name -> (line, {key: value}) after DEFAULT lines; node lines give one per host."""
    out, dflt = {}, {}
    for line in (ln for ln in lines if ln.keyword == keyword):
        params = {k: v for k, (_, v) in line.params().items()}
        spelling.update((k, w) for k, (w, _) in line.params().items())
        if line.name.upper() == "DEFAULT":
            dflt.update(params)
            continue
        merged = {**defaults, **dflt, **params}
        names = hostlist.expand(line.name) if keyword == "nodename" else [line.name]
        addrs = hostlist.expand(merged.pop("nodeaddr")) if "nodeaddr" in merged else []
        for i, name in enumerate(names):
            attrs = dict(merged)
            if len(addrs) == len(names):
                attrs["nodeaddr"] = addrs[i]
            out[name] = (line, attrs)
    return out


def _node_cpus(a: dict) -> dict:
    """Slurm's arithmetic for an absent Sockets or CPUs."""
    per = int(a["corespersocket"]) * int(a["threadspercore"])
    if "sockets" not in a:
        a["sockets"] = str(max(1, int(a.get("cpus", per)) // per))
    a.setdefault("cpus", str(int(a["sockets"]) * per))
    if "feature" in a:
        a["features"] = a.pop("feature")
    return a


def _partition(a: dict) -> dict:
    if "nodes" in a and a["nodes"].upper() != "ALL":
        a["nodes"] = ",".join(sorted(hostlist.expand(a["nodes"])))
    return a


def differences(source: str, rendered: str, report: ImportReport, file: str) -> None:
    src, out = parse(source), parse(rendered)
    spelling = dict(_SPELLING)   # lowercase key -> as the files write it
    for keyword, defaults, fix in (("nodename", NODE_DEFAULTS, _node_cpus),
                                   ("partitionname", PART_DEFAULTS, _partition)):
        theirs = _objects(src, keyword, defaults, spelling)
        ours = _objects(out, keyword, defaults, spelling)
        seen: set[str] = set()
        for name, (line, attrs) in theirs.items():
            if name not in ours:
                _once(seen, report, file, line, f"{line.pairs[0][0]}={name}",
                      "not in the rendered configuration")
                continue
            a, b = fix(dict(attrs)), fix(dict(ours[name][1]))
            for key in sorted(set(a) | set(b)):
                if key == "nodes" and _norm(a.get(key, "")) == "all":
                    continue   # ALL: every node, written out by the import
                if _norm(a.get(key, "")) != _norm(b.get(key, "")):
                    what = f"{b[key]}" if key in b else "(not written)"
                    was = a.get(key, "(not set)")
                    spelled = spelling.get(key, key)
                    _once(seen, report, file, line, f"{line.pairs[0][0]}={line.name} {spelled}",
                          f"renders {spelled}={what} where the source has {was}")


def _once(seen: set, report: ImportReport, file: str, line: ConfLine, text: str,
          reason: str) -> None:
    """Report a difference once, and not where the mapping already reported that key."""
    key = text.rsplit(" ", 1)[-1].lower()
    if any(d.line == line.number and d.file == file and
           d.text.lower().startswith((key + "=", key + " ", "gres item"))
           for d in report.dropped):
        return
    if (line.number, text, reason) not in seen:
        seen.add((line.number, text, reason))
        report.change(file, line.number, text, reason)
