"""The spec's one-pass YAML reader (estate/spec/load.py's _Builder) against PyYAML's own
composer, SafeConstructor and the marks walk, which it replaces for a plain document and
falls back to for the rest: the same data, of the same types, sharing the same objects,
with the same file positions, or the same findings."""
from __future__ import annotations

import datetime

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estate.spec import load as spec_load
from estate.spec.load import parse_yaml
from tests.fuzz.mutate import BASES, mutants


def reference(text: str):
    """What parse_yaml gave before the one pass: compose, construct, walk."""
    loader = spec_load._Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    marks: dict = {}
    if node is not None:
        spec_load._walk(node, (), marks, set())
    return data, marks


def one_pass(text: str):
    """The builder's document and marks; None where it leaves the document to PyYAML."""
    loader = spec_load._Loader(text)
    built = spec_load._Builder(loader, "t.yaml")
    try:
        assert spec_load._scan_events(loader, "t.yaml", built) == []
    finally:
        loader.dispose()
    assert built.findings == []
    return (built.root, built.marks) if built.done else None


def typed(value):
    """value with every scalar's type spelt out: True and 1, 1 and 1.0 differ."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    return (type(value).__name__, value)


def same(text: str) -> None:
    built = one_pass(text)
    assert built is not None, "the builder left a plain document to PyYAML"
    data, marks = reference(text)
    assert typed(built[0]) == typed(data)
    assert built[1] == marks


PLAIN = [
    "",
    "---\n",
    "--- # only a comment\n...\n",
    "a: 1\nb: 1.5\nc: true\nd: ~\ne: null\nf: yes\ng: off\nh: 0x1f\ni: 0o17\nj: 1_000\n"
    "k: 1:30\nl: .inf\nm: -.inf\nn: .nan\no: 2024-01-02\np: 2024-01-02 03:04:05\nq: '1'\n"
    "r: \"true\"\ns: 1e3\nt: +12\nu: -0\nv: 010\n",
    "1: one\ntrue: yes\n~: none\n2024-01-02: date\n1.5: x\n'q': y\n\"dq\": z\n",
    "base: &b {x: 1, y: [1, 2]}\nother: *b\nlist: [*b, *b]\nscalar: &s text\nagain: *s\n",
    "seq:\n  - &item {name: a}\n  - *item\n  - [*item]\n",
    "block: |\n  line one\n  line two\nfolded: >-\n  folded\n  text\n",
    "flow: {a: [1, {b: c}], d: e}\nempty_map: {}\nempty_list: []\n",
    "! tagged: ! 12\nmap: !!map {a: 1}\nseq: !!seq [1]\nstr: !!str 12\nint: !!int '7'\n"
    "float: !!float '1'\nbool: !!bool 'yes'\nnull: !!null ''\n",
    "unicode: ñandú 用户 🚀\nkey ünï: v\n",
    "nested:\n  - - - deep\n      - [x]\n  - {k: {k: {k: v}}}\n",
    "- a\n- b\n",
    "just a scalar\n",
    "a: 1 # comment\n# comment\nb: [1, # inside\n  2]\n",
]


@pytest.mark.parametrize("text", PLAIN)
def test_plain_documents_read_as_pyyaml_reads_them(text):
    same(text)


@pytest.mark.parametrize("path", BASES, ids=lambda p: p.name)
def test_the_stacks_read_as_pyyaml_reads_them(path):
    same(path.read_text())


def test_an_alias_is_the_anchored_object_itself():
    data, _, findings = parse_yaml("a: &x {k: [1]}\nb: *x\nc: [*x]\n", "t.yaml")
    assert findings == [] and data["b"] is data["a"] and data["c"][0] is data["a"]


LEFT_TO_PYYAML = [
    "? [a]\n: 1\n",                  # a collection as a key
    "? {a: 1}\n: 1\n",
    "&k a: 1\n*k : 2\n",             # an alias as a key
    "a: *nowhere\n",                 # an undefined alias
    "a: =\n",                        # an implicit tag with no constructor
    "a: !!map [1]\n",                # a collection tagged as another kind
    "a: !!seq {b: 1}\n",
    "a: !!str {b: 1}\n",
    "? [a, !!int x]\n: 1\n",         # PyYAML finds the key unhashable first
]


@pytest.mark.parametrize("text", LEFT_TO_PYYAML)
def test_what_the_builder_leaves_to_pyyaml_ends_as_before(text):
    assert one_pass(text) is None
    data, source, findings = parse_yaml(text, "t.yaml")
    try:
        expected, marks = reference(text)
    except yaml.YAMLError as exc:
        assert data is None and [f.id for f in findings] == ["spec.yaml"]
        assert findings[0].message == f"malformed YAML: {exc.problem}"
        return
    except ValueError:
        assert data is None and [(f.id, f.path) for f in findings] == [("spec.yaml_value", "<root>")]
        return
    assert findings == [] and typed(data) == typed(expected) and source.marks == marks


BAD_SCALARS = [
    ("name: !!int lab\n", "name", "t.yaml:1:7", "int"),
    ("a: [x, 2024-13-45]\n", "a[1]", "t.yaml:1:8", "timestamp"),
    ("a:\n  b: 2024-01-01 25:00:00\n", "a.b", "t.yaml:2:6", "timestamp"),
    ("a: !!bool maybe\n", "a", "t.yaml:1:4", "bool"),
    ("a: !!float x\n", "a", "t.yaml:1:4", "float"),
    ("!!int k: v\n", "k", "t.yaml:1:1", "int"),
    ("&k a: 1\n*k : !!int x\n", "a", "t.yaml:2:6", "int"),   # through PyYAML's path
    ("a: !!int x\n? [b]\n: 1\n", "a", "t.yaml:1:4", "int"),  # there, beside a list as a key
]


@pytest.mark.parametrize("text,path,where,kind", BAD_SCALARS)
def test_a_scalar_that_does_not_construct_is_a_finding_at_its_path(text, path, where, kind):
    data, _, findings = parse_yaml(text, "t.yaml")
    assert data is None
    assert [(f.id, f.path, f.location) for f in findings] == [("spec.yaml_value", path, where)]
    assert f"as type {kind}" in findings[0].message and "quote" in findings[0].hint


def test_every_bad_scalar_and_the_scanners_findings_come_at_once():
    _, _, findings = parse_yaml("a: !!int x\nb: 1\nb: 2\nc: 0000-01-01\n", "t.yaml")
    assert sorted((f.id, f.path) for f in findings) == [
        ("spec.duplicate_key", "b"), ("spec.yaml_value", "a"), ("spec.yaml_value", "c")]


def test_mutated_specs_read_as_pyyaml_reads_them():
    """The fuzz tier's mutants (broken YAML included): where the scan passes and PyYAML
    constructs, the one pass gives its result; where PyYAML fails, so does parse_yaml."""
    compared = 0
    for _, _, _, data in mutants(20261204, 400):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if spec_load._control_characters(text, "t.yaml"):
            continue
        loaded, source, findings = parse_yaml(text, "t.yaml")
        if findings:
            continue
        expected, marks = reference(text)
        assert typed(loaded) == typed(expected) and source.marks == marks
        compared += 1
    assert compared > 250


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70),
    st.floats(allow_nan=False), st.text(max_size=12),
    st.dates(min_value=datetime.date(1, 1, 1)),
    st.sampled_from(["yes", "no", "on", "~", "1:30", "0x1f", "1_0", "2024-01-02", "=", "<<"]))
KEYS = st.one_of(st.text(max_size=8), st.integers(-5, 5), st.booleans())


def trees():
    shared = st.shared(st.lists(SCALARS, max_size=3), key="shared")
    return st.recursive(
        st.one_of(SCALARS, shared),
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.dictionaries(KEYS, inner, max_size=4)),
        max_leaves=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), flow=st.sampled_from([None, True, False]),
       unicode=st.booleans(), width=st.sampled_from([20, 80]))
def test_any_document_safe_dump_writes_reads_as_pyyaml_reads_it(tree, flow, unicode, width):
    text = yaml.safe_dump(tree, default_flow_style=flow, allow_unicode=unicode, width=width,
                          sort_keys=False)
    if spec_load._control_characters(text, "t.yaml"):
        return
    data, source, findings = parse_yaml(text, "t.yaml")
    # 1 and '1' as keys of one mapping are one key to the duplicate check
    assert {f.id for f in findings} <= {"spec.duplicate_key"}
    if not findings:
        expected, marks = reference(text)
        assert typed(data) == typed(expected) and source.marks == marks
