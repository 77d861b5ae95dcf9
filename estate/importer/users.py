"""The service accounts (slurm, munge) as this host's passwd has them, else Debian's."""
from __future__ import annotations

from pathlib import Path

# Debian 12's packages: slurm-wlm's fixed ids, munge's usual system ids.
DEBIAN = {"slurm": (64030, 64030, "/var/lib/slurm"), "munge": (64031, 64031, "/nonexistent")}


def _passwd(path: Path) -> dict[str, tuple[int, int, str]]:
    try:
        text = path.read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        f = line.split(":")
        if len(f) >= 7 and f[2].isdigit() and f[3].isdigit():
            out[f[0]] = (int(f[2]), int(f[3]), f[5])
    return out


def service_identity(report, slurm_user: str = "slurm",
                     passwd: Path = Path("/etc/passwd")) -> dict:
    found = _passwd(passwd)
    groups, users = [], []
    for name in dict.fromkeys((slurm_user, "slurm", "munge")):
        uid, gid, home = found.get(name) or DEBIAN.get(name, (64032, 64032, "/nonexistent"))
        if name not in found:
            report.default(f"identity: user {name} uid {uid}, gid {gid} (Debian's; "
                           f"not in {passwd})")
        groups.append({"name": name, "gid": gid})
        users.append({"name": name, "uid": uid, "group": name, "home": home,
                      "shell": "/usr/sbin/nologin", "system": True})
    return {"groups": groups, "users": users}
