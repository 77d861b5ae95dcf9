"""No spec value reaches a config line, a manifest or a command unescaped.

The spec's free-text fields are found by walking the pydantic model tree from Spec (so a
field added later is covered without touching this file): every str-typed field, list
item and dict key, whatever its restricted type. Each is set, on the richest example
spec, to hostile values (a newline followed by a Slurm line, shell substitutions, NUL,
a quote and a newline followed by a YAML key, YAML's null and boolean words, '../..',
'/etc'), and then either

- loading or ``estate check`` reports an error finding at that field's spec path, or
- the render succeeds and no rendered file carries the payload: no line starts with
  injected text, no NUL or shell payload appears, every YAML document still parses to
  the same object kinds as before, JSON still parses, no artifact path escapes the tree.
"""
from __future__ import annotations

import atexit
import copy
import json
import re
import shutil
import tempfile
import types
import typing
from collections import Counter
from functools import lru_cache
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from estate.check import check_spec
from estate.findings import Severity
from estate.render import render_all
from estate.render.templates import RenderError, environment
from estate.spec.load import Loaded, Source, load_text, read_companions, schema_findings, spec_path
from estate.spec.model import Spec
from estate.spec.resolved import Estate
from tests.unit.checkutil import SPECS, spec_dict

STACK = "prod"
ROOT_STACK = SPECS[STACK]
# Sections the example leaves out, planted so that their slots are reached too: node hooks
# name files next to the spec (read from COMPANIONS, as spec.load reads them).
PLANTED_HOOKS = {"prolog": "hooks/prolog.sh", "epilog": "hooks/epilog.sh",
                 "health_check": {"program": "hooks/nhc"}, "reboot_program": "/usr/sbin/reboot"}
PLANTED_POWER = {"resume_program": "power/resume.sh", "suspend_program": "power/suspend.sh"}
# "{v}" stands for the field's current value (or "x"): a payload behind a valid prefix
# gets past checks that only look at how a value starts.
PAYLOADS = {
    "newline": "{v}\nNodeName=evil State=UP",
    "bare-newline": "x\nNodeName=evil",
    "trailing-newline": "{v}\n",
    "carriage-return": "{v}\rNodeName=evil",
    "line-separator": "{v}\u2028NodeName=evil",
    "subshell": "{v}$(reboot)",
    "backticks": "{v}`reboot`",
    "semicolon": "{v};rm -rf /",
    "nul": "{v}\x00y",
    "quote-newline": "{v}'\"\nevil: true",
    "yaml-key": "{v}: {evil: true}",
    "space-keyword": "{v} evil=1",
    "yaml-null": "null",
    "yaml-bool": "On",
    "traversal": "../..",
    "traversal-suffix": "{v}/../../etc",
    "system-dir": "/etc",
}
INJECTED_LINES = ("NodeName=evil", "evil: true", "evil:")
FORBIDDEN_TEXT = ("\x00", "$(reboot)", "`reboot`", "rm -rf /", " evil=1", "../../etc")
# /etc as a directory a role chowns, an NFS mount point or an export
SYSTEM_DIR_LINE = re.compile(r"(Where=|StateSaveLocation=|What=\S+:)/etc$|/etc\s")


# --- the model's free-text slots -------------------------------------------------------

