"""Load a spec from YAML, remembering where every key and item came from.

Malformed YAML and schema violations come back as findings that carry the
spec path (``nodes[3].switch``) and ``file:line:column``; nothing raises for
bad user input.
"""
from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from estate.findings import Finding, Severity
from estate.spec.model import Spec

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Loc = tuple  # path elements: str keys and int indices


@dataclass
class Source:
    """Where each spec path came from in the file."""
    file: str
    marks: dict[Loc, tuple[int, int]] = field(default_factory=dict)

    def locate(self, loc: Loc) -> str:
        """file:line:column of loc, or of its nearest ancestor that has a mark."""
        loc = tuple(loc)
        while loc not in self.marks and loc:
            loc = loc[:-1]
        line, col = self.marks.get(loc, (1, 1))
        return f"{self.file}:{line}:{col}"


def spec_path(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def _walk(node: yaml.Node, loc: Loc, marks: dict) -> None:
    marks.setdefault(loc, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = loc + (key.value,)
            marks[child] = (key.start_mark.line + 1, key.start_mark.column + 1)
            _walk(value, child, marks)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, loc + (i,), marks)


@dataclass
class Loaded:
    spec: Spec | None
    source: Source
    findings: list[Finding]
    raw: object = None


def parse_yaml(text: str, filename: str) -> tuple[object, Source, list[Finding]]:
    source = Source(filename)
    try:
        # Compose once (libyaml when present), keep the marks, then construct from the node.
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        problem = getattr(exc, "problem", None) or str(exc)
        return None, source, [Finding(
            "spec.yaml", Severity.ERROR, "<root>", f"malformed YAML: {problem}",
            "fix the YAML syntax at the position shown", where)]
    if node is not None:
        _walk(node, (), source.marks)
    return data, source, []


def load_text(text: str, filename: str = "<spec>") -> Loaded:
    data, source, findings = parse_yaml(text, filename)
    if findings:
        return Loaded(None, source, findings)
    if not isinstance(data, dict):
        return Loaded(None, source, [Finding(
            "spec.type", Severity.ERROR, "<root>", "the spec must be a YAML mapping",
            "start the file with keys such as 'name:', 'segments:', 'nodes:'",
            source.locate(()))], data)
    try:
        return Loaded(Spec.model_validate(data), source, [], data)
    except ValidationError as exc:
        return Loaded(None, source, schema_findings(exc, source), data)


def load(path: str | Path) -> Loaded:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        return Loaded(None, Source(str(path)), [Finding(
            "spec.read", Severity.ERROR, "<root>", f"cannot read {path}: {exc.strerror}",
            "check the path to the spec file", str(path))])
    return load_text(text, str(path))


# --- pydantic errors -> findings ----------------------------------------------

def schema_findings(exc: ValidationError, source: Source) -> list[Finding]:
    out = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
        kind = err["type"]
        if kind == "extra_forbidden":
            out.append(_unknown_key(loc, source))
            continue
        hint = {
            "missing": "add this required key",
            "literal_error": "use one of the allowed values",
            "string_pattern_mismatch": "use letters, digits, '-', '_' and '.' only",
        }.get(kind, "correct the value's type or range")
        out.append(Finding(f"schema.{kind}", Severity.ERROR, spec_path(loc),
                           err["msg"], hint, source.locate(loc)))
    return out


def _is_union_tag(part) -> bool:
    # pydantic inserts type names such as 'literal['auto']' into union error locations
    return isinstance(part, str) and ("[" in part or part in {"ipv4", "IPv4Address"})


def _unknown_key(loc: Loc, source: Source) -> Finding:
    key = loc[-1]
    valid = valid_keys(loc[:-1])
    close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.5)
    hint = (f"did you mean '{close[0]}'?" if close else
            f"valid keys here: {', '.join(sorted(valid))}" if valid else "remove this key")
    return Finding("schema.unknown_key", Severity.ERROR, spec_path(loc),
                   f"unknown key '{key}'", hint, source.locate(loc))


def valid_keys(loc: Loc) -> list[str]:
    """The keys the model accepts at a spec path (aliases where they exist)."""
    model = _model_at(Spec, loc)
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def _model_at(tp, loc: Loc):
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(part, int):
            args = typing.get_args(tp)
            tp = args[0] if args else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            field_ = next((f for n, f in tp.model_fields.items()
                           if part in (n, f.alias)), None)
            tp = field_.annotation if field_ else None
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _unwrap(tp):
    """Strip Optional/Annotated down to the model or container type."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            models = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = models[0]
        else:
            return tp
