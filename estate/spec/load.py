"""Load a spec from YAML, remembering where every key and item came from.

Malformed YAML and schema violations come back as findings that carry the
spec path (``nodes[3].switch``) and ``file:line:column``; nothing raises for
bad user input.
"""
from __future__ import annotations

import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from estate.findings import Finding, Severity
from estate.spec import bounds
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


def _walk(node: yaml.Node, loc: Loc, marks: dict, seen: set, visit=None) -> None:
    """The marks of every spec path under node; visit(node, loc), if given, sees every
    distinct node once, mapping keys included."""
    marks.setdefault(loc, (node.start_mark.line + 1, node.start_mark.column + 1))
    if id(node) in seen:    # an alias: its marks are those of the anchored node, once
        return
    seen.add(id(node))
    if visit is not None:
        visit(node, loc)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if visit is not None:
                visit(key, loc)
            # a collection as a key: "?" in the path, as _scan_events writes it
            child = loc + (key.value if isinstance(key, yaml.ScalarNode) else "?",)
            marks[child] = (key.start_mark.line + 1, key.start_mark.column + 1)
            _walk(value, child, marks, seen, visit)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, loc + (i,), marks, seen, visit)


@dataclass
class Loaded:
    spec: Spec | None
    source: Source
    findings: list[Finding]
    raw: object = None
    files: dict[str, bytes] = field(default_factory=dict)   # files the spec brings along


# --- the input, before YAML: size, encoding, control characters ---------------------------

# C0 controls other than tab, newline and carriage return; DEL; C1 controls other than NEL
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x84\x86-\x9f]")
_STANDARD_TAGS = {f"tag:yaml.org,2002:{t}" for t in
                  ("str", "int", "float", "bool", "null", "seq", "map")} | {"!"}


def _error(id: str, message: str, hint: str, where: str, path: str = "<root>") -> Finding:
    return Finding(id, Severity.ERROR, path, message, hint, where)


def _too_large(size: int, filename: str) -> Finding:
    return _error("spec.too_large", f"the spec is {size} bytes, more than the limit of "
                  f"{bounds.MAX_SPEC_BYTES} bytes (MAX_SPEC_BYTES)",
                  "split the estate or describe nodes with hostlist ranges", filename)


def decode(data: bytes, filename: str) -> tuple[str | None, list[Finding]]:
    """The spec's bytes as text: UTF-8 only, within the size limit."""
    if len(data) > bounds.MAX_SPEC_BYTES:
        return None, [_too_large(len(data), filename)]
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        return None, [_error("spec.encoding", f"byte 0x{data[exc.start]:02x} at offset "
                             f"{exc.start} is not UTF-8", "save the spec as UTF-8",
                             f"{filename}:{line}:{col}")]


def _control_characters(text: str, filename: str) -> list[Finding]:
    m = _CONTROL.search(text)
    if not m:
        return []
    line = text.count("\n", 0, m.start()) + 1
    col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
    return [_error("spec.control_character", f"control character U+{ord(m.group()):04X} "
                   "in the spec", "remove it (NUL bytes and terminal escapes are never part "
                   "of a name, path or product)", f"{filename}:{line}:{col}")]


# --- YAML events: limits checked before anything is composed or constructed ---------------

@dataclass
class _Frame:
    kind: str               # "map" or "seq"
    loc: Loc
    anchor: str | None
    start_total: int
    keys: dict = field(default_factory=dict)
    expect_key: bool = True
    key: object = None
    index: int = 0


class _Limit(Exception):
    def __init__(self, finding: Finding):
        self.finding = finding