def _unwrap(tp):
    """(base type, args) with Annotated stripped."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _options(tp) -> list:
    tp = _unwrap(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [_unwrap(a) for a in typing.get_args(tp) if a is not type(None)]
    return [tp]


def _is_str(tp) -> bool:
    return any(o is str for o in _options(tp))


def _model(tp):
    return next((o for o in _options(tp) if isinstance(o, type) and issubclass(o, BaseModel)),
                None)


def _sample(tp):
    """A valid-enough value for a type, to give a new dict key something to hold."""
    if _model(tp):
        return {}
    for o in _options(tp):
        if o is int:
            return 1
        if typing.get_origin(o) is typing.Literal:
            return typing.get_args(o)[0]
        if o in (IPv4Address, IPv4Network):
            return "auto"
    return "x"


def model_slots(model=Spec, seen=None) -> set[tuple[str, str, str]]:
    """(model, field key, 'value' | 'item' | 'key' | 'dict-value') for every str slot."""
    seen = set() if seen is None else seen
    if model in seen:
        return set()
    seen.add(model)
    out = set()
    for name, field in model.model_fields.items():
        key = field.alias or name
        for tp in _options(field.annotation):
            origin = typing.get_origin(tp)
            if tp is str:
                out.add((model.__name__, key, "value"))
            elif origin is list:
                (item,) = typing.get_args(tp)
                if _is_str(item):
                    out.add((model.__name__, key, "item"))
                if _model(item):
                    out |= model_slots(_model(item), seen)
            elif origin is dict:
                k, v = typing.get_args(tp)
                if _is_str(k):
                    out.add((model.__name__, key, "key"))
                if _is_str(v):
                    out.add((model.__name__, key, "dict-value"))
                if _model(v):
                    out |= model_slots(_model(v), seen)
            elif isinstance(tp, type) and issubclass(tp, BaseModel):
                out |= model_slots(tp, seen)
    return out


def targets(model, data: dict, loc: tuple = ()):
    """(slot, spec location, setter, present) for every str slot in data.

    setter(data_copy, value) plants value there; a missing optional field is added to its
    parent, an empty list or dict gets one item (present is then False)."""
    for name, field in model.model_fields.items():
        key = field.alias or name
        here = loc + (key,)
        for tp in _options(field.annotation):
            origin = typing.get_origin(tp)
            slot = (model.__name__, key)
            if tp is str:
                yield slot + ("value",), here, _set(here), key in data
            elif origin is list:
                (item,) = typing.get_args(tp)
                # a field that takes one item or a list of them (NodeClass.gpus) holds one here
                items = data.get(key) if isinstance(data.get(key), list) else []
                if _is_str(item):
                    yield slot + ("item",), here + (0,), _set(here + (0,), True), bool(items)
                sub = _model(item)
                for i, entry in enumerate(items if sub else []):
                    yield from targets(sub, entry, here + (i,))
            elif origin is dict:
                k, v = typing.get_args(tp)
                entries = data.get(key) or {}
                if _is_str(k):
                    yield slot + ("key",), here, _rename_key(here, _sample(v)), bool(entries)
                for first in list(entries)[:1]:
                    if _is_str(v):
                        yield slot + ("dict-value",), here + (first,), _set(here + (first,)), True
                    if _model(v):
                        yield from targets(_model(v), entries[first], here + (first,))
            elif isinstance(tp, type) and issubclass(tp, BaseModel):
                if isinstance(data.get(key), dict):
                    yield from targets(tp, data[key], here)


def first_targets(data: dict) -> list:
    """One (slot, location, setter) per slot: the first present instance, else the first."""
    best: dict = {}
    for slot, loc, setter, present in targets(Spec, data):
        if slot not in best or (present and not best[slot][2]):
            best[slot] = (loc, setter, present)
    return [(slot, loc, setter) for slot, (loc, setter, _) in best.items()]


def _at(data, loc):
    for part in loc:
        data = data[part]
    return data


def _set(loc, make_list=False):
    def setter(data, value):
        if make_list:  # loc ends with index 0 of a list that may be empty or missing
            grand = _at(data, loc[:-2])
            grand[loc[-2]] = [value] + list(grand.get(loc[-2]) or [])[1:]
        else:
            _at(data, loc[:-1])[loc[-1]] = value
        return loc
    return setter


def _rename_key(loc, sample):
    def setter(data, value):
        parent = _at(data, loc[:-1])
        entries = parent.get(loc[-1]) or {}
        if entries:
            first = next(iter(entries))
            entries = {(value if k == first else k): v for k, v in entries.items()}
        else:
            entries = {value: sample}
        parent[loc[-1]] = entries
        return loc + (value,)
    return setter


def spec_data() -> dict:
    data = spec_dict(STACK)
    data["slurm"]["hooks"] = copy.deepcopy(PLANTED_HOOKS)
    data["slurm"]["power_saving"] = copy.deepcopy(PLANTED_POWER)
    return data


@lru_cache(maxsize=1)
def companions() -> Path:
    base = Path(tempfile.mkdtemp(prefix="estate-injection-"))
    atexit.register(shutil.rmtree, base, True)   # one per test process, gone when it ends
    for name in ("hooks/prolog.sh", "hooks/epilog.sh", "hooks/nhc", *PLANTED_POWER.values()):
        (base / name).parent.mkdir(exist_ok=True)
        (base / name).write_bytes(b"#!/bin/sh\nexit 0\n")
    return base


def with_files(spec: Spec, source: Source) -> tuple[Estate, list]:
    """The spec as the pipeline has it: the files it names read, a missing one a finding."""
    loaded = Loaded(spec, source, [])
    read_companions(loaded, companions())
    return Estate(spec, loaded.files), loaded.findings


# --- what a rendered tree looks like -------------------------------------------------------

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _kinds(artifacts) -> Counter:
    kinds = Counter()
    for path, a in artifacts.items():
        if path.endswith((".yaml", ".yml")):
            for doc in yaml.load_all(a.content, Loader=_LOADER):
                if doc is not None:
                    kinds[(path, doc.get("kind") if isinstance(doc, dict) else type(doc))] += 1
    return kinds


@lru_cache(maxsize=1)
def baseline():
    data = spec_data()
    loaded = load_text(yaml.safe_dump(data, sort_keys=False))
    estate, missing = with_files(loaded.spec, loaded.source)
    assert missing == []
    artifacts = render_all(estate, "spec.yaml")
    return data, artifacts, _kinds(artifacts)


def render_harm(artifacts, base) -> list[str]:
    """What in a rendered tree shows that a payload got through."""
    harm = []
    base_kinds = _kinds(base)
    for path, a in artifacts.items():
        lines, base_lines = a.content.count(b"\n"), base.get(path, a).content.count(b"\n")
        if lines != base_lines:
            harm.append(f"{path} has {lines} lines, not {base_lines}: a value added or split "
                        "a line")
        if path.startswith("/") or ".." in path.split("/") or "\n" in path:
            harm.append(f"artifact path {path!r} escapes the rendered tree")
        text = a.content.decode(errors="replace")
        for bad in FORBIDDEN_TEXT:
            if bad in text:
                harm.append(f"{path} contains {bad!r}")
        for line in text.splitlines():
            if line.lstrip(" -{").startswith(INJECTED_LINES):
                harm.append(f"{path} has an injected line {line!r}")
            if SYSTEM_DIR_LINE.match(line):
                harm.append(f"{path} makes /etc a mount point, export or state directory: "
                            f"{line!r}")
        if path.endswith(".json"):
            try:
                json.loads(a.content)
            except ValueError as exc:
                harm.append(f"{path} is no longer JSON: {exc}")
    try:
        kinds = _kinds(artifacts)
    except yaml.YAMLError as exc:
        return harm + [f"a rendered YAML file no longer parses: {exc}"]
    if sorted(Counter(k for (_, k) in kinds.elements()).items(), key=str) != \
            sorted(Counter(k for (_, k) in base_kinds.elements()).items(), key=str):
        harm.append(f"YAML object kinds changed: {kinds} != {base_kinds}")
    return harm


# --- the cases -----------------------------------------------------------------------------

def cases():
    data = spec_data()
    out = []
    for slot, loc, setter in first_targets(data):
        for pname in PAYLOADS:
            out.append(pytest.param(slot, loc, setter, pname,
                                    id=f"{spec_path(loc)}:{slot[2]}:{pname}"))
    return out


def test_every_str_slot_of_the_model_is_reached():
    """The walk over the example spec reaches every free-text slot the model has."""
    reached = {slot for slot, _, _ in first_targets(spec_data())}
    assert model_slots() - reached == set()
    assert len(reached) >= 30


@pytest.mark.parametrize("slot,loc,setter,pname", cases())
def test_hostile_value_is_refused_or_harmless(slot, loc, setter, pname):
    data = spec_data()
    try:
        current = _at(data, loc)
    except (KeyError, IndexError, TypeError):
        current = None
    prefix = current if isinstance(current, str) and slot[2] != "key" else "x"
    payload = PAYLOADS[pname].replace("{v}", prefix)
    where = setter(data, payload)
    want = spec_path(where)
    # The loader without its YAML round trip (a dumped string loads back the same; the
    # round trip would triple the time): validation errors become findings as load_text's.
    source = Source("hostile.yaml")
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        spec, findings = None, schema_findings(exc, source)
    else:
        estate, findings = with_files(spec, source)
        findings += check_spec(estate, source.locate)
    errors = [f for f in findings if f.severity is Severity.ERROR]
    if any(f.path == want for f in errors):
        return
    assert not errors, (f"{payload!r} at {want}: errors, but none at that path: "
                        f"{[(f.id, f.path) for f in errors]}")
    try:
        artifacts = render_all(estate, "hostile.yaml")
    except RenderError as exc:
        pytest.fail(f"{payload!r} at {want} passed the spec types and check, and only the "
                    f"template finalize stopped it: {exc}")
    harm = render_harm(artifacts, baseline()[1])
    assert harm == [], f"{payload!r} at {want} reached the rendered files: {harm}"


def test_baseline_render_is_harmless():
    _, artifacts, _ = baseline()
    assert render_harm(artifacts, artifacts) == []


# --- the template finalize hook ---------------------------------------------------------------

@pytest.mark.parametrize("value", ["a\nNodeName=evil", "a\rb", "a\x00b", "a\u2028b", "a\x85b"])
def test_template_finalize_refuses_control_characters(value):
    template = environment().from_string("Key={{ value }}\n")
    with pytest.raises(RenderError, match="control character"):
        template.render(value=value)


def test_template_finalize_refuses_values_that_change_yaml(tmp_path):
    env = environment()
    template = env.from_string("name: {{ value }}\n")
    template.name = "k8s/templates/probe.yaml.j2"  # finalize reads the template's name
    for value in ("x: {evil: true}", "true", "x # comment", "[a, b]", "'quoted"):
        with pytest.raises(RenderError, match="read back"):
            template.render(value=value)
    assert template.render(value="inference") == "name: inference\n"


def test_template_finalize_passes_dumped_structure():
    from estate.render.templates import dumped
    template = environment().from_string("{{ y }}\n{{ v | tojson }}\n")
    assert template.render(y=dumped("a:\n  b: 1"), v="x\ny") == 'a:\n  b: 1\n"x\\ny"\n'


# --- the restricted types report at the spec path, with the fix in the message ------------------

@pytest.mark.parametrize("stack,edit,kind,path,says", [
    ("prod", {"slurm": {"state_dir": "/etc"}}, "system_directory", "slurm.state_dir",
     "dedicated subdirectory"),
    ("prod", {"slurm": {"state_dir": "/var/lib"}}, "system_directory", "slurm.state_dir",
     "chowns"),
    ("prod", {"slurm": {"state_dir": "/usr/share/slurm"}}, "system_directory",
     "slurm.state_dir", "inside /usr"),
    ("prod", {"slurm": {"state_dir": "/var/spool/../../etc"}}, "path_traversal",
     "slurm.state_dir", "'..'"),
    ("prod", {"slurm": {"gpu_device_path": "/dev/nvidia\nNodeName=evil"}},
     "control_character", "slurm.gpu_device_path", "one line"),
    ("prod", {"slurm": {"gpu_device_path": "/dev/nvidia gpu"}}, "path_characters",
     "slurm.gpu_device_path", "no whitespace"),
    ("prod", {"slurm": {"gpu_device_path": "/usr/lib/x86_64-linux-gnu/libc.so."}},
     "device_prefix", "slurm.gpu_device_path", "/run/estate/fake-gpu/nvidia"),
    ("prod", {"slurm": {"gpu_device_path": "/etc"}}, "device_prefix",
     "slurm.gpu_device_path", "replacing files"),
    ("prod", {"kubernetes": {"package_repository": "https://u:p@mirror.example/k8s/ /"}},
     "url", "kubernetes.package_repository", "credentials"),
    ("prod", {"kubernetes": {"package_repository": "ftp://mirror.example/k8s/"}},
     "url", "kubernetes.package_repository", "http"),
    ("prod", {"kubernetes": {"package_repository": "https://m.example/$(reboot) /"}},
     "url", "kubernetes.package_repository", "$"),
    ("prod", {"monitoring": {"alertmanager": {"receivers": {1: {"webhooks": {
        0: "https://hooks:s3cret@events.example.org/x"}}}}}},
     "url", "monitoring.alertmanager.receivers[1].webhooks[0]", "holds no secrets"),
    ("prod", {"monitoring": {"alertmanager": {"receivers": {1: {"webhooks": {
        0: "https://events.example.org/x?token=s3cret"}}}}}},
     "url", "monitoring.alertmanager.receivers[1].webhooks[0]", "'?'"),
    ("prod", {"monitoring": {"alertmanager": {"receivers": {1: {"webhooks": {
        0: "file:///etc/shadow"}}}}}},
     "url", "monitoring.alertmanager.receivers[1].webhooks[0]", "http"),
    ("prod", {"monitoring": {"alertmanager": {"receivers": {0: {"emails": {
        0: "Platform <platform@example.org>"}}}}}},
     "email", "monitoring.alertmanager.receivers[0].emails[0]", "local@host"),
    ("prod", {"monitoring": {"alertmanager": {"smtp": {"smarthost": "smtp.example.org:25"}}}},
     "dns_name", "monitoring.alertmanager.smtp.smarthost", "host name"),
    ("prod", {"storage": {"exports": [{"options": "rw) *(rw,no_root_squash"}]}},
     "option_syntax", "storage.exports[0].options", "key=value"),
    ("prod", {"storage": {"mounts": [{"options": "defaults\nWhat=evil:/"}]}},
     "control_character", "storage.mounts[0].options", "one line"),
    ("prod", {"storage": {"mounts": [{"path": "/etc"}]}}, "system_directory",
     "storage.mounts[0].path", "dedicated directory"),
    ("prod", {"storage": {"exports": [{"path": "/"}]}}, "system_directory",
     "storage.exports[0].path", "dedicated directory"),
    ("prod", {"slurm": {"partitions": [{"max_time": "2-00:00:00\n"}]}}, "control_character",
     "slurm.partitions[0].max_time", "one line"),
    ("prod", {"slurm": {"partitions": [{"max_time": "30 Nodes=ALL"}]}}, "time_syntax",
     "slurm.partitions[0].max_time", "not allowed"),
    ("prod", {"kubernetes": {"version": "1.31.4\n"}}, "control_character",
     "kubernetes.version", "one line"),
    ("lab", {"nodes": {5: {"labels": {"team": "a b"}}}}, "label_value", "nodes[5].labels.team",
     "alphanumeric"),
    ("lab", {"nodes": {5: {"labels": {"team,evil": "x"}}}}, "label_key",
     "nodes[5].labels.team,evil", "label name"),
    ("prod", {"description": "estate\x1b[2J"}, "control_character", "description",
     "control character"),
])
def test_a_refused_value_is_a_finding_at_its_path(stack, edit, kind, path, says):
    data = spec_dict(stack)
    _merge(data, edit)
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "spec.yaml")
    found = {(f.id, f.path): f for f in loaded.findings}
    assert (f"schema.{kind}", path) in found, sorted(found)
    finding = found[(f"schema.{kind}", path)]
    assert finding.severity is Severity.ERROR and says in finding.message, finding.message
    assert finding.location.startswith("spec.yaml:")


def _merge(data, edit):
    for key, value in edit.items():
        if isinstance(value, dict) and isinstance(data, list):
            _merge(data[key], value)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                _merge(data[key][i], item)
        elif isinstance(value, dict) and key in data and isinstance(data[key], (dict, list)) \
                and not (key == "labels"):
            _merge(data[key], value)
        else:
            data[key] = value


@pytest.mark.parametrize("edit", [
    {"slurm": {"state_dir": "/var/spool/slurmctld-prod"}},
    {"slurm": {"state_dir": "/srv/slurm/state"}},
    {"slurm": {"gpu_device_path": "/run/estate/fake-gpu/nvidia"}},
    {"storage": {"mounts": [{"path": "/home"}]}},
    {"storage": {"exports": [{"options": "rw,sync,no_subtree_check,sec=krb5:krb5p,fsid=0"}]}},
    {"kubernetes": {"package_repository": "http://mirror.internal:8080/k8s/core:/stable:/v1.31/deb/ /"}},
    {"kubernetes": {"package_repository": "https://mirror.example/kubernetes noble main"}},
])
def test_ordinary_values_are_accepted(edit):
    data = spec_dict("prod")
    _merge(data, edit)
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "spec.yaml")
    assert loaded.findings == []


def test_a_render_error_is_a_finding_not_a_traceback(monkeypatch):
    """A value only the finalize hook stops still ends as an error finding, nothing rendered."""
    from estate import pipeline

    def refuse(estate, source=""):
        raise RenderError("template slurm_conf/slurm.conf.j2: refusing to print 'a\\nb'")
    monkeypatch.setattr(pipeline, "render_all", refuse)
    result = pipeline.build(ROOT_STACK)
    assert result.artifacts is None and not result.ok
    [finding] = [f for f in result.findings if f.id == "render.unsafe_value"]
    assert finding.severity is Severity.ERROR and "slurm.conf.j2" in finding.message


def test_template_finalize_keeps_shell_templates_to_plain_words():
    template = environment().from_string("sacctmgr -i add qos {{ value }}\n")
    template.name = "slurm_conf/probe.sh.j2"
    for value in ("a;reboot", "$(reboot)", "a b", "`x`", "'q'"):
        with pytest.raises(RenderError, match="shell script"):
            template.render(value=value)
    assert template.render(value="normal") == "sacctmgr -i add qos normal\n"
    quoted = environment().from_string("echo {{ value | shell_quote }}\n")
    quoted.name = "slurm_conf/probe.sh.j2"
    assert quoted.render(value="a;b") == "echo 'a;b'\n"
    assert environment().from_string("{{ value }}").render(value="plain") == "plain"


def test_the_json_schema_carries_the_restrictions():
    """`estate schema` gives editors the same shape (the validators stay the authority)."""
    import jsonschema
    schema = Spec.model_json_schema(by_alias=True)
    validator = jsonschema.Draft202012Validator(schema)
    data = json.loads(json.dumps(spec_dict(STACK), default=str))
    assert list(validator.iter_errors(data)) == []
    data["slurm"]["state_dir"] = "/var/spool/slurm ctld"
    data["storage"]["exports"][0]["options"] = "rw) *(rw"
    assert len(list(validator.iter_errors(data))) == 2


# --- the raw-YAML guard's fast path agrees with the two parses it skips ---------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from estate.render import templates as _templates  # noqa: E402

_WORDS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,12}", fullmatch=True)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_WORDS, st.sampled_from(["yes", "No", "TRUE", "off", "On", "null", "NULL",
                                          "Null", "y", "n", "nan", "inf", "e1", "_1"])))
def test_plain_word_fast_path_agrees_with_yaml(value):
    assert _templates._reads_back(value) == _templates._reads_back_parsed(value)
