#!/usr/bin/env python3
"""Write slurm_conf/update-policy/<version>.json: what a change of each documented key needs,
read from the release's own manual pages (slurm.conf(5), gres.conf(5), cgroup.conf(5),
topology.conf(5)).

Each manual says in its DESCRIPTION that changes "take effect upon restart of Slurm daemons,
daemon receipt of the SIGHUP signal, or execution of the command scontrol reconfigure
unless otherwise noted"; the exceptions are sentences in the key's own entry ("A restart of
slurmctld is required for changes to this parameter to take effect"). So every key a
manual documents is classified: by the sentences of its entry that speak of a restart or
a reconfiguration, else by the manual's default sentence. The sentence is kept as the
quote, so the JSON says why. A key no manual documents is not in the file: Estate's own
judgements (estate/model/update_policy.py JUDGED) must cover it, or
tests/unit/test_update_policy.py fails.

Entries are read from the roff source: a top-level entry is `.TP` then `\\fBName\\fR` outside
any `.RS` block; sections are `.SH`. Line fields of NodeName, NodeSet and PartitionName
lines are keyed "node:RealMemory", "nodeset:Feature", "partition:MaxTime"; the other files'
keys "gres.conf:Cores", "cgroup.conf:ConstrainCores", "topology.conf:SwitchName".

    python3 scripts/slurm-update-policy.py > slurm_conf/update-policy/22.05.json
    python3 scripts/slurm-update-policy.py --root "$(scripts/slurm-root.sh 24.11)" \\
        > slurm_conf/update-policy/24.11.json
"""
from __future__ import annotations

import gzip
import json
import re
import sys

from debian_package import package_version

MAN5 = "/usr/share/man/man5"
# slurm.conf(5)'s sections whose entries are fields of one line kind
LINE_SECTIONS = {"NODE CONFIGURATION": "node", "NODESET CONFIGURATION": "nodeset",
                 "PARTITION CONFIGURATION": "partition"}
KEY_SECTIONS = {"PARAMETERS"}   # slurm.conf's own keys
# the other manuals' sections that hold no keys (their keys are under DESCRIPTION and others)
NOT_KEYS = {"NAME", "EXAMPLE", "EXAMPLES", "COPYING", "SEE ALSO", "FILES"}

# The sentence patterns, strongest first: the first that matches an entry's sentences is
# its class. The classes (estate/model/update_policy.py ACTIONS' keys):
#   restart_all_drain  every daemon stopped and restarted, running steps lost: drain first
#   restart_all        slurmctld and every slurmd restarted
#   restart_slurmd     slurmd restarted
#   restart_slurmctld  slurmctld restarted
#   reconfigure        scontrol reconfigure (or SIGHUP)
RULES = [
    ("restart_all_drain", r"must be terminated prior to changing|interrupt outstanding job "
                          r"steps|running jobs must be restarted"),
    ("restart_all", r"restart(ing)? (of )?(both )?(the )?slurmctld (daemon )?and (the )?"
                    r"(all )?slurmd|slurmctld and slurmd daemons (must|need to) be "
                    r"restarted|all slurm daemons (must|need to) be restarted"),
    ("restart_slurmd", r"restart of (the |all )?slurmd"),
    ("restart_slurmctld", r"restart of (the )?slurmctld|slurmctld (daemon )?must be "
                          r"restarted|requires? (a )?(slurmctld|controller) restart"),
    ("reconfigure", r"reconfigur"),
]
TOUCHES = re.compile(r"restart|reconfigur|terminated prior", re.I)


def plain(roff: str) -> str:
    """Roff text as a sentence: fonts, escapes and requests dropped."""
    text = re.sub(r"\\f[BIRP]|\\f\(..|\\\*\(..|\\&|\\e", "", roff)
    text = text.replace("\\-", "-").replace('\\"', '"').replace("\\(aq", "'")
    return re.sub(r"\s+", " ", text).strip()


