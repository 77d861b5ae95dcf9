"""Provisioning without machines: the lab's machine list, who gets which role, where
files go, the inventory exports, secrets handling. No docker needed."""
from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from estate.pipeline import build
from estate.provision import inventory as inv
from estate.model.destinations import destination, installer
from estate.provision.envsecrets import secrets_from_env
from estate.provision.export import export
from estate.provision.secrets import SECRETS, ensure_secrets
from estate.render import write_tree
from estate.render.lab import MAX_NODES, PATH, bridge_name

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "stacks" / "lab.yaml"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    result = build(LAB)
    assert result.ok
    out = tmp_path_factory.mktemp("render")
    write_tree(result.artifacts, out)
    return result, out


def test_lab_machines_follow_the_spec(lab):
    result, _ = lab
    doc = json.loads(result.artifacts[PATH].content)
    est = result.estate
    assert [n["name"] for n in doc["nodes"]] == list(est.nodes)
    by_name = {n["name"]: n for n in doc["nodes"]}
    # every node's networks are its spec segments, with the spec's (or allocated) addresses
    for name, node in by_name.items():
        assert [(n["segment"], n["ip"]) for n in node["networks"]] == \
            [(s, str(est.address(name, s))) for s in est.group_of(name).addresses]
    assert by_name["ctl1"]["networks"][0]["ip"] == "10.60.0.11"
    # Kubernetes nodes are defined but not started (no kubelet can run in the lab)
    assert {n for n, d in by_name.items() if not d["autostart"]} == {"k8s1", "k8s2"}
    # no node installs the machine list
    assert str(result.artifacts[PATH].consumers) == ""


def test_lab_names_are_prefixed_and_fit_the_kernel(lab):
    result, _ = lab
    doc = json.loads(result.artifacts[PATH].content)
    for seg in doc["segments"]:
        assert seg["network"].startswith("estate-lab-") and seg["bridge"].startswith("estate-lab")
        assert len(seg["bridge"]) <= 15
    assert len(bridge_name(4094)) <= 15
    assert all(n["container"].startswith("estate-lab-") for n in doc["nodes"])


def test_big_specs_get_no_machine_list():
    spec = yaml.safe_load(LAB.read_text())
    spec["nodes"][2]["hosts"] = f"gpu[1-{MAX_NODES}]"
    spec["slurm"]["partitions"][0]["nodes"] = f"gpu[1-{MAX_NODES}]"
    from estate.render.lab import render_lab
    from estate.spec.load import load_text
    from estate.spec.resolved import Estate
    loaded = load_text(yaml.safe_dump(spec))
    assert loaded.spec is not None, loaded.findings
    assert render_lab(Estate(loaded.spec)) == []


def test_deploys_come_from_what_nodes_consume(lab):
    result, out = lab
    ts = {t.name: t for t in inv.targets(result.estate, inv.load_manifest(out))}
    # every node runs the node exporter (spec.monitoring); ctl1 runs the Slurm exporter
    # (the slurm-exporter flow's node) and Prometheus too
    assert ts["ctl1"].deploys == ["common", "firewall", "munge", "slurmdbd",
                                  "slurm_controller", "slurmrestd", "node_exporter",
                                  "slurm_exporter", "monitoring"]
    # NFS clients (the mount's hosts) get the storage deploy for their mount units; the
    # Slurm GPU workers the DCGM exporter
    assert ts["gpu1"].deploys == ["common", "firewall", "munge", "slurm_worker",
                                  "node_exporter", "dcgm_exporter", "storage"]
    assert ts["login1"].deploys == ["common", "firewall", "munge", "slurm_login",
                                    "node_exporter", "storage"]
    # the storage node consumes no Slurm file, so it gets no munge key
    assert ts["nfs1"].deploys == ["common", "firewall", "node_exporter", "storage"]
    assert ts["ctl1"].address == "10.60.0.11"


def test_manifests_have_one_owner(lab):
    """The control-plane role applies the manifests unless told another owner does."""
    result, out = lab
    conn = inv.Connection()
    for manifests in (True, False):
        hosts = inv.pyinfra_inventory(result.estate, out, None, conn, None, manifests).pyinfra()
        assert {h.data.estate_runtime["apply_manifests"] for h in hosts} == {manifests}


