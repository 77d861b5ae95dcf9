"""NFS exports: served to the addresses of the clients the spec mounts them on, root
squashed, read-only to the Kubernetes plane unless a tenant is granted read-write."""
from __future__ import annotations

import time
from ipaddress import IPv4Address, IPv4Network

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from estate.model.storage import _cidrs, plane_options
from estate.render.storage import exports_file
from estate.spec.addressing import merge_ranges
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from tests.unit.checkutil import ROOT, spec_dict


def estate_of(data: dict) -> Estate:
    loaded = load_text(yaml.safe_dump(data, sort_keys=False))
    assert loaded.spec is not None, loaded.findings
    return Estate(loaded.spec)


def exports(data: dict, server: str = "nfs1") -> dict[str, dict[IPv4Address, set[str]]]:
    """path -> {client address: options} of a rendered exports file, CIDRs expanded."""
    out: dict[str, dict[IPv4Address, set[str]]] = {}
    for line in exports_file(estate_of(data), server).decode().splitlines():
        if not line or line.startswith("#"):
            continue
        path, *clients = line.split()
        for spec in clients:
            where, opts = spec[:-1].split("(")
            for addr in IPv4Network(where):
                assert addr not in out.setdefault(path, {}), f"{addr} listed twice"
                out[path][addr] = set(opts.split(","))
    return out


def addresses(estate: Estate, hosts: list[str], segment: str = "storage") -> set[IPv4Address]:
    return {estate.address(h, segment) for h in hosts}


def test_each_export_goes_to_its_mount_clients_only_root_squashed():
    data = spec_dict("lab")
    estate = estate_of(data)
    found = exports(data)
    home, models = found["/export/home"], found["/export/models"]
    assert set(home) == addresses(estate, ["login1", "gpu1", "gpu2"])
    assert set(models) == addresses(estate, ["gpu1", "gpu2", "k8s2"])
    # ctl1 and k8s1 are on the storage segment but mount nothing
    assert not addresses(estate, ["ctl1", "k8s1"]) & (set(home) | set(models))
    for opts in [*home.values(), *models.values()]:
        assert "root_squash" in opts and "no_root_squash" not in opts


def test_kubernetes_nodes_get_an_export_read_only_unless_a_tenant_has_it_read_write():
    data = spec_dict("lab")
    estate = estate_of(data)
    [k8s2] = addresses(estate, ["k8s2"])
    [gpu1] = addresses(estate, ["gpu1"])
    models = exports(data)["/export/models"]
    assert "ro" in models[k8s2] and "rw" not in models[k8s2]
    assert "rw" in models[gpu1], "the Slurm plane keeps the export's own options"
    data["kubernetes"]["tenants"][0]["storage"][0]["access"] = "rw"
    models = exports(data)["/export/models"]
    assert "rw" in models[k8s2] and "ro" not in models[k8s2]


def test_an_export_no_mount_names_is_exported_to_no_one():
    # exports(5) reads a path without clients as "exported to everyone"
    data = spec_dict("lab")
    data["storage"]["exports"].append({"name": "spare", "server": "nfs1",
                                       "path": "/export/spare", "segment": "storage"})
    text = exports_file(estate_of(data), "nfs1").decode()
    assert "/export/spare" not in exports(data)
    assert [l for l in text.splitlines() if "/export/spare" in l] == [
        "# /export/spare: no mount names export spare, so it is exported to no one"]


def test_ten_thousand_clients_render_in_a_handful_of_cidrs_quickly():
    data = spec_dict("prod")
    for s in data["segments"]:
        s["cidr"] = s["cidr"].rsplit(".", 2)[0] + ".0.0/16"
    gpus = [g for g in data["nodes"] if g["hosts"].startswith("gpu")]
    for k, g in enumerate(gpus):       # the four GPU groups, 2,500 nodes each
        g["hosts"] = f"gpu[{k * 2500 + 1:05d}-{(k + 1) * 2500:05d}]"
        g["addresses"] = {seg: "auto" for seg in g["addresses"]}
    for m in data["storage"]["mounts"]:
        m["clients"] = m["clients"].replace("gpu[001-128]", "gpu[00001-10000]")
    estate = estate_of(data)
    start = time.monotonic()
    text = exports_file(estate, "nfs1").decode()
    assert time.monotonic() - start < 2.0
    [line] = [l for l in text.splitlines() if l.startswith("/export/home")]
    assert len(line.split()) < 40, "contiguous addresses are not merged"
    assert len(exports(data)["/export/home"]) == 10000 + 4     # the GPUs, ctl[1-2], login[1-2]


@given(st.sets(st.integers(0, 300), max_size=80))
def test_cidrs_cover_exactly_the_addresses(offsets):
    base = int(IPv4Address("10.1.0.250"))
    addrs = sorted(base + o for o in offsets)
    covered = [int(a) for lo, hi in merge_ranges((a, a) for a in addrs)
               for c in _cidrs(lo, hi) for a in IPv4Network(c)]
    assert sorted(covered) == addrs


LAB_NODES = sorted(Estate(load_text((ROOT / "stacks" / "lab.yaml").read_text()).spec).nodes)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(LAB_NODES), min_size=1, unique=True))
def test_an_export_goes_to_each_client_with_its_planes_options(clients):
    """Any clients, whole groups or parts of them, in any order: each client's address on
    the export's segment, with the options of its plane, and no other address."""
    data = spec_dict("lab")
    [mount] = [m for m in data["storage"]["mounts"] if m["export"] == "models"]
    mount["clients"] = ",".join(clients)
    estate = estate_of(data)
    [export] = [e for e in estate.spec.storage.exports if e.name == "models"]
    want = {estate.address(c, export.segment): set(plane_options(
                estate, export, estate.group_of(c).plane).split(","))
            for c in clients if estate.address(c, export.segment) is not None}
    assert exports(data).get("/export/models", {}) == want