def _scan_events(loader, filename: str, build: _Builder | None = None) -> list[Finding]:
    """One pass over the parser's events: aliases, expanded size, nesting, documents,
    duplicate and merge keys and tags, with the spec path and file:line:column of each.
    (A control character written as an escape inside a value is the spec types' business:
    schema.control_character at the value's path.) Raises _Limit when reading on would be unbounded.
    With build, the same pass also constructs the document and its marks (_Builder)."""
    findings: list[Finding] = []
    stack: list[_Frame] = []
    anchors: dict[str, int] = {}
    open_anchors: set[str] = set()
    total = aliases = documents = 0

    def where(mark) -> str:
        return f"{filename}:{mark.line + 1}:{mark.column + 1}"

    def place(event) -> tuple[Loc, bool]:
        """The spec path of a node event, and whether it is a mapping key."""
        if not stack:
            return (), False
        top = stack[-1]
        if top.kind == "seq":
            top.index += 1
            return top.loc + (top.index - 1,), False
        if top.expect_key:
            top.expect_key = False
            return top.loc, True
        top.expect_key = True
        return top.loc + (top.key,), False

    while loader.check_event():
        event = loader.get_event()
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise _Limit(_error("spec.multi_document", "the spec holds more than one YAML "
                                    "document", "keep one spec per file (remove '---')",
                                    where(event.start_mark)))
            continue
        if not isinstance(event, (yaml.NodeEvent, yaml.CollectionEndEvent)):
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            frame = stack.pop()
            if build is not None:
                build.end()
            if frame.anchor is not None:
                anchors[frame.anchor] = total - frame.start_total + 1
                open_anchors.discard(frame.anchor)
            continue
        loc, is_key = place(event)
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if event.anchor in open_anchors:
                raise _Limit(_error("spec.yaml_recursive_alias", f"alias *{event.anchor} "
                                    "refers to a node that contains it", "remove the alias",
                                    where(event.start_mark), spec_path(loc)))
            total += anchors.get(event.anchor, 1)
            if is_key:
                stack[-1].key = f"*{event.anchor}"
        else:
            total += 1
            tag = getattr(event, "tag", None)
            if tag is not None and tag not in _STANDARD_TAGS:
                findings.append(_error("spec.yaml_tag", f"YAML tag {tag} is not allowed",
                                       "remove the tag: a spec holds plain mappings, lists, "
                                       "strings and numbers", where(event.start_mark),
                                       spec_path(loc)))
        if build is not None and not build.node(event, loc, is_key):
            build = None   # PyYAML composes and constructs this document instead
        if aliases > bounds.MAX_YAML_ALIASES or total > bounds.MAX_YAML_NODES:
            raise _Limit(_error("spec.yaml_alias_limit", f"the spec expands to more than "
                                f"{bounds.MAX_YAML_NODES} YAML nodes (MAX_YAML_NODES) or uses "
                                f"more than {bounds.MAX_YAML_ALIASES} aliases "
                                "(MAX_YAML_ALIASES)", "write the spec without nested aliases",
                                where(event.start_mark), spec_path(loc)))
        if isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                anchors[event.anchor] = 1
            if is_key:
                top = stack[-1]
                top.key = event.value
                if event.value == "<<" and event.implicit[0]:
                    findings.append(_error("spec.yaml_merge_key", "YAML merge keys ('<<') are "
                                           "not supported", "write the keys out",
                                           where(event.start_mark), spec_path(loc)))
                elif event.value in top.keys:
                    first = top.keys[event.value]
                    findings.append(_error(
                        "spec.duplicate_key", f"key '{event.value}' appears twice (first at "
                        f"line {first.line + 1}); YAML would silently keep the last",
                        "remove one of them", where(event.start_mark),
                        spec_path(loc + (event.value,))))
                else:
                    top.keys[event.value] = event.start_mark
        elif isinstance(event, yaml.CollectionStartEvent):
            if is_key:
                stack[-1].key = "?"
            if len(stack) >= bounds.MAX_YAML_DEPTH:
                raise _Limit(_error("spec.yaml_depth_limit", f"mappings and lists nest deeper "
                                    f"than {bounds.MAX_YAML_DEPTH} levels (MAX_YAML_DEPTH)",
                                    "flatten the spec", where(event.start_mark),
                                    spec_path(loc)))
            kind = "map" if isinstance(event, yaml.MappingStartEvent) else "seq"
            stack.append(_Frame(kind, loc, event.anchor, total))
            if event.anchor is not None:
                open_anchors.add(event.anchor)
    if build is not None:
        build.done = True
    return findings


