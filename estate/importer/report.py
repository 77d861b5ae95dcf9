"""What an import could not carry over, line by line, and how the written spec keeps it."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Dropped:
    file: str
    line: int
    text: str
    reason: str
    kind: str = "dropped"   # dropped: not in the spec; changed: renders differently

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}  -- {self.reason}"


@dataclass
class ImportReport:
    dropped: list[Dropped] = field(default_factory=list)
    defaults: list[str] = field(default_factory=list)   # spec values the source had none for
    files: dict[str, str] = field(default_factory=dict)  # next to the spec -> the source's

    def drop(self, file: str, line: int, text: str, reason: str) -> None:
        self.dropped.append(Dropped(file, line, text, reason))

    def change(self, file: str, line: int, text: str, reason: str) -> None:
        self.dropped.append(Dropped(file, line, text, reason, "changed"))

    def default(self, what: str) -> None:
        self.defaults.append(what)

    def header(self, sources: list[str]) -> str:
        """The YAML comment block that opens the written spec: where it came from, the
        defaults it filled in and every line it dropped (so none is lost silently)."""
        out = [f"# Imported by `estate import` from {', '.join(sources)}."]
        if self.defaults:
            out.append("# Defaults filled in (the source had none; review them):")
            out += [f"#   - {_one_line(d)}" for d in self.defaults]
        if self.dropped:
            out.append(f"# Dropped or changed: {len(self.dropped)} source setting(s) the "
                       "spec does not express as written:")
            out += [f"#   {d.kind}: {_one_line(str(d))}" for d in self.dropped]
        return "\n".join(out) + "\n"


def _one_line(text: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in text)
