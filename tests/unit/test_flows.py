"""The flow matrix (estate.model.flows) and what is rendered from it: nftables with default
deny, SrunPortRange, the tenants' slurmrestd NetworkPolicy, doctor's ports, and the
reachability probe's plan."""
from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estate.doctor import _flows
from estate.spec.addressing import merge_ranges
from estate.model.flows import DEFAULT_NAMES, flow, matrix, srun_ports
from estate.pipeline import build
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from estate.verify.reachability import plan, summary, Outcome
from tests.unit.checkutil import ROOT, spec_dict


@pytest.fixture(scope="module")
def lab():
    return build(ROOT / "stacks" / "lab.yaml")


def _flow(estate, name):
    return next(f for f in matrix(estate).flows if f.name == name)


def _sources(estate, name):
    from estate.model.flows import range_text
    return [range_text(lo, hi) for lo, hi in matrix(estate).source_ranges(_flow(estate, name))]


def test_slurm_flows_come_from_slurm_nodes_only(lab):
    est = lab.estate
    ctld = _flow(est, "slurmctld")
    assert ctld.to == {"ctl1"} and ctld.segment == "management"
    assert ctld.sources == {"ctl1", "login1", "gpu1", "gpu2"}   # not nfs1, not k8s[1-2]
    assert _flow(est, "slurmd").to == {"gpu1", "gpu2"}
    assert _flow(est, "slurmdbd").sources == {"ctl1", "login1"}


def test_slurmrestd_only_from_the_bridge_and_admins(lab):
    est = lab.estate
    rest = _flow(est, "slurmrestd")
    # the admin hosts (the lab host on two bridges) and the Kubernetes nodes, since the
    # inference tenant is granted the bridge; not login1 or the workers
    assert _sources(est, "slurmrestd") == ["10.60.0.1", "10.62.0.1",
                                           f"{est.address('k8s1', 'service')}-"
                                           f"{est.address('k8s2', 'service')}"]
    assert "login1" not in rest.sources


def test_nfs_from_the_exports_mount_clients_on_its_segment(lab):
    est = lab.estate
    home, models = [f for f in matrix(est).flows if f.name == "nfs"]
    assert home.to == models.to == {"nfs1"} and home.segment == "storage"
    assert home.sources == {"login1", "gpu1", "gpu2"}          # not ctl1, not Kubernetes
    assert models.sources == {"gpu1", "gpu2", "k8s2"}          # the tenant's grant: k8s2


def test_every_flow_has_a_reason(lab):
    assert all(f.reason.strip() for f in matrix(lab.estate).flows)


def test_a_spec_flow_replaces_the_default_of_its_name():
    data = spec_dict("lab")
    data["firewall"]["srun_ports"] = [61000, 61100]
    data["firewall"]["flows"] = [{"name": "ssh", "to": "ctl1,login1,gpu[1-2],nfs1,k8s[1-2]",
                                  "segment": "management", "port": 22,
                                  "from_cidrs": ["10.60.0.2/32"], "reason": "the jump host"}]
    est = Estate(load_text(yaml.safe_dump(data), "t.yaml").spec)
    assert [f.cidrs for f in matrix(est).flows if f.name == "ssh"] == [("10.60.0.2/32",)]
    assert srun_ports(est) == (61000, 61100)


@pytest.mark.parametrize("stack", ["lab", "example-prod"])
def test_each_flow_derived_alone_is_the_matrix_flow(stack):
    est = Estate(load_text((ROOT / "stacks" / f"{stack}.yaml").read_text(), "t.yaml").spec)
    whole: dict = {}
    for f in matrix(est).flows:   # the first of a name (nfs: one flow per export)
        whole.setdefault(f.name, f)
    assert {"srun", "slurmctld", "slurmd"} <= set(whole)
    for name in sorted(DEFAULT_NAMES | set(whole)):
        assert flow(est, name) == whole.get(name), name


