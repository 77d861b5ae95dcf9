"""estate.cache: results kept between processes, by content; and the validators that use it
give the same findings from the cache as computed."""
from __future__ import annotations

import marshal
import os

import kubernetes_validate
import pytest
import yaml

from estate import cache
from estate.check import kubernetes_schema
from estate.pipeline import build


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("ESTATE_NO_CACHE", raising=False)
    monkeypatch.setattr(cache.tempfile, "tempdir", str(tmp_path))
    cache.directory.cache_clear()
    yield tmp_path / f"estate-cache-{os.geteuid()}"
    cache.directory.cache_clear()


def test_a_result_is_computed_once_per_key(cache_dir):
    calls = []

    def compute():
        calls.append(1)
        return {"docs": [1, "two", None]}

    assert cache.remembered("t", ("a",), compute) == {"docs": [1, "two", None]}
    assert cache.remembered("t", ("a",), compute) == {"docs": [1, "two", None]}
    assert len(calls) == 1
    cache.remembered("t", ("b",), compute)
    assert len(calls) == 2
    assert (cache_dir.stat().st_mode & 0o777) == 0o700


def test_a_damaged_entry_is_computed_again(cache_dir):
    cache.remembered("t", ("a",), lambda: [1])
    [entry] = cache_dir.glob("t-*.marshal")
    entry.write_bytes(b"\x00garbage")
    assert cache.remembered("t", ("a",), lambda: [2]) == [2]


def test_what_marshal_cannot_keep_is_not_kept(cache_dir):
    import datetime
    when = datetime.date(2026, 12, 2)
    assert cache.remembered("t", ("d",), lambda: [when]) == [when]
    assert not list(cache_dir.glob("t-*.marshal"))


def test_a_directory_others_may_write_is_not_used(cache_dir):
    cache_dir.mkdir(mode=0o700)
    cache_dir.chmod(0o777)
    assert cache.directory() is None
    calls = []
    cache.remembered("t", ("a",), lambda: calls.append(1))
    cache.remembered("t", ("a",), lambda: calls.append(1))
    assert len(calls) == 2


def test_estate_no_cache_turns_it_off(cache_dir, monkeypatch):
    monkeypatch.setenv("ESTATE_NO_CACHE", "1")
    cache.directory.cache_clear()
    assert cache.directory() is None


def test_the_cache_stays_bounded(cache_dir, monkeypatch):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 10)
    for i in range(25):
        cache.remembered("t", (str(i),), lambda: i)
    assert len(list(cache_dir.glob("*.marshal"))) <= 10


def test_the_cache_stays_within_its_bytes_and_keeps_the_newest(cache_dir, monkeypatch):
    monkeypatch.setattr(cache, "MAX_BYTES", 5000)
    for i in range(12):
        cache.remembered("t", (str(i),), lambda: "x" * 1000)
        os.utime(max(cache_dir.glob("*.marshal"), key=os.path.getmtime), (i, i))
    sizes = [p.stat().st_size for p in cache_dir.glob("*.marshal")]
    assert sum(sizes) <= 5000 and len(sizes) >= 4
    assert cache.remembered("t", ("11",), lambda: "computed") == "x" * 1000   # kept


def test_items_are_computed_once_each_and_a_changed_tree_computes_what_changed(cache_dir):
    calls = []

    def items(*keys):
        return {k: (lambda k=k: calls.append(k) or [k, len(k)]) for k in keys}

    assert cache.remembered_each("t", ("v",), items("a", "b")) == {"a": ["a", 1],
                                                                  "b": ["b", 1]}
    assert cache.remembered_each("t", ("v",), items("a", "b", "cc")) == {
        "a": ["a", 1], "b": ["b", 1], "cc": ["cc", 2]}
    assert cache.remembered_each("t", ("v",), items("cc", "a")) == {"cc": ["cc", 2],
                                                                   "a": ["a", 1]}
    assert calls == ["a", "b", "cc"]
    cache.remembered_each("t", ("w",), items("a"))   # other parts: another entry
    assert calls == ["a", "b", "cc", "a"]
    assert len(list(cache_dir.glob("t-*.marshal"))) == 2


def test_two_trees_in_turn_both_stay_and_a_third_of_another_size_replaces_them(cache_dir):
    calls = []

    def items(keys):
        return {k: (lambda k=k: calls.append(k) or k) for k in keys}

    one, two = [f"one{i}" for i in range(100)], [f"two{i}" for i in range(100)]
    for keys in (one, two, one, two):
        cache.remembered_each("t", (), items(keys))
    assert len(calls) == 200
    [entry] = cache_dir.glob("t-*.marshal")
    held = len(marshal.loads(entry.read_bytes()))
    assert held == 200
    cache.remembered_each("t", (), items(["three"]))
    assert marshal.loads(entry.read_bytes()) == {"three": "three"}


