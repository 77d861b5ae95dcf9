"""A seeded generator of broken specs, starting from the example stacks.

Every mutant is bytes, as a user's editor would save them. Three kinds of mutation,
one to three per mutant:

- structural: drop a key, duplicate a list item, change a value's type, swap two
  values, nudge one to a plausible value of its type (to get past the schema), duplicate a line (a duplicate key), add a YAML alias bomb, tag or second
  document, tag a value as what it is not (`!!int lab`), write a date that is none;
- value-level: huge and negative numbers, zero, empty strings, unicode, control
  characters, hostlist bracket expressions, edge addresses and CIDRs, long strings,
  paths with quotes and newlines;
- byte-level: bit flips, truncation, NUL bytes, bytes that are not UTF-8.

The same seed gives the same mutants, so ESTATE_FUZZ_SEED replays a failure.
"""
from __future__ import annotations

import copy
import random
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BASES = sorted(p for p in (ROOT / "stacks").glob("*.yaml") if not p.name.startswith("Pulumi."))

NUMBERS = [0, -1, -2**31, 2**31, 2**32, 2**63, 10**30, -10**30, 1, 65536, 3.5, float("inf")]
STRINGS = [
    "", " ", "a" * 300, "ñandú", "用户", "🚀gpu", "\u202egpu", "x\x00y", "x\x1b[31my", "a\nb",
    "a\"b\nc", "a'b", "${HOME}", "{{ x }}", "-", ".", "..", "/", "default", "DEFAULT", "ALL",
    "null", "yes", "0x10", "1e9",
]
HOSTLISTS = [
    ",", "n[1-65536]x[1-65536]", "gpu[1-]", "gpu[", "gpu]", "gpu[]", "gpu[0-99999999999]",
    "gpu[3-1]", "gpu[a-b]", "a" * 70, "n[1-262144]", "n[1-65536],m[1-65536],o[1-65536]",
    "gpu[001-004],gpu[003-008]", "ctl1,ctl1", "x[1-2]y[1-2]z[1-2]", "gpu[1-4", "DEFAULT", "ALL",
]
ADDRESSES = ["255.255.255.255", "0.0.0.0", "10.0.0.0/32", "0.0.0.0/0", "256.1.1.1", "auto",
             "10.10.0.1", "::1", "255.255.255.255/32", "10.0.0.0/31"]


def _containers(node, path=()):
    """(path, container) for every dict and list in the tree."""
    if isinstance(node, (dict, list)):
        yield path, node
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            yield from _containers(v, path + (k,))


def _leaves(node, path=()):
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) else None
    if items is None:
        yield path
        return
    for k, v in items:
        yield from _leaves(v, path + (k,))


def _set(tree, path, value):
    for part in path[:-1]:
        tree = tree[part]
    tree[path[-1]] = value


def _get(tree, path):
    for part in path:
        tree = tree[part]
    return tree


def _value(rng: random.Random, old):
    pool = rng.choice([NUMBERS, STRINGS, HOSTLISTS, ADDRESSES])
    if isinstance(old, int) and not isinstance(old, bool) and rng.random() < 0.6:
        pool = NUMBERS
    elif isinstance(old, str) and ("[" in old or old.startswith(("gpu", "ctl", "n"))) \
            and rng.random() < 0.5:
        pool = HOSTLISTS
    return rng.choice(pool)


# --- tree mutations (on the parsed spec) ---------------------------------------------------

def drop_key(rng, tree):
    maps = [(p, c) for p, c in _containers(tree) if isinstance(c, dict) and c]
    _, m = rng.choice(maps)
    del m[rng.choice(list(m))]


def duplicate_item(rng, tree):
    lists = [(p, c) for p, c in _containers(tree) if isinstance(c, list) and c]
    if lists:
        _, lst = rng.choice(lists)
        lst.append(copy.deepcopy(rng.choice(lst)))


def retype(rng, tree):
    path = rng.choice(list(_leaves(tree)) + [p for p, _ in _containers(tree) if p])
    old = _get(tree, path)
    _set(tree, path, rng.choice([None, True, 7, "x", [], {}, [old], {"k": old}]))


