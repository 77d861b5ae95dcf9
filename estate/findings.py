"""What every stage reports: a finding with a stable id, a severity, a spec path and a hint.

It sits below the spec layer, so that loading a spec and checking it report alike
without the spec importing the checks."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    path: str
    message: str
    hint: str = ""
    location: str = ""  # file:line:column where the spec path was found

    def as_dict(self) -> dict:
        d = asdict(self)
        d["severity"] = self.severity.value
        return d


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.severity.rank, f.path, f.id))
