"""A broken spec always ends in a finding, in bounded time and memory: each case here once
crashed, hung or was accepted silently (issue 10, part 2)."""
from __future__ import annotations

import copy
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

import estate.cli as cli
import estate.commands as commands
import estate.pipeline as pipeline
from estate.check import check_artifacts, check_spec
from estate.check import kubernetes_schema as kcheck
from estate.render import Artifacts, render_all
from estate.spec import bounds
from estate.spec.hostlist import Hostlist, HostlistError
from estate.spec.load import load, load_text
from estate.spec.resolved import Estate
from tests.unit.checkutil import SPECS, findings_for, keyed, spec_dict


def _ids(findings) -> set[tuple[str, str]]:
    return {(f.id, f.path) for f in findings}


def _timed(fn, limit_s: float = 5.0):
    start = time.monotonic()
    out = fn()
    assert time.monotonic() - start < limit_s, f"took over {limit_s} s"
    return out


def _write(tmp_path: Path, data: dict, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --- crashes ----------------------------------------------------------------------------

def test_zero_block_size_is_a_schema_finding():
    data = spec_dict("prod")
    data["topology"]["block_sizes"] = [0, 16]
    assert ("schema.greater_than_equal", "topology.block_sizes[0]") in _ids(findings_for(data))


def test_address_past_the_last_ipv4_address_is_cidr_exhausted(tmp_path):
    data = spec_dict("prod")
    data["nodes"][0]["addresses"]["management"] = "255.255.255.255"
    result = pipeline.build(_write(tmp_path, data))
    assert ("network.cidr_exhausted", "nodes[0].addresses.management") in _ids(result.findings)
    assert "internal.error" not in {f.id for f in result.findings}


@pytest.mark.parametrize("path", ['/srv/a"b\nc', "/srv/a'b\nc", '/srv/a"\n  b: c'])
def test_export_path_with_quote_and_newline(tmp_path, path):
    data = spec_dict("lab")
    data["storage"]["exports"][0]["path"] = path
    result = pipeline.build(_write(tmp_path, data))
    assert ("schema.control_character", "storage.exports[0].path") in _ids(result.findings)
    assert "internal.error" not in {f.id for f in result.findings}


@pytest.fixture(scope="module")
def lab():
    loaded = load(SPECS["lab"])
    estate = Estate(loaded.spec)
    return estate, render_all(estate, "stacks/lab.yaml")


@pytest.mark.parametrize("prefix,vid", [("kubernetes/manifests/", "kubernetes.manifest_invalid"),
                                        ("kubernetes/kubeadm/", "kubernetes.config_invalid")])
def test_a_rendered_file_that_does_not_parse_is_a_finding(lab, prefix, vid):
    estate, arts = lab
    path = next(p for p in sorted(arts) if p.startswith(prefix) and p.endswith(".yaml"))
    broken = Artifacts(arts)
    broken[path] = replace(arts[path], content=arts[path].content + b'\nx: "a\nb: c: d\n')
    found = [f for f in check_artifacts(pipeline._ArtifactContext(estate, broken))
             if f.id == vid and f.path == path]
    assert found and "not valid YAML" in found[0].message


def test_pipeline_turns_an_unexpected_exception_into_internal_error(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr(pipeline, "render_all", boom)
    monkeypatch.delenv("ESTATE_DEBUG", raising=False)
    result = pipeline.build(SPECS["lab"])
    [f] = [f for f in result.findings if f.id == "internal.error"]
    assert f.severity.value == "error" and "RuntimeError: boom" in f.message
    assert not result.ok and result.artifacts is None
    monkeypatch.setenv("ESTATE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        pipeline.build(SPECS["lab"])


def test_cli_prints_internal_error_without_a_traceback(monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise KeyError("oops")
    monkeypatch.setattr(commands, "build", boom)
    monkeypatch.delenv("ESTATE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.app(["check", str(SPECS["lab"])])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "internal.error" in err and "Traceback" not in err
    with pytest.raises(KeyError):
        cli.app(["--debug", "check", str(SPECS["lab"])])
    monkeypatch.delenv("ESTATE_DEBUG", raising=False)


# --- the loader: bounded, and every refusal its own finding -------------------------------

def _bomb(levels: int = 9) -> str:
    text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, levels + 1):
        text += f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n"
    return text


@pytest.mark.parametrize("text,vid,line", [
    (_bomb(), "spec.yaml_alias_limit", None),
    ("a: &a [*a]\n", "spec.yaml_recursive_alias", 1),
    ("name: x\n---\nname: y\n", "spec.multi_document", 2),
    ("name: x\nname: y\n", "spec.duplicate_key", 2),
    ("a:\n  <<: {b: 1}\n", "spec.yaml_merge_key", 2),
    ("a: !!python/object:os.system x\n", "spec.yaml_tag", 1),
    ("a: !custom x\n", "spec.yaml_tag", 1),
    ("a: " + "[" * 100 + "]" * 100 + "\n", "spec.yaml_depth_limit", 1),
    ("a: 1\nb: x\x00y\n", "spec.control_character", 2),
])
def test_loader_refusals_are_findings_with_a_position(text, vid, line):
    loaded = _timed(lambda: load_text(text, "s.yaml"), 2.0)
    assert loaded.spec is None
    [f] = [f for f in loaded.findings if f.id == vid]
    assert f.severity.value == "error" and f.location.startswith("s.yaml:")
    if line:
        assert f.location.split(":")[1] == str(line), f.location


def test_a_billion_laughs_stays_small_and_fast():
    import tracemalloc
    tracemalloc.start()
    loaded = _timed(lambda: load_text(_bomb(12), "s.yaml"), 2.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [f.id for f in loaded.findings] == ["spec.yaml_alias_limit"]
    assert str(bounds.MAX_YAML_NODES) in loaded.findings[0].message
    assert peak < 50 * 2**20


def test_duplicate_key_in_a_node_group_names_the_path_and_line():
    text = SPECS["prod"].read_text().replace("    rack: r00\n", "    rack: r00\n    rack: r9\n", 1)
    loaded = load_text(text, "p.yaml")
    [f] = loaded.findings
    assert (f.id, f.path) == ("spec.duplicate_key", "nodes[0].rack")
    line = text.splitlines().index("    rack: r9") + 1
    assert f.location == f"p.yaml:{line}:5"


@pytest.mark.parametrize("where", ["home", "shell"])
def test_nul_in_a_user_field_is_a_control_character_finding(where):
    data = spec_dict("prod")
    data["identity"]["users"][0][where] = "/home/a\x00b"
    found = keyed(findings_for(data, "p.yaml"))
    f = found[("schema.control_character", f"identity.users[0].{where}")]
    assert f.location.startswith("p.yaml:") and f.location.count(":") == 2


def test_control_character_in_a_product_name():
    data = spec_dict("prod")
    data["node_classes"][0]["gpus"]["product"] = "NVIDIA\x1b[2J"
    assert ("schema.control_character", "node_classes[0].gpus.product") in \
        _ids(findings_for(data))


def test_non_utf8_and_oversized_specs(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: x\ndescription: caf\xe9\n")
    [f] = load(bad).findings
    assert f.id == "spec.encoding" and f.location == f"{bad}:2:17"
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (bounds.MAX_SPEC_BYTES + 1))
    [f] = _timed(lambda: load(big).findings, 2.0)
    assert f.id == "spec.too_large" and "MAX_SPEC_BYTES" in f.message


# --- hostlists: bounded before expanding ----------------------------------------------------

def test_a_four_billion_host_expression_is_refused_before_expanding():
    with pytest.raises(HostlistError, match="MAX_HOSTS_PER_EXPRESSION"):
        _timed(lambda: Hostlist.parse("n[1-65536]x[1-65536]"), 1.0)
    data = spec_dict("prod")
    data["nodes"][2]["hosts"] = "n[1-65536]x[1-65536]"
    found = keyed(_timed(lambda: findings_for(data), 5.0))
    assert "MAX_HOSTS_PER_EXPRESSION" in found[("nodes.bad_hostlist", "nodes[2].hosts")].message


def test_the_hosts_of_all_groups_are_bounded_together():
    data = spec_dict("prod")
    data["nodes"][2]["hosts"] = "a[1-65536]x[1-4]"
    data["nodes"][3]["hosts"] = "b[1-65536]x[1-4]"
    findings = _timed(lambda: findings_for(data), 5.0)
    found = keyed(findings)
    assert str(bounds.MAX_HOSTS_PER_SPEC) in found[("nodes.too_many_hosts", "nodes")].message
    # the gate stops every other check
    assert {f.id for f in findings} <= {"nodes.too_many_hosts", "nodes.hostlists_too_large"}


def test_the_hostlists_of_a_spec_are_bounded_together():
    data = spec_dict("prod")
    for i in range(3):
        data["slurm"]["partitions"][i]["nodes"] = "n[1-65536]x[1-4]"
    findings = _timed(lambda: findings_for(data), 5.0)
    assert [(f.id, f.path) for f in findings] == [("nodes.hostlists_too_large",
                                                   "slurm.partitions[0].nodes")]
    assert "MAX_HOSTLIST_RANGES" in findings[0].message


def test_range_without_high_bound_is_refused():
    data = spec_dict("prod")
    data["slurm"]["partitions"][0]["nodes"] = "gpu[1-]"
    assert ("nodes.bad_hostlist", "slurm.partitions[0].nodes") in _ids(findings_for(data))


def test_empty_hosts_are_reported_at_the_hosts_path_not_as_addresses():
    data = spec_dict("prod")
    data["nodes"][6]["hosts"] = ","
    ids = _ids(findings_for(data))
    assert ("nodes.empty_hostlist", "nodes[6].hosts") in ids
    assert not any(i == "network.duplicate_address" for i, _ in ids)


@pytest.mark.parametrize("name", ["default", "DEFAULT", "Default", "ALL", "all"])
def test_slurm_keywords_are_not_host_names(name):
    data = spec_dict("prod")
    data["nodes"][6]["hosts"] = name
    assert ("nodes.reserved_name", "nodes[6].hosts") in _ids(findings_for(data))


def test_a_64_character_host_name_is_refused_and_63_is_not():
    data = spec_dict("prod")
    data["nodes"][6]["hosts"] = "k" * 64
    assert ("nodes.hostname_length", "nodes[6].hosts") in _ids(findings_for(data))
    data["nodes"][6]["hosts"] = "k" * 63
    assert ("nodes.hostname_length", "nodes[6].hosts") not in _ids(findings_for(data))


# --- numbers: realistic bounds --------------------------------------------------------------

@pytest.mark.parametrize("path,value", [
    ("node_classes[0].memory_mb", 10**30),
    ("node_classes[0].sockets", 10**30),
    ("node_classes[0].cores_per_socket", 10**30),
    ("node_classes[0].gpus.memory_gb", 10**30),
    ("node_classes[0].nics[0].speed_gbps", 10**30),
    ("node_classes[0].nics[0].speed_gbps", -400),
    ("nodes[2].slurm.weight", 10**30),
    ("nodes[2].slurm.real_memory_mb", 10**30),
    ("slurm.accounts[0].fairshare", 10**30),
    ("slurm.qos[0].priority", 10**30),
    ("slurm.qos[0].max_gpus_per_user", 10**30),
    ("kubernetes.tenants[0].priority", 10**30),
    ("kubernetes.tenants[0].gpus.l40s", 10**30),
    ("topology.switches[0].link_speed_gbps", 10**30),
    ("topology.switches[0].link_speed_gbps", -800),
    ("segments[0].reserved", 10**30),
])
def test_huge_and_negative_numbers_are_schema_findings(path, value):
    from tests.unit.test_check_validators import put
    data = spec_dict("prod")
    if path.startswith("nodes[2].slurm") and "slurm" not in data["nodes"][2]:
        data["nodes"][2]["slurm"] = {}
    put(data, path, value)
    found = [f for f in findings_for(data) if f.path == path]
    assert found and all(f.id.startswith("schema.") for f in found), found


@pytest.mark.parametrize("path,value", [("segments[0].cidr", True), ("segments[0].cidr", 7),
                                        ("nodes[0].addresses.management", 167772161),
                                        ("kubernetes.pod_cidr", 0)])
def test_addresses_written_as_numbers_are_refused(path, value):
    from tests.unit.test_check_validators import put
    data = spec_dict("prod")
    put(data, path, value)
    assert ("schema.value_error", path) in _ids(findings_for(data))


def test_a_chain_of_ten_thousand_switches_is_checked_without_recursion():
    data = spec_dict("prod")
    n = 10_000
    data["topology"]["switches"] += [{"name": f"s{i}", "switches": [f"s{(i + 1) % n}"]}
                                     for i in range(n)]   # and the last loops to the first
    found = _timed(lambda: findings_for(data), 30.0)
    assert ("topology.cycle", f"topology.switches[{len(data['topology']['switches']) - n}]") \
        in _ids(found)


def test_many_aliases_from_yaml_dump_of_shared_objects_load():
    data = spec_dict("prod")
    account = data["slurm"]["accounts"][0]
    data["slurm"]["accounts"] += [dict(account, name=f"a{i}") for i in range(3000)]
    text = yaml.safe_dump(data, sort_keys=False)
    assert text.count("*id") > 1000
    assert not [f for f in load_text(text).findings if f.id.startswith("spec.")]


# --- time: linear checks, one parse per rendered file ---------------------------------------

def test_four_thousand_two_host_groups_check_in_seconds():
    data = spec_dict("prod")
    group = copy.deepcopy(data["nodes"][2])
    group.pop("switch", None)
    for s in data["segments"]:
        s["cidr"] = s["cidr"].rsplit(".", 2)[0] + ".0.0/16"
    for i in range(4000):
        g = copy.deepcopy(group)
        g["hosts"] = f"n{i}x[1-2]"
        g["addresses"] = {k: "auto" for k in g["addresses"]}
        data["nodes"].append(g)
    data["nodes"].append(dict(group, hosts="n17x[2-3]"))   # one duplicate, found still
    text = yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    loaded = _timed(lambda: load_text(text), 10.0)
    found = _timed(lambda: check_spec(Estate(loaded.spec)), 10.0)   # quadratic: over 60 s
    assert ("nodes.duplicate_host", f"nodes[{len(data['nodes']) - 1}].hosts") in _ids(found)


def test_each_rendered_kubernetes_file_is_parsed_once(monkeypatch):
    data = spec_dict("prod")
    for g in data["nodes"]:
        if g["hosts"].startswith("inf"):
            g["hosts"] = "inf[01-40]"
    for m in data["storage"]["mounts"]:
        m["clients"] = m["clients"].replace("inf[01-04]", "inf[01-40]")
    data["kubernetes"]["tenants"][0]["gpus"]["l40s"] = 8 * 40 - 8
    loaded = load_text(yaml.safe_dump(data, sort_keys=False))
    estate = Estate(loaded.spec)
    arts = render_all(estate, "prod.yaml")
    parsed: list[bytes] = []
    real = kcheck.yaml.load_all

    def counting(content, **kw):
        parsed.append(content)
        return real(content, **kw)
    kcheck._parse.cache_clear()
    monkeypatch.setattr(kcheck.yaml, "load_all", counting)
    findings = check_artifacts(pipeline._ArtifactContext(estate, arts))
    assert not [f for f in findings if f.severity.value == "error"], findings
    joins = [p for p in parsed if b"JoinConfiguration" in p]
    assert len(joins) >= 40 and len(joins) == len(set(joins))


@pytest.mark.parametrize("bad", ["gpu[a-b]", "gpu[1-4", "gpu]"])
def test_a_malformed_block_list_is_a_finding_for_the_kubernetes_plane_too(bad):
    """Fuzz seeds 2613415938 and 887792948: the flow matrix derives the Kubernetes GPU
    workers (the DCGM exporter's flow, with monitoring hosts), and that read the topology's
    block lists with a raw parse, so a malformed one crashed `estate check`."""
    data = spec_dict("prod")
    assert data["firewall"].get("monitoring") and data["kubernetes"]
    data["topology"]["blocks"][2]["nodes"] = bad
    found = findings_for(data)
    assert "internal.error" not in {f.id for f in found}
    assert any(f.id.startswith("topology.") and f.path.startswith("topology.blocks[2]")
               for f in found), [(f.id, f.path) for f in found]