def test_a_damaged_map_or_no_cache_computes_every_item(cache_dir, monkeypatch):
    cache.remembered_each("t", (), {"a": lambda: 1})
    [entry] = cache_dir.glob("t-*.marshal")
    entry.write_bytes(marshal.dumps([1, 2]))   # not a map
    assert cache.remembered_each("t", (), {"a": lambda: 2}) == {"a": 2}
    entry.write_bytes(b"\x00garbage")
    assert cache.remembered_each("t", (), {"a": lambda: 3}) == {"a": 3}
    monkeypatch.setenv("ESTATE_NO_CACHE", "1")
    cache.directory.cache_clear()
    assert cache.remembered_each("t", (), {"a": lambda: 4}) == {"a": 4}


def test_a_tree_with_one_file_changed_validates_only_that_file(cache_dir, monkeypatch):
    """One more worker among many: the kubeadm and kind configs of the others are not
    validated again, and the findings equal those computed with the cache off."""
    from estate.check import kubernetes_artifacts as ka
    from estate.render.artifacts import Artifact
    est = build("stacks/example-prod.yaml")
    join = next(p for p in est.artifacts if p.startswith("kubernetes/kubeadm/join/"))
    a = est.artifacts[join]
    bad = {**est.artifacts, join: Artifact(a.path, a.content + b"bogus: 1\n", a.consumers,
                                            a.plane)}
    validated = []
    real = ka.validate_config
    monkeypatch.setattr(ka, "validate_config",
                        lambda doc: validated.append(doc.get("kind")) or real(doc))

    def ctx(arts):
        return type("Ctx", (), {"estate": est.estate, "artifacts": arts})

    assert list(ka.config_invalid(ctx(est.artifacts))) == []
    assert validated == []   # build() above validated the whole tree
    warm = list(ka.config_invalid(ctx(bad)))
    assert validated == ["JoinConfiguration"]
    monkeypatch.setenv("ESTATE_NO_CACHE", "1")
    cache.directory.cache_clear()
    assert warm == list(ka.config_invalid(ctx(bad)))
    assert [p.path for p in warm] == [join] and "bogus" in warm[0].message


def test_findings_from_the_cache_equal_the_computed_ones(cache_dir, monkeypatch):
    """A seeded manifest problem (an invalid label in a rendered manifest) is found the
    same way on a cold cache, a warm one, and with the cache off."""
    from estate.check import kubernetes_artifacts as ka
    from estate.render.artifacts import Artifact
    est = build("stacks/example-prod.yaml")
    bad = {p: a for p, a in est.artifacts.items()}
    victim = next(p for p in bad if p.startswith("kubernetes/manifests/")
                  and b"kind: Namespace" in bad[p].content)
    a = bad[victim]
    bad[victim] = Artifact(a.path, a.content.replace(b"kind: Namespace",
                                                     b"kind: Namespace\nbogus: 1", 1),
                           a.consumers, a.plane)

    class Ctx:
        estate = est.estate
        artifacts = bad

    cold = list(ka.manifest_invalid(Ctx))
    warm = list(ka.manifest_invalid(Ctx))
    monkeypatch.setenv("ESTATE_NO_CACHE", "1")
    cache.directory.cache_clear()
    off = list(ka.manifest_invalid(Ctx))
    assert cold == warm == off
    assert any("bogus" in p.message for p in cold)


def test_shipped_versions_read_without_import_match_kubernetes_validate():
    """Its all_versions() names each minor twice (the -local and -local-strict sets)."""
    assert list(kubernetes_schema.shipped_versions()) == \
        list(dict.fromkeys(kubernetes_validate.utils.all_versions()))


def test_a_memo_computes_each_item_once_and_the_next_process_reads_it(cache_dir):
    calls = []

    def compute(v):
        return lambda: calls.append(v) or v * 2

    memo = cache.Memo("m", ("v1",))
    assert [memo.get(k, compute(n)) for k, n in [("a", 1), ("b", 2), ("a", 1)]] == [2, 4, 2]
    assert calls == [1, 2]
    memo.save()
    again = cache.Memo("m", ("v1",))   # the next process
    assert again.get("a", compute(99)) == 2 and again.get("c", compute(3)) == 6
    assert calls == [1, 2, 3]
    again.save()
    assert cache.Memo("m", ("v2",)).get("a", compute(5)) == 10   # other parts: computed
    assert calls == [1, 2, 3, 5]


def test_a_memo_saved_with_reread_keeps_what_another_process_saved_since(cache_dir):
    first = cache.Memo("m", ("v1",))
    first.get("shared", lambda: 1)
    first.save()
    parent, child = cache.Memo("m", ("v1",)), cache.Memo("m", ("v1",))   # read at the fork
    for memo in (parent, child):
        memo.get("shared", lambda: 0)
    child.get("child's", lambda: 2)
    child.save()
    parent.get("parent's", lambda: 3)
    parent.save(reread=True)
    kept = cache.Memo("m", ("v1",))
    assert [kept.get(k, lambda: None) for k in ("shared", "child's", "parent's")] == [1, 2, 3]
    parent.save()   # as the process first read it: the child's item is lost
    assert cache.Memo("m", ("v1",)).get("child's", lambda: None) is None