@pytest.mark.parametrize("stack", ["lab", "example-prod"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_address_ranges_by_group_are_the_addresses_name_by_name(stack, data):
    """Whole groups as one range each, partial groups node by node, at set speed: per group
    the same addresses as looking each name up (Estate.address)."""
    est = _estate(stack)
    names = sorted(est.nodes)
    wanted = frozenset(data.draw(st.lists(st.sampled_from(names), unique=True)) +
                       data.draw(st.sampled_from([[], names])))
    segment = data.draw(st.sampled_from(sorted({seg for _, seg in est._block_index})))
    first = {gi: b.first for (gi, seg), b in est._block_index.items() if seg == segment}
    by_name: dict[int, list] = {}
    for n in wanted:
        if est.address(n, segment) is not None:
            by_name.setdefault(est.nodes[n].group, []).append((int(est.address(n, segment)),) * 2)
    got = est.address_ranges(wanted, first)
    assert {gi: merge_ranges(s) for gi, s in got.items()} == \
        {gi: merge_ranges(s) for gi, s in by_name.items()}
    assert list(got) == [gi for gi in first if gi in got]   # in first's order


def test_a_name_twice_counts_at_its_first_place_in_the_address_ranges():
    data = spec_dict("lab")
    data["nodes"].append({**data["nodes"][-1], "hosts": "gpu1"})   # gpu1 again, elsewhere
    est = Estate(load_text(yaml.safe_dump(data), "t.yaml").spec)
    gi, index = est.nodes["gpu1"].group, est.nodes["gpu1"].index
    first = {g: b.first for (g, seg), b in est._block_index.items() if seg == "management"}
    assert est.address_ranges(frozenset({"gpu1"}), first) == {
        gi: [(first[gi] + index, first[gi] + index)]}


@lru_cache(maxsize=None)
def _estate(stack: str) -> Estate:
    return Estate(load_text((ROOT / "stacks" / f"{stack}.yaml").read_text(), "t.yaml").spec)


def test_srun_ports_is_the_range_of_the_matrix_srun_flow_a_spec_flow_included():
    data = spec_dict("lab")
    est = Estate(load_text(yaml.safe_dump(data), "t.yaml").spec)
    [default] = [f.ports for f in matrix(est).flows if f.name == "srun"]
    assert srun_ports(est) == default == tuple(data["firewall"].get("srun_ports",
                                                                    (60001, 63000)))
    data["firewall"]["flows"] = [{"name": "srun", "to": "gpu[1-2]", "segment": "management",
                                  "port": 62000, "port_end": 62010, "from_hosts": "login1",
                                  "reason": "srun only from the login node"}]
    est = Estate(load_text(yaml.safe_dump(data), "t.yaml").spec)
    [given] = [f.ports for f in matrix(est).flows if f.name == "srun"]
    assert srun_ports(est) == given == (62000, 62010)


def test_slurm_conf_sets_exactly_the_srun_range_the_firewall_opens(lab):
    conf = lab.artifacts["slurm/slurm.conf"].content.decode()
    lo, hi = srun_ports(lab.estate)
    assert f"SrunPortRange={lo}-{hi}\n" in conf
    worker = lab.artifacts["network/nftables/group-002.nft"].content.decode()
    assert f"tcp dport {lo}-{hi} counter accept comment \"srun\"" in worker


def test_nftables_deny_by_default_and_count_and_log_drops(lab):
    for path, art in lab.artifacts.items():
        if not path.startswith("network/nftables/"):
            continue
        text = art.content.decode()
        assert "policy drop;" in text and "policy accept" not in text
        assert "ct state established,related accept" in text
        assert 'log prefix "estate-drop input: "' in text and "counter drop" in text
        # forward is filtered only where the node routes (the Kubernetes nodes' pods)
        assert ("chain forward" in text) == (path in ("network/nftables/group-004.nft",
                                                      "network/nftables/group-005.nft"))


def test_rules_name_node_addresses_not_segments(lab):
    ctl = lab.artifacts["network/nftables/group-000.nft"].content.decode()
    assert "10.60.0.0/24" not in ctl and "10.62.0.0/24" not in ctl
    assert 'ip saddr { 10.60.0.11-10.60.0.14 } tcp dport 6817' in ctl


@pytest.mark.skipif(not shutil.which("nft"), reason="nft is not installed (make deps)")
def test_nft_accepts_every_rendered_ruleset(lab):
    for path, art in lab.artifacts.items():
        if path.startswith("network/nftables/"):
            proc = subprocess.run(["nft", "-c", "-f", "-"], input=art.content,
                                  capture_output=True)
            assert proc.returncode == 0, f"{path}: {proc.stderr.decode()}"


def test_slurmrestd_network_policy_only_for_granted_tenants():
    prod = build(ROOT / "stacks" / "example-prod.yaml")
    docs = {name: list(yaml.safe_load_all(prod.artifacts[f"kubernetes/manifests/30-tenant-"
                                                         f"{name}.yaml"].content))
            for name in ("inference", "batch-embed")}
    names = {t: [d["metadata"]["name"] for d in ds] for t, ds in docs.items()}
    assert "allow-slurmrestd" not in names["inference"]
    policy = next(d for d in docs["batch-embed"] if d["metadata"]["name"] == "allow-slurmrestd")
    est = prod.estate
    want = sorted(f"{est.address(c, 'service')}/32" for c in ("ctl1", "ctl2"))
    assert policy["spec"]["egress"] == [{"to": [{"ipBlock": {"cidr": c}} for c in want],
                                         "ports": [{"protocol": "TCP", "port": 6820}]}]


def test_doctor_checks_daemon_ports_not_ssh_or_srun(lab):
    est = lab.estate
    assert _flows(est, [0]) == [("slurmctld", 6817), ("slurmdbd", 6819), ("slurmrestd", 6820)]


def test_reachability_plan_follows_the_matrix(lab):
    probes = {(p.src, p.dst, p.proto, p.port, p.segment): p.flow
              for p in plan(lab.estate, ["ctl1", "login1", "gpu1", "gpu2", "nfs1", "k8s1"])}
    assert probes[("login1", "ctl1", "tcp", 6817, "management")] == "slurmctld"
    assert probes[("nfs1", "ctl1", "tcp", 6817, "management")] is None
    assert probes[("gpu1", "login1", "tcp", 63000, "management")] == "srun"
    assert probes[("ctl1", "login1", "tcp", 63001, "management")] is None
    assert probes[("login1", "ctl1", "tcp", 6820, "service")] is None
    assert probes[("gpu1", "ctl1", "tcp", 22, "management")] is None   # admins only
    assert probes[("login1", "nfs1", "tcp", 2049, "storage")] == "nfs"
    assert probes[("ctl1", "nfs1", "tcp", 2049, "storage")] is None
    assert probes[("gpu1", "nfs1", "tcp", 2049, "storage")] == "nfs"
    assert probes[("gpu1", "nfs1", "udp", 53, "storage")] is None
    assert not any(src == dst for src, dst, *_ in probes)
    # job traffic: torchrun's port and an ephemeral one, worker to worker, on the fabric
    # and the address segment; from a Kubernetes node, a login node or the controller, no
    for port in (29500, 45123):
        for seg in ("fabric", "management"):
            assert probes[("gpu2", "gpu1", "tcp", port, seg)] == "job-tcp"
        for src in ("k8s1", "login1", "ctl1", "nfs1"):
            assert probes[(src, "gpu1", "tcp", port, "management")] is None
    assert probes[("gpu2", "gpu1", "udp", 45123, "fabric")] == "job-udp"
    # mpirun on a login node: the workers call back to it (TCP only)
    assert probes[("gpu1", "login1", "tcp", 45123, "management")] == "job-launcher"
    assert probes[("gpu1", "login1", "udp", 45123, "management")] is None
    assert probes[("k8s1", "login1", "tcp", 45123, "management")] is None


def test_reachability_summary_counts_and_lists_violations(lab):
    probes = plan(lab.estate, ["ctl1", "login1"])
    designed = next(p for p in probes if p.flow)
    denied = next(p for p in probes if not p.flow)
    s = summary([Outcome(designed, "open"), Outcome(denied, "timeout"),
                 Outcome(designed, "timeout"), Outcome(denied, "refused")])
    assert (s["probes"], s["designed_ok"], s["denied_ok"]) == (4, 1, 1)
    assert [(v["expected"], v["got"]) for v in s["violations"]] == [("open", "timeout"),
                                                                     ("blocked", "refused")]


def test_default_names_are_the_defaults_names(lab):
    """A spec flow replaces a default by name (and flows.required_cut looks only then)."""
    from estate.model.flows import DEFAULT_NAMES, default_flows
    prod = build(ROOT / "stacks" / "example-prod.yaml")
    # the lab without pod encapsulation: Calico's BGP flow instead of VXLAN's
    data = yaml.safe_load((ROOT / "stacks" / "lab.yaml").read_text())
    data["kubernetes"]["cni"] = {"encapsulation": "none"}
    routed = Estate(load_text(yaml.safe_dump(data), "lab-routed").spec)
    names = {f.name for e in (lab.estate, prod.estate, routed) for f in default_flows(e)}
    assert names == DEFAULT_NAMES


@pytest.mark.parametrize("lab_run,flag,want", [(True, None, True), (False, None, False),
                                               (False, True, True), (True, False, False)])
def test_verify_probes_reachability_in_the_lab_or_when_asked(lab, monkeypatch, tmp_path,
                                                             lab_run, flag, want):
    from estate.verify import run as verify_run
    seen = {}
    monkeypatch.setattr(verify_run, "run_suites", lambda ctx, *a, **k: seen.setdefault("c", ctx))
    verify_run.run_verify(lab.estate, tmp_path, lab=lab_run, outdir=tmp_path,
                          reachability=flag)
    assert seen["c"].reachability_probe is want


def test_verify_reports_reachability_in_table_json_and_junit(lab, monkeypatch, tmp_path,
                                                             capsys):
    """The suite's per-source checks, the printed counts and violations, verify.json and
    the JUnit file, from canned probe outcomes (the lab tier probes for real)."""
    import json
    import xml.etree.ElementTree as ET

    from estate.output import Output
    from estate.provision.inventory import connection
    from estate.verify import reachability
    from estate.verify.context import VerifyContext
    from estate.paths import CHECKS
    from estate.verify.run import run_suites
    nodes = ["ctl1", "login1"]
    probes = plan(lab.estate, nodes)
    bad = next(p for p in probes if p.src == "login1" and p.port == 6820)   # undesigned
    canned = [Outcome(p, "refused" if p is bad else ("open" if p.flow else "timeout"))
              for p in probes]
    monkeypatch.setattr(reachability, "probe_all", lambda ctx, n: canned)
    ctx = VerifyContext(lab.estate, tmp_path, connection(True, None, "root", False), tmp_path,
                        "ctl1,login1", reachability_probe=True)
    monkeypatch.setattr(VerifyContext, "nodes", {n: None for n in nodes})
    report = run_suites(ctx, [str(CHECKS / "test_reachability.py")],
                        output=Output.text)
    printed = capsys.readouterr().out
    r = report.reachability
    assert r["violations"] == [Outcome(bad, "refused").as_dict()]
    assert r["designed_ok"] == sum(1 for p in probes if p.flow) > 0
    assert f"{r['denied_ok']} denied ok, 1 violations" in printed
    assert f"VIOLATION login1 -> ctl1 {bad.addr} tcp/6820 (service): expected blocked, " \
           f"got refused" in printed
    assert json.loads(report.json.read_text())["reachability"] == r
    cases = {c.get("name"): c for c in ET.parse(report.junit).getroot().iter("testcase")}
    failed = cases["test_reachability[login1]"].find("failure")
    assert failed is not None and "tcp/6820" in failed.get("message")
    assert cases["test_reachability[ctl1]"].find("failure") is None
    assert not report.ok


def test_ha_control_planes_accept_etcd_from_each_other_and_the_api_on_the_vip():
    """Stacked etcd: 2379-2380/tcp between the control planes only; the API also on the VIP
    where a group holds control planes and workers (its rules then name addresses)."""
    data = spec_dict("ha")
    [cp] = [g for g in data["nodes"] if "k8s_control_plane" in g["roles"]]
    cp["hosts"], cp["roles"] = "k8s-cp[1-4]", ["k8s_control_plane", "k8s_worker"]
    result = build_data(data)
    estate = result.estate
    etcd = _flow(estate, "etcd")
    assert etcd.ports == (2379, 2380) and etcd.proto == "tcp"
    assert etcd.to == etcd.sources == {"k8s-cp1", "k8s-cp2", "k8s-cp3"}
    assert _flow(estate, "kube-apiserver").vips == ("10.30.0.10",)
    gi = next(i for i, g in enumerate(estate.spec.nodes) if g.hosts == "k8s-cp[1-4]")
    nft = result.artifacts[f"network/nftables/group-{gi:03d}.nft"].content.decode()
    api = next(line for line in nft.splitlines() if '"kube-apiserver"' in line)
    assert "ip daddr { 10.30.0.15, 10.30.0.16, 10.30.0.17, 10.30.0.10 } tcp dport 6443" in api
    rule = next(line for line in nft.splitlines() if '"etcd"' in line)
    assert "ip saddr { 10.30.0.15-10.30.0.17 }" in rule and "dport 2379-2380" in rule
    if shutil.which("nft"):   # the ruleset with the VIP among its destinations loads
        proc = subprocess.run(["nft", "-c", "-f", "-"], input=nft.encode(), capture_output=True)
        assert proc.returncode == 0, proc.stderr.decode()


def build_data(data):
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ha.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return build(path)