_STR = "tag:yaml.org,2002:str"
_OWN_TAG = {yaml.MappingStartEvent: (None, "!", "tag:yaml.org,2002:map"),
            yaml.SequenceStartEvent: (None, "!", "tag:yaml.org,2002:seq")}


class _Builder:
    """The document and its marks, constructed from the events _scan_events reads anyway,
    in the same pass: what PyYAML's composer, SafeConstructor and _walk give, without
    composing nodes and walking them twice (at 10,000 nodes in groups of 8, a 230 KB spec,
    those three passes took 0.08 s of a 0.12 s load). node() returns False for what only
    PyYAML's composer and constructor report the way they do (a key that is a collection
    or an alias, an undefined alias, a collection tagged as another kind); the caller then
    gives the document to them. tests/unit/test_load_yaml.py holds the two to one result.
    A scalar that does not construct (`!!int lab`, a date of month 13) is a finding at its
    spec path here, not an exception."""

    def __init__(self, loader, filename: str):
        self.loader = loader
        self.filename = filename
        self.marks: dict[Loc, tuple[int, int]] = {}
        self.findings: list[Finding] = []
        self.root = None
        self.done = False
        self._open: list[tuple[Any, object]] = []   # (container, its pending key)
        self._anchored: dict[str, tuple[object, tuple[int, int]]] = {}

    def node(self, event, loc: Loc, is_key: bool) -> bool:
        mark = (event.start_mark.line + 1, event.start_mark.column + 1)
        if isinstance(event, yaml.AliasEvent):
            if is_key or event.anchor not in self._anchored:
                return False
            value, mark = self._anchored[event.anchor]
            self.marks.setdefault(loc, mark)
            self._attach(value)
            return True
        if isinstance(event, yaml.ScalarEvent):
            path = loc + (event.value,) if is_key else loc
            try:
                value = self._scalar(event, path, mark)
            except yaml.YAMLError:   # an unknown implicit tag ('='): PyYAML's message
                return False
            if is_key:
                self.marks[path] = mark
                container, _ = self._open[-1]
                self._open[-1] = (container, value)
            else:
                self.marks.setdefault(loc, mark)
                self._attach(value)
        else:
            if is_key or event.tag not in _OWN_TAG[type(event)]:
                return False
            self.marks.setdefault(loc, mark)
            value = {} if isinstance(event, yaml.MappingStartEvent) else []
            self._attach(value)
            self._open.append((value, None))
        if event.anchor is not None:
            self._anchored[event.anchor] = (value, mark)
        return True

    def end(self) -> None:
        self._open.pop()

    def _scalar(self, event, path: Loc, mark: tuple[int, int]):
        tag = event.tag
        if tag is None or tag == "!":   # as PyYAML's composer resolves it
            tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag == _STR:
            return event.value
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            return self.loader.construct_object(node)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # noqa: BLE001 - each constructor fails its own way
            self.findings.append(_scalar_finding(event.value, tag, exc, path,
                                                 f"{self.filename}:{mark[0]}:{mark[1]}"))
            return None

    def _attach(self, value) -> None:
        if not self._open:
            self.root = value
            return
        container, key = self._open[-1]
        if isinstance(container, list):
            container.append(value)
        else:
            container[key] = value


def _scalar_finding(value: str, tag: str, exc: Exception, path: Loc, where: str) -> Finding:
    kind = tag.rsplit(":", 1)[-1]
    why = f" ({exc})" if isinstance(exc, (ValueError, OverflowError)) else ""
    return _error("spec.yaml_value", f"YAML reads {value!r} as type {kind} (by its form "
                  f"or its tag), and it is not a valid {kind}{why}",
                  "quote the value to keep it as text, or correct the value or its tag",
                  where, spec_path(path))