def entries(path: str) -> dict[str, dict[str, str]]:
    """section -> {entry name -> its text (plain)}: the top-level .TP entries."""
    out: dict[str, dict[str, str]] = {}
    section, depth, name, body = "", 0, None, []
    lines = gzip.open(path, "rt", errors="replace").read().splitlines()

    def close():
        if name:
            out.setdefault(section, {}).setdefault(name, plain(" ".join(body)))

    for i, line in enumerate(lines):
        if line.startswith(".SH"):
            close()
            name, body = None, []
            section, depth = line[3:].strip().strip('"'), 0
            continue
        if line.startswith(".RS"):
            depth += 1
        elif line.startswith(".RE"):
            depth = max(0, depth - 1)
        m = re.match(r"\\fB([A-Z][A-Za-z0-9]+)\\fR", line)
        if m and depth == 0 and i and lines[i - 1].startswith(".TP"):
            close()
            name, body = m.group(1), [line[m.end():]]
            continue
        if name and not (line.startswith(".") and not line.startswith(".B")):
            body.append(line)
    close()
    return out


def sentences(text: str) -> list[str]:
    # not after "e.g." or "i.e.": those end no sentence
    return [s.strip() for s in re.split(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])\s+(?=[A-Z\"])",
                                        text) if s.strip()]


def classify(text: str, default: tuple[str, str]) -> tuple[str, str, str]:
    """(class, quote, how): from the entry's own sentences, else the manual's default."""
    said = [s for s in sentences(text) if TOUCHES.search(s)]
    joined = " ".join(said)
    for cls, pattern in RULES:
        if said and re.search(pattern, joined, re.I):
            quote = next((s for s in said if re.search(pattern, s, re.I)), joined)
            return cls, quote, "entry"
    return default[0], default[1], "default"


def default_sentence(path: str) -> tuple[str, str]:
    """The DESCRIPTION's "Changes ... take effect upon ... unless otherwise noted"."""
    roff = gzip.open(path, "rt", errors="replace").read()
    text = plain(" ".join(l for l in roff.splitlines() if not l.startswith(".")))
    m = re.search(r"Changes to the configuration file take effect[^.]*unless otherwise "
                  r"noted\.", text)
    return "reconfigure", m.group(0)


def manual(root: str, name: str) -> str:
    return f"{root.rstrip('/')}{MAN5}/{name}.5.gz"


def main(root: str = "/") -> None:
    doc = {"source": {}, "keys": {}}
    for conf in ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf"):
        path = manual(root, conf)
        doc["source"][conf] = (f"{MAN5}/{conf}.5.gz ({package_version(f'{MAN5}/{conf}.5.gz', root)})"
                               ", read by scripts/slurm-update-policy.py")
        default = default_sentence(path)
        for section, found in entries(path).items():
            if conf == "slurm.conf":
                prefix = ("" if section in KEY_SECTIONS else
                          LINE_SECTIONS.get(section, "") + ":" if section in LINE_SECTIONS
                          else None)
                # a whole line kind's own rule: the section's opening text
                # (NODE CONFIGURATION: "Changes in node configuration ... require ...")
            else:
                prefix = None if section in NOT_KEYS else f"{conf}:"
            if prefix is None:
                continue
            for key, text in found.items():
                cls, quote, how = classify(text, default)
                doc["keys"].setdefault(prefix + key, {"action": cls, "from": how,
                                                      "quote": quote, "section": section})
        if conf == "slurm.conf":
            doc["sections"] = section_rules(path, default)
    json.dump(doc, sys.stdout, indent=1, sort_keys=False, ensure_ascii=False)
    sys.stdout.write("\n")


def section_rules(path: str, default: tuple[str, str]) -> dict[str, dict]:
    """The line kinds' own rule, from the section's opening paragraph (before its first
    entry): adding, removing or changing a node line."""
    roff = gzip.open(path, "rt", errors="replace").read()
    out = {}
    for section, kind in LINE_SECTIONS.items():
        m = re.search(r'^\.SH "?' + section + r'"?\n(.*?)^\.TP', roff, re.M | re.S)
        if not m:
            continue
        text = plain(" ".join(l for l in m.group(1).splitlines() if not l.startswith(".")))
        cls, quote, how = classify(text, default)
        out[kind] = {"action": cls, "from": how, "quote": quote, "section": section}
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    main(root=args[1] if args[:1] == ["--root"] else "/")