def test_shared_values_are_the_all_groups_and_groups_are_pyinfras(lab, tmp_path):
    """What every node shares is given once (pyinfra's `all` data); each host's own data
    is what differs, and the roles still read both from host.data."""
    result, out = lab
    conn = inv.Connection(key="/k", strict_host_keys=False)
    (tmp_path / "tls-ca.seed").write_bytes(bytes(32))   # ctl1's TLS front is issued from it
    (tmp_path / "k8s-ca.seed").write_bytes(bytes(32))   # and its minter's credential from it
    ours = inv.pyinfra_inventory(result.estate, out, tmp_path, conn, "ctl1,gpu[1-2],nfs1")
    for _, data in ours.hosts:
        assert set(data) == {"estate_node", "estate_plane", "estate_roles", "estate_deploys",
                             "ssh_hostname"}
    assert ours.data["ssh_key"] == "/k" and ours.data["estate_secrets_dir"] == str(tmp_path)
    pyinfra = ours.pyinfra()
    ctl, gpu1 = pyinfra.get_host("ctl1"), pyinfra.get_host("gpu1")
    assert ctl.data.ssh_hostname == "10.60.0.11" and gpu1.data.ssh_hostname == "10.60.0.13"
    assert gpu1.data.estate_render_dir == str(out.resolve())
    assert gpu1.data.ssh_strict_host_key_checking == "no"
    assert gpu1.data.estate_runtime == inv.runtime_facts(result.estate) | \
        {"apply_manifests": True}
    assert gpu1.data.estate_deploys == ["common", "firewall", "munge", "slurm_worker",
                                        "node_exporter", "dcgm_exporter", "storage"]
    assert [h.name for h in pyinfra.get_group("role_slurm_worker")] == ["gpu1", "gpu2"]
    assert [h.name for h in pyinfra.get_group("plane_shared")] == ["nfs1"]
    assert "role_slurm_worker" in gpu1.groups and "plane_slurm" in ctl.groups
    # --limit: only the selected nodes are in any group
    assert {h.name for g in pyinfra.groups.values() for h in g} == {"ctl1", "gpu1", "gpu2",
                                                                   "nfs1"}
    # a phase's cut keeps the shared data and drops the other hosts from the groups
    phase = ours.only(["gpu2"]).pyinfra()
    assert [h.name for h in phase] == ["gpu2"]
    assert [h.name for h in phase.get_group("role_slurm_worker")] == ["gpu2"]
    assert phase.get_host("gpu2").data.ssh_key == "/k"


def test_runtime_facts_agree_with_the_rendered_files(lab):
    result, out = lab
    facts = inv.runtime_facts(result.estate)
    conf = (out / "slurm" / "slurm.conf").read_text()
    assert f"StateSaveLocation={facts['slurm_state_dir']}" in conf
    assert f"jwt_key={facts['jwt_key']}" in conf
    assert f"StorageLoc={facts['slurmdbd_database']}" in (out / "slurm/slurmdbd.conf").read_text()


def test_every_consumed_artifact_has_an_installer_and_a_destination(lab):
    result, out = lab
    for t in inv.targets(result.estate, inv.load_manifest(out)):
        if t.plane == "kubernetes":
            continue  # the Kubernetes engineer's roles install those
        for path in t.consumes:
            assert installer(path, t.deploys), f"{t.name}: nothing installs {path}"
            assert destination(path).startswith("/")
    assert destination("slurm/slurm.conf") == "/etc/slurm/slurm.conf"
    assert destination("slurm/slurmd.env") == "/etc/default/slurmd"
    assert destination("common/identity.json") == "/etc/estate/common/identity.json"


def test_limit_takes_hostlists_and_names_unknown_nodes(lab):
    result, out = lab
    ts = inv.targets(result.estate, inv.load_manifest(out))
    assert [t.name for t in inv.select(ts, "gpu[1-2],ctl1")] == ["ctl1", "gpu1", "gpu2"]
    with pytest.raises(ValueError, match="gpu9"):
        inv.select(ts, "gpu[1-2],gpu9")