def test_a_memo_that_computed_nothing_is_not_written_again(cache_dir):
    memo = cache.Memo("m", ())
    memo.get("a", lambda: 1)
    memo.save()
    [entry] = cache_dir.glob("m-*.marshal")
    entry.write_bytes(marshal.dumps({"a": 1, "kept": "as it was"}))
    reader = cache.Memo("m", ())
    assert reader.get("a", lambda: 2) == 1
    reader.save()
    assert marshal.loads(entry.read_bytes()) == {"a": 1, "kept": "as it was"}


def test_the_validation_fingerprint_hashes_every_estate_module_and_schema_file():
    import hashlib
    from pathlib import Path
    root = Path(kubernetes_schema.__file__).resolve().parents[2]
    files = ([*(root / "k8s" / "schemas").iterdir(), *(root / "k8s" / "crds").iterdir(),
              *(p for p in (root / "estate").rglob("*.py") if "__pycache__" not in p.parts)])
    want = {hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}
    got = kubernetes_schema.validation_fingerprint()
    hashes = [p for p in got if not p.endswith(".dist-info")]
    assert set(hashes) == want and len(hashes) == len(files)
    assert any(p.startswith("kubernetes_validate-") for p in got)


def test_small_files_parsed_in_one_check_are_read_back_by_the_next(cache_dir, monkeypatch):
    """The artifact checks keep the parses of the small rendered files in one entry: the
    check after build()'s own parses none of them, and finds what a check without the
    cache finds."""
    from estate.check import check_artifacts
    kubernetes_schema._parse.cache_clear()   # parses an earlier test made stay in memory
    est = build("stacks/example-prod.yaml")   # its artifact checks keep the parses

    class Ctx:
        estate = est.estate
        artifacts = est.artifacts
        source = "stacks/example-prod.yaml"   # the entry is the spec file's

    def fresh_check():
        kubernetes_schema._parse.cache_clear()   # as in a new process
        parsed.clear()
        return check_artifacts(Ctx)

    parsed = []
    real = kubernetes_schema._parse_now
    monkeypatch.setattr(kubernetes_schema, "_parse_now",
                        lambda content: parsed.append(len(content)) or real(content))
    warm = fresh_check()
    assert [n for n in parsed if n < cache.MIN_BYTES] == []
    monkeypatch.setenv("ESTATE_NO_CACHE", "1")
    cache.directory.cache_clear()
    assert fresh_check() == warm
    assert [n for n in parsed if n < cache.MIN_BYTES], "without the cache they are parsed"


def test_each_spec_file_keeps_its_own_parses_and_yaml(cache_dir):
    """A small spec does not read a large one's entry, nor make it drop its items."""
    from estate.render import kubernetes as kr
    for kept, memo in ((kubernetes_schema.small_parses_kept, lambda: kubernetes_schema._SMALL),
                       (kr._dumps_kept, lambda: kr._DUMPS)):
        with kept("a.yaml"):
            assert memo().get("k", lambda: "a's") == "a's"
        with kept("b.yaml"):
            assert memo().get("k", lambda: "b's") == "b's"
        with kept("a.yaml"):
            assert memo().get("k", lambda: "computed again") == "a's"


def test_readers_get_crds_without_their_spec_and_a_large_files_light_parse_is_kept(
        cache_dir, monkeypatch):
    """_dicts leaves a CustomResourceDefinition's spec (its schemas) out, documents() keeps
    it; a large file's light parse is its own entry, read back without the whole parse."""
    import types

    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "clusterqueues.kueue.x-k8s.io"},
           "spec": {"versions": [{"name": f"v{i}", "schema": {"x": "y" * 100}}
                                 for i in range(200)]}}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
              "spec": "kept", "data": {"k": "v"}}
    content = yaml.safe_dump_all([crd, config]).encode()
    assert len(content) >= cache.MIN_BYTES
    art = types.SimpleNamespace(path="kubernetes/manifests/x.yaml", content=content)
    light = kubernetes_schema._dicts(art)
    assert light == [{k: v for k, v in crd.items() if k != "spec"}, config]
    assert kubernetes_schema.documents(art)[0]["spec"] == crd["spec"]
    kubernetes_schema._light.cache_clear()
    kubernetes_schema._parse.cache_clear()   # the next process
    read = []
    real_read = cache._read
    monkeypatch.setattr(cache, "_read", lambda path: read.append(path.name) or real_read(path))
    monkeypatch.setattr(kubernetes_schema, "_parse_now", lambda content: pytest.fail("parsed"))
    assert kubernetes_schema._dicts(art) == light
    assert [name.split("-")[:2] for name in read] == [["yaml", "light"]]