def set_value(rng, tree):
    path = rng.choice([p for p in _leaves(tree) if p])
    _set(tree, path, _value(rng, _get(tree, path)))


def swap_values(rng, tree):
    leaves = [p for p in _leaves(tree) if p]
    a, b = rng.choice(leaves), rng.choice(leaves)
    va, vb = _get(tree, a), _get(tree, b)
    _set(tree, a, vb)
    _set(tree, b, va)


def nudge(rng, tree):
    """A plausible value of the same type, so that the mutant passes the schema and
    reaches the validators and renderers: a nearby number, another string of the spec."""
    leaves = [p for p in _leaves(tree) if p]
    path = rng.choice(leaves)
    old = _get(tree, path)
    if isinstance(old, bool):
        _set(tree, path, not old)
    elif isinstance(old, int):
        _set(tree, path, rng.choice([0, 1, 2, 3, 4, 8, 16, 64, old + 1, old - 1, old * 2,
                                     old // 2]))
    elif isinstance(old, str):
        strings = [v for v in (_get(tree, p) for p in leaves) if isinstance(v, str)]
        _set(tree, path, rng.choice(strings + HOSTLISTS[:1] + ["gpu[001-002]", "auto"]))


TREE = [drop_key, duplicate_item, retype, set_value, set_value, swap_values, nudge, nudge,
        nudge]


# --- text and byte mutations ----------------------------------------------------------------

def duplicate_line(rng, data: bytes) -> bytes:
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    return b"\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])


def yaml_trick(rng, data: bytes) -> bytes:
    bomb = b"bomb: &a0 [x, x, x, x, x, x, x, x, x]\n" + b"".join(
        b"bomb%d: &a%d [%s]\n" % (i, i, b", ".join([b"*a%d" % (i - 1)] * 9))
        for i in range(1, 10))
    return rng.choice([
        bomb + data, data + b"\n---\nname: second\n", b"loop: &l [*l]\n" + data,
        data.replace(b"name:", b"name: !!python/object:os.system", 1),
        data.replace(b"name:", b"<<: {x: 1}\nname:", 1), b"[" * 5000 + data,
        data.replace(b"name:", b"name: !!int", 1), data.replace(b"name:", b"name: !!bool", 1),
        data.replace(b"name:", b"name: 2024-13-45 #", 1),   # a date of month 13
    ])


def flip(rng, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def truncate(rng, data: bytes) -> bytes:
    return data[:rng.randrange(len(data))]


def insert_bytes(rng, data: bytes) -> bytes:
    i = rng.randrange(len(data))
    return data[:i] + rng.choice([b"\x00", b"\xff\xfe", b"\xc3", b"\x1b[2J", b"\t", b"\r",
                                  b"\xef\xbb\xbf", b"\x7f", b"\xe2\x80\xae"]) + data[i:]


TEXT = [duplicate_line, yaml_trick]
BYTES = [flip, truncate, insert_bytes]


def mutants(seed: int, count: int):
    """(index, base name, mutation names, bytes) for count mutants of the example stacks."""
    rng = random.Random(seed)
    bases = [(p.name, p.read_bytes(), yaml.safe_load(p.read_bytes())) for p in BASES]
    for i in range(count):
        name, raw, tree = rng.choice(bases)
        kind = rng.random()
        applied = []
        if kind < 0.7:                      # structural and value-level, on the tree
            tree = copy.deepcopy(tree)
            for _ in range(rng.randint(1, 3)):
                op = rng.choice(TREE)
                op(rng, tree)
                applied.append(op.__name__)
            data = yaml.safe_dump(tree, sort_keys=False, allow_unicode=rng.random() < 0.5) \
                .encode()
        else:
            data = raw
        if kind >= 0.7 or rng.random() < 0.1:  # text and byte level
            op = rng.choice(TEXT + BYTES)
            data = op(rng, data)
            applied.append(op.__name__)
        yield i, name, applied, data