LOAD_WITH_PYINFRA_CLI = """
import json, sys
from pyinfra.api import State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory_from_files
with ctx_state.use(State()):   # the loader records the file it runs on the state
    inv = make_inventory_from_files(sys.argv[1], override_data={"estate_secrets_dir": "/s"})
print(json.dumps({"groups": {g: [h.name for h in hs] for g, hs in inv.groups.items()},
                  "data": {h.name: h.data.dict() for h in inv}}))
"""


def test_pyinfra_inventory_export_loads_and_groups(lab, tmp_path):
    """The exported file, loaded by pyinfra's own CLI loader: the shared data is the `all`
    group's and reaches every host's data, --data still overrides it."""
    import subprocess
    import sys
    result, out = lab
    text = export(result.estate, out, inv.Connection(key="/k", strict_host_keys=False), "pyinfra")
    assert text.count("'estate_runtime'") == 1     # once, not per host
    path = tmp_path / "inventory.py"
    path.write_text(text)
    # in a process of its own: importing pyinfra_cli monkey-patches the stdlib (gevent)
    loaded = json.loads(subprocess.run([sys.executable, "-c", LOAD_WITH_PYINFRA_CLI, str(path)],
                                       capture_output=True, text=True, check=True).stdout)
    assert loaded["groups"]["role_slurm_worker"] == ["gpu1", "gpu2"]
    assert loaded["groups"]["plane_kubernetes"] == ["k8s1", "k8s2"]
    assert loaded["groups"]["plane_shared"] == ["nfs1"]
    assert loaded["groups"]["deploy_slurmdbd"] == ["ctl1"]
    ctl = loaded["data"]["ctl1"]
    assert ctl["ssh_hostname"] == "10.60.0.11" and ctl["ssh_key"] == "/k"
    assert ctl["estate_render_dir"] == str(out.resolve())
    assert ctl["estate_runtime"] == inv.runtime_facts(result.estate)
    assert ctl["estate_deploys"][-1] == "monitoring"
    assert ctl["estate_secrets_dir"] == "/s"
    plain = export(result.estate, out, inv.Connection(key="/k", strict_host_keys=False), "json")
    assert "estate_secrets_dir" not in plain   # the keys' place is the user's to give


def test_ansible_inventory_export(lab):
    result, out = lab
    doc = yaml.safe_load(export(result.estate, out, inv.Connection(key="/k",
                                                                   strict_host_keys=False),
                                "ansible"))
    assert doc["all"]["hosts"]["gpu1"]["ansible_host"] == "10.60.0.13"
    shared = doc["all"]["vars"]
    assert shared["ansible_user"] == "root" and shared["ansible_ssh_private_key_file"] == "/k"
    assert shared["ansible_ssh_common_args"] == ("-o StrictHostKeyChecking=no "
                                                 "-o UserKnownHostsFile=/dev/null")
    assert shared["estate_runtime"] == inv.runtime_facts(result.estate)
    assert "estate_runtime" not in doc["all"]["hosts"]["gpu1"]
    assert set(doc["all"]["children"]["plane_slurm"]["hosts"]) == {"ctl1", "login1", "gpu1",
                                                                   "gpu2"}
    assert set(doc["all"]["children"]["role_slurmrestd"]["hosts"]) == {"ctl1"}


def test_secrets_are_private_and_never_rewritten(tmp_path):
    d = ensure_secrets(tmp_path / "s")
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    first = {}
    for name, size in SECRETS.items():
        p = d / name
        assert stat.S_IMODE(p.stat().st_mode) == 0o600 and p.stat().st_size == size
        first[name] = p.read_bytes()
    ensure_secrets(d)
    assert {n: (d / n).read_bytes() for n in SECRETS} == first


def test_secrets_from_the_environment_are_temporary():
    env = {"ESTATE_MUNGE_KEY_B64": base64.b64encode(b"m" * 128).decode()}
    with secrets_from_env(env) as d:
        assert (d / "munge.key").read_bytes() == b"m" * 128
        assert stat.S_IMODE((d / "munge.key").stat().st_mode) == 0o600
        assert not (d / "jwt_hs256.key").exists()
    assert not d.exists()
    with secrets_from_env({}) as d:
        assert d is None