def _bad_scalars(node: yaml.Node, filename: str) -> list[Finding]:
    """The scalars of a composed document that do not construct, as findings: for a
    document _Builder left to PyYAML, whose constructor stops at the first with a bare
    exception."""
    probe = _Loader("")
    found: list[Finding] = []

    def visit(n: yaml.Node, loc: Loc) -> None:
        if not isinstance(n, yaml.ScalarNode):
            return
        try:
            probe.construct_object(n)
        except yaml.YAMLError:
            pass
        except Exception as exc:  # noqa: BLE001
            found.append(_scalar_finding(n.value, n.tag, exc, loc, f"{filename}:"
                                         f"{n.start_mark.line + 1}:{n.start_mark.column + 1}"))

    _walk(node, (), {}, set(), visit)
    probe.dispose()
    return found


def parse_yaml(text: str, filename: str) -> tuple[object, Source, list[Finding]]:
    source = Source(filename)
    if len(text) > bounds.MAX_SPEC_BYTES:
        return None, source, [_too_large(len(text), filename)]
    findings = _control_characters(text, filename)
    if findings:
        return None, source, findings
    try:
        scanner = _Loader(text)
        built = _Builder(scanner, filename)
        try:
            findings = _scan_events(scanner, filename, built)
        except _Limit as limit:
            return None, source, [limit.finding]
        finally:
            scanner.dispose()
        if built.done:
            findings += built.findings
        if findings:
            return None, source, findings
        if built.done:
            source.marks = built.marks
            return built.root, source, []
        # What the one pass left to PyYAML: compose (libyaml when present), construct, walk.
        loader = _Loader(text)
        node = None
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        except yaml.YAMLError:
            raise
        except Exception:
            found = _bad_scalars(node, filename) if node is not None else []
            if not found:
                raise
            return None, source, found
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
        _walk(node, (), source.marks, set())
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
        if path.stat().st_size > bounds.MAX_SPEC_BYTES:
            return Loaded(None, Source(str(path)), [_too_large(path.stat().st_size, str(path))])
        data = path.read_bytes()
    except OSError as exc:
        return Loaded(None, Source(str(path)), [Finding(
            "spec.read", Severity.ERROR, "<root>", f"cannot read {path}: {exc.strerror}",
            "check the path to the spec file", str(path))])
    text, findings = decode(data, str(path))
    if text is None:
        return Loaded(None, Source(str(path)), findings)
    loaded = load_text(text, str(path))
    if loaded.spec is not None:
        from estate.spec.handoff_overlay import merge   # the plane a node is lent to
        loaded = merge(loaded, path, sys.modules[__name__])
    if loaded.spec is not None:
        read_companions(loaded, path.parent)
    return loaded


MAX_COMPANION_BYTES = 1024 * 1024


def read_companions(loaded: Loaded, base: Path) -> None:
    """The files the spec names (node hook scripts), read from the spec's directory. A
    file that is missing, outside that directory (a symlink out) or too large is an error
    at the spec path naming it."""
    from estate.model.services import hooks   # the spec's references to files
    root = base.resolve()
    for hook in hooks(loaded.spec):
        problem = None
        try:
            real = (base / hook.file).resolve(strict=True)
            if root not in real.parents:
                problem = f"{hook.file} resolves outside the spec's directory ({real})"
            elif not real.is_file():
                problem = f"{hook.file} is not a regular file"
            elif real.stat().st_size > MAX_COMPANION_BYTES:
                problem = f"{hook.file} is larger than {MAX_COMPANION_BYTES} bytes"
            else:
                loaded.files[hook.file] = real.read_bytes()
        except OSError as exc:
            problem = f"cannot read {hook.file}: {exc.strerror or exc}"
        if problem:
            loaded.findings.append(Finding(
                "spec.companion_file", Severity.ERROR, spec_path(hook.where), problem,
                f"put the script at {base / hook.file} (a path relative to the spec's "
                "directory, inside it)", loaded.source.locate(hook.where)))


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
    import difflib   # only for a spec with an unknown key
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