def test_the_directorys_bind_password_comes_from_the_variable_the_spec_names():
    from estate.provision.envsecrets import spec_secrets
    spec = build(ROOT / "stacks" / "example-prod.yaml", render=False).estate.spec
    named = spec_secrets(spec)
    assert named == {"ESTATE_LDAP_BIND_B64": "ldap-bind.secret"}
    env = {"ESTATE_LDAP_BIND_B64": base64.b64encode(b"s3cret").decode()}
    with secrets_from_env(env, named=named) as d:
        assert (d / "ldap-bind.secret").read_bytes() == b"s3cret"
        assert stat.S_IMODE((d / "ldap-bind.secret").stat().st_mode) == 0o600
    assert spec_secrets(build(LAB, render=False).estate.spec) == {}


def test_bad_base64_secret_is_named_not_shown():
    with pytest.raises(ValueError) as err:
        with secrets_from_env({"ESTATE_JWT_KEY_B64": "not base64 !!secretvalue"}):
            pass
    assert "ESTATE_JWT_KEY_B64" in str(err.value) and "secretvalue" not in str(err.value)


def test_molecule_scenarios_are_generated_from_the_lab_spec():
    from estate.lab.molecule import SCENARIOS, scenario_files
    files = scenario_files()
    stale = [str(p.relative_to(ROOT)) for p, text in files.items()
             if not p.is_file() or p.read_text() != text]
    assert not stale, f"run `python -m estate.lab.molecule scaffold`: {stale}"
    for role in SCENARIOS:
        doc = yaml.safe_load((ROOT / "roles" / role / "molecule/default/molecule.yml").read_text())
        for p in doc["platforms"]:
            assert "privileged" not in p and p["cgroupns_mode"] == "host"
            assert p["image"] == "estate-lab-node:current"


def test_molecule_scenarios_use_the_spec_addresses(lab):
    from estate.lab.molecule import molecule_yml
    result, _ = lab
    doc = json.loads(result.artifacts[PATH].content)
    worker = molecule_yml("slurm_controller", doc)
    nets = {p["hostname"]: {n["name"]: n.get("ipv4_address") for n in p["networks"]}
            for p in worker["platforms"]}
    assert nets["ctl1"]["estate-mol-management"] == "10.60.0.11"
    assert nets["gpu1"]["estate-mol-management"] == str(result.estate.address("gpu1",
                                                                              "management"))


def test_molecule_scenarios_cover_every_container_role():
    """Dropping a scenario as a subset of another must not drop a role's coverage: every
    role a container can converge is applied and verified by some scenario, and no role
    directory keeps a scenario that `vagrant/molecule.sh` no longer runs."""
    from estate.lab.molecule import SCENARIOS
    applied = {d for nodes in SCENARIOS.values() for deploys in nodes.values() for d in deploys}
    container_roles = {"common", "firewall", "munge", "slurmdbd", "slurm_controller",
                       "slurmrestd", "slurm_worker", "slurm_login", "storage", "k8s_node",
                       "k8s_packages"}
    assert container_roles <= applied, container_roles - applied
    with_dirs = {p.parent.name for p in (ROOT / "roles").glob("*/molecule")}
    assert with_dirs == set(SCENARIOS)
    # munge across hosts: some scenario runs it on two nodes
    assert any(sum("munge" in d for d in nodes.values()) >= 2 for nodes in SCENARIOS.values())


def test_slurm_roles_refuse_a_node_of_another_debian_release(lab):
    """The spec's Slurm comes from one Debian release (catalogue.SLURM_SUITES); a node of
    another release would install a Slurm the rendered files do not fit."""
    from roles._lib import suite_problem
    result, _ = lab
    facts = inv.runtime_facts(result.estate)
    assert (facts["slurm_version"], facts["slurm_suite"]) == ("22.05", "bookworm")
    assert suite_problem("c1", "bookworm", facts["slurm_suite"], facts["slurm_version"]) == ""
    problem = suite_problem("c1", "trixie", "bookworm", "22.05")
    assert problem.startswith("c1: runs Debian trixie") and "slurm.version" in problem
    # a node whose release is unknown is left to apt (no os-release codename)
    assert suite_problem("c1", "", "bookworm", "22.05") == ""
