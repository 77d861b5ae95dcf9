"""estate doctor, fast: a fake root for this host's files, a fake runner for nodes.

The real host run (every plugin present, exit 0) is tests/live_slurm/test_doctor_host.py.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from estate import doctor
from estate.catalogue import ROLES, plugin_file
from estate.doctor import (ERROR, WARNING, FileInfo, LocalRunner, Probe, Proc, SshRunner,
                           Unreachable, check_keys, doctor_local, doctor_nodes, host_need,
                           listening_ports, parse_policy, probe_ports, slurm_version)
from estate.pipeline import build
from estate.render.slurm import slurm_plugins

ROOT = Path(__file__).resolve().parents[2]
ESTATE = str(ROOT / ".venv" / "bin" / "estate")
LAB = ROOT / "stacks" / "lab.yaml"
TCP_HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   "
              "uid  timeout inode\n")


@pytest.fixture(scope="module")
def lab():
    result = build(LAB)
    assert result.ok
    return result


def spec_variant(tmp_path: Path, change) -> Path:
    data = yaml.safe_load(LAB.read_text())
    change(data)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def fake_root(tmp_path: Path, estate, missing: tuple[str, ...] = ()) -> Path:
    """A tree with the plugin files the spec names (but the missing ones), an empty
    /proc/net/tcp, a kernel without NFS and cgroup v2."""
    root = tmp_path / "root"
    for plugin in {p for ps in slurm_plugins(estate).values() for p in ps} - set(missing):
        path = root / plugin_file(plugin).lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x7fELF")
    files = {"proc/net/tcp": TCP_HEADER, "proc/net/tcp6": TCP_HEADER,
             "proc/filesystems": "nodev\tsysfs\nnodev\tproc\n\text4\n",
             "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def estate(*args) -> subprocess.CompletedProcess:
    return subprocess.run([ESTATE, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


# --- this host, through the CLI ---------------------------------------------------------

def test_missing_jwt_plugin_names_plugin_and_package(tmp_path, lab):
    root = fake_root(tmp_path, lab.estate, missing=("auth/jwt",))
    res = estate("doctor", LAB, "--root", root)
    assert res.returncode == 1, res.stdout + res.stderr
    fails = [line for line in res.stdout.splitlines() if line.startswith("FAIL")]
    jwt = [line for line in fails if "  auth/jwt " in line]  # not rest_auth/jwt
    assert len(jwt) == 1, res.stdout
    assert "doctor.plugin" in jwt[0] and "apt-get install slurm-wlm-jwt-plugin" in jwt[0]
    # the other plugins are in the fake root: only the missing one is named
    assert not [line for line in fails if "doctor.plugin" in line and line not in jwt]


def test_json_output_is_a_list_of_checks(tmp_path, lab):
    root = fake_root(tmp_path, lab.estate, missing=("auth/jwt",))
    res = estate("doctor", LAB, "--root", root, "--output", "json")
    assert res.returncode == 1
    checks = json.loads(res.stdout)
    assert all(set(c) == {"id", "severity", "status", "target", "message", "fix"}
               for c in checks)
    jwt = [c for c in checks if c["id"] == "doctor.plugin" and c["message"].startswith("auth/jwt ")]
    assert jwt == [{"id": "doctor.plugin", "severity": "error", "status": "fail",
                    "target": "local", "message": jwt[0]["message"],
                    "fix": jwt[0]["fix"]}]
    assert jwt[0]["fix"].startswith("apt-get install slurm-wlm-jwt-plugin")


def test_spec_with_errors_is_one_failure(tmp_path):
    spec = spec_variant(tmp_path, lambda d: d["nodes"][0].update(switch="nowhere"))
    res = estate("doctor", spec)
    assert res.returncode == 1
    assert "doctor.spec" in res.stdout and "estate check" in res.stdout


def test_spec_without_slurmrestd_asks_for_no_jwt(tmp_path):
    def drop(d):
        d["slurm"]["slurmrestd"] = None
        d["nodes"][0]["roles"] = ["slurm_controller"]
        del d["kubernetes"]["tenants"][0]["bridge"]    # it needs slurmrestd
    result = build(spec_variant(tmp_path, drop))
    assert result.ok, [f.as_dict() for f in result.findings]
    checks = doctor_local(result.estate, result.artifacts, fake_root(tmp_path, result.estate))
    assert not [c for c in checks if "jwt" in c.message.lower() and c.id != "doctor.package"]
    assert "doctor.jwt_key" not in {c.id for c in checks}
    assert not [c for c in checks if c.id == "doctor.plugin" and not c.ok]


def test_lab_keys_are_created_by_the_lab(lab):
    checks = check_keys(lab.estate, None, lab=True)
    assert [(c.id, c.ok) for c in checks] == [("doctor.munge_key", True), ("doctor.jwt_key", True),
                                              ("doctor.tls_seed", True),
                                              ("doctor.cluster_ca_seed", True)]
    assert all("created by the lab" in c.message for c in checks)


def test_secrets_dir_keys(tmp_path, lab):
    (tmp_path / "munge.key").write_bytes(os.urandom(16))       # munged needs >= 32 bytes
    (tmp_path / "jwt_hs256.key").write_bytes(os.urandom(32))
    os.chmod(tmp_path / "jwt_hs256.key", 0o644)
    munge, jwt, seed, ca_seed = check_keys(lab.estate, tmp_path, lab=True)
    assert (munge.status, jwt.status, seed.status, ca_seed.status) == \
        ("FAIL", "warn", "FAIL", "FAIL")
    assert "needs >= 32" in munge.message and "chmod 600" in jwt.fix
    missing = check_keys(lab.estate, tmp_path / "nope", lab=False)
    assert all(c.status == "FAIL" and c.target == "secrets" for c in missing)
    assert [c.status for c in check_keys(lab.estate, None, lab=False)] == ["FAIL"] * 4


# --- ports ------------------------------------------------------------------------------

def test_proc_net_tcp_parser():
    text = TCP_HEADER + (
        "   0: 00000000:1AA1 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 1\n"
        "   1: 0100007F:1AA2 0100007F:D0D0 01 00000000:00000000 00:00000000 00000000  0 0 2\n")
    tcp6 = TCP_HEADER + ("   0: 00000000000000000000000000000000:1AA4 "
                         "00000000000000000000000000000000:0000 0A 0 0 0 0 0 3\n")
    assert listening_ports(text) == {0x1AA1}           # the established socket is not a listener
    assert listening_ports(tcp6) == {0x1AA4}
    assert listening_ports("") == set()


def test_a_taken_port_is_reported(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = build(spec_variant(tmp_path, lambda d: d["slurm"]["slurmrestd"].update(
            port=port)))
        assert result.ok
        p = Probe(host_need(result.estate), LocalRunner("/"), result.estate, result.artifacts)
        checks = {c.message.split(":")[0]: c for c in probe_ports(p)}
    taken = next(c for m, c in checks.items() if m.startswith(f"slurmrestd port {port}"))
    # the labs run in namespaces of their own: on this host a taken port is a warning
    assert taken.status == "warn" and "taken" in taken.message and str(port) in taken.fix


# --- nodes through a fake runner ---------------------------------------------------------

class FakeRunner:
    """Canned answers: installed packages with versions, apt candidates, files present."""

    def __init__(self, installed=None, candidates=None, files=None):
        self.installed = installed or {}
        self.candidates = candidates or {}
        self.files = {"/proc/net/tcp": TCP_HEADER, "/proc/filesystems": "\tnfs\n\tnfsd\n",
                      "/sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
                      "/run/containerd/containerd.sock": "", **(files or {})}
        self.calls: list[list[str]] = []

    def run(self, argv):
        self.calls.append(argv)
        if argv[0] == "dpkg-query":
            return Proc(0, "".join(f"{p} install ok installed {self.installed[p]}\n"
                                   for p in argv[4:] if p in self.installed))
        if argv[:2] == ["apt-cache", "policy"]:
            return Proc(0, "".join(f"{p}:\n  Installed: (none)\n  Candidate: "
                                   f"{self.candidates.get(p, '(none)')}\n" for p in argv[2:]))
        return Proc(1 if argv[0] == "modprobe" else 0)  # no loadable modules

    def read(self, path):
        return self.files.get(path)

    def stat(self, path):
        return FileInfo(1, 0o644, 0) if path in self.files else None

    def which(self, command):
        return f"/usr/bin/{command}"


def every_package(version="22.05.8-4+deb12u3"):
    from estate.catalogue import packages
    everything = packages(*ROLES, extras=("server", "client"))
    return dict.fromkeys(everything, version)


def plugin_files(estate) -> dict[str, str]:
    return {plugin_file(p): "" for ps in slurm_plugins(estate).values() for p in ps}


def test_unreachable_node_is_one_error_and_the_others_are_checked(lab):
    def connect(need):
        if need.name == "gpu1":
            raise Unreachable("ssh: connect to host 10.60.0.13 port 22: No route to host")
        return FakeRunner(every_package(), files=plugin_files(lab.estate))
    checks = doctor_nodes(lab.estate, lab.artifacts, connect, secrets=None)
    gpu1 = [c for c in checks if c.target == "gpu1"]
    assert len(gpu1) == 1
    assert (gpu1[0].id, gpu1[0].severity, gpu1[0].ok) == ("doctor.unreachable", ERROR, False)
    assert "gpu1" in gpu1[0].message and "No route to host" in gpu1[0].message
    checked = {c.target for c in checks} - {"gpu1", "secrets"}
    assert checked == set(lab.estate.nodes) - {"gpu1"}
    assert all(c.ok or c.id in ("doctor.munge_key", "doctor.jwt_key", "doctor.tls_seed",
                                 "doctor.cluster_ca_seed", "doctor.unreachable")
               for c in checks), [doctor.line(c) for c in checks if not c.ok]


def test_limit_selects_nodes(lab):
    checks = doctor_nodes(lab.estate, lab.artifacts,
                          lambda need: FakeRunner(every_package(), files=plugin_files(lab.estate)),
                          limit="gpu[1-2]")
    assert {c.target for c in checks} == {"gpu1", "gpu2", "secrets"}


def test_node_packages_come_from_its_deploys_and_apt(lab):
    # a fresh node: nothing installed; apt has everything but the JWT plugin
    candidates = every_package()
    del candidates["slurm-wlm-jwt-plugin"]
    checks = doctor_nodes(lab.estate, lab.artifacts,
                          lambda need: FakeRunner(candidates=candidates), limit="ctl1")
    node = [c for c in checks if c.target == "ctl1"]
    bad = [c for c in node if not c.ok]
    assert {(c.id, c.severity) for c in bad} == {("doctor.package", ERROR),
                                                 ("doctor.plugin", ERROR)}
    assert all("slurm-wlm-jwt-plugin" in c.fix for c in bad)
    assert any("auth/jwt" in c.message for c in bad)
    assert any("apply installs" in c.message for c in node if c.id == "doctor.package")
    # the controller runs no slurmd: it is not asked for one
    assert not any(c.message.startswith("slurmd ") for c in node)


def test_old_slurm_cannot_read_configless(lab):
    runner = FakeRunner(every_package("19.05.5-1"), files=plugin_files(lab.estate))
    checks = doctor_nodes(lab.estate, lab.artifacts, lambda need: runner, limit="ctl1")
    old = [c for c in checks if c.id == "doctor.slurm_version"]
    assert old and all(c.status == "FAIL" for c in old)
    assert any("enable_configless" in c.message and "20.02" in c.message for c in old)


def release_checks(spec_path: Path, installed: str, lab_host: bool = False):
    result = build(spec_path)
    assert result.ok
    runner = FakeRunner(every_package(installed), files=plugin_files(result.estate))
    if lab_host:
        checks = doctor.run_probes(host_need(result.estate), runner, result.estate,
                                   result.artifacts)
    else:
        checks = doctor_nodes(result.estate, result.artifacts, lambda need: runner,
                              limit="ctl1")
    return [c for c in checks if c.id == "doctor.slurm_version"]


def test_a_node_with_another_slurm_than_slurm_version(tmp_path):
    """The files are rendered for slurm.version: an older Slurm on the node fails, a newer
    one warns; a 24.11 spec's blocks also need topology/block (>= 23.11)."""
    prod = ROOT / "stacks" / "example-prod.yaml"   # slurm.version 24.11, with blocks
    old = [c for c in release_checks(prod, "22.05.8-4+deb12u3") if not c.ok]
    assert len(old) == 2 and all(c.status == "FAIL" for c in old)
    assert any("rendered for Slurm 24.11" in c.message and "Debian trixie" in c.fix
               for c in old)
    assert any("topology/block" in c.message and "23.11" in c.message
               and "Debian trixie has 24.11" in c.fix for c in old)
    assert all(c.ok for c in release_checks(prod, "24.11.5-4+deb13u1"))
    newer = release_checks(LAB, "24.11.5-4+deb13u1")   # lab.yaml: 22.05
    assert [(c.status, c.severity) for c in newer if not c.ok] == [("warn", WARNING)]


def test_the_lab_host_runs_another_release_from_its_root():
    prod = ROOT / "stacks" / "example-prod.yaml"
    checks = release_checks(prod, "22.05.8-4+deb12u3", lab_host=True)
    assert [c.ok for c in checks] == [True] and "root" in checks[0].message


def test_a_taken_port_on_a_node_is_an_error(lab):
    tcp = TCP_HEADER + ("   0: 00000000:1AA1 00000000:0000 0A 00000000:00000000 00:00000000 "
                        "00000000  0 0 1\n")  # 0x1AA1 = 6817, slurmctld's
    runner = FakeRunner(every_package(), files={**plugin_files(lab.estate), "/proc/net/tcp": tcp})
    checks = doctor_nodes(lab.estate, lab.artifacts, lambda need: runner, limit="ctl1")
    port = [c for c in checks if c.id == "doctor.port" and "6817" in c.message]
    assert [(c.status, c.severity) for c in port] == [("FAIL", ERROR)]


def test_nfs_is_a_warning_on_storage_nodes(lab):
    runner = FakeRunner(every_package(), files={**plugin_files(lab.estate),
                                                "/proc/filesystems": "nodev\tproc\n"})
    checks = doctor_nodes(lab.estate, lab.artifacts, lambda need: runner, limit="nfs1")
    nfs = [c for c in checks if c.id == "doctor.nfs"]
    assert [(c.status, c.severity) for c in nfs] == [("warn", WARNING)]
    assert "nfsd" in nfs[0].message and "unsupported" in nfs[0].fix


def test_apt_policy_parser():
    text = ("slurmd:\n  Installed: (none)\n  Candidate: 22.05.8-4+deb12u3\n  Version table:\n"
            "     22.05.8-4+deb12u3 500\n"
            "slurm-wlm-jwt-plugin:\n  Installed: (none)\n  Candidate: (none)\n")
    assert parse_policy(text) == {"slurmd": "22.05.8-4+deb12u3"}


@pytest.mark.parametrize("text, version", [("22.05.8-4+deb12u3", (22, 5)),
                                           ("slurm-wlm 23.11.4", (23, 11)),
                                           ("1:20.02.7-1", (20, 2)), ("", None)])
def test_slurm_version(text, version):
    assert slurm_version(text) == version


def test_every_catalogue_service_has_a_command():
    for role in ROLES.values():
        shipped = {c for p in role.packages + role.external + sum(role.extras.values(), ())
                   for c in doctor.COMMANDS.get(p, ())}
        for service in role.services:
            assert doctor.SERVICE_COMMANDS.get(service, service) in shipped, (role.name, service)


def test_ssh_runner_quotes_every_argument():
    class Host:
        def __init__(self):
            self.commands = []

        def run(self, command, *args):
            import shlex
            self.commands.append(command % tuple(shlex.quote(a) for a in args))
            return type("R", (), {"rc": 0, "stdout": "", "stderr": ""})()
    runner = SshRunner.__new__(SshRunner)
    runner.host = Host()
    runner.run(["stat", "-c", "%s %a", "/tmp/x; rm -rf /"])
    assert runner.host.commands == ["stat -c '%s %a' '/tmp/x; rm -rf /'"]


def test_ssh_failure_is_unreachable():
    class Host:
        def run(self, command, *args):
            return type("R", (), {"rc": 255, "stdout": "",
                                  "stderr": "ssh: Could not resolve hostname gpu9\n"})()
    runner = SshRunner.__new__(SshRunner)
    runner.host = Host()
    with pytest.raises(Unreachable, match="Could not resolve hostname gpu9"):
        runner.run(["true"])


def test_autodetect_nvml_needs_a_plugin_no_debian_package_ships(tmp_path):
    """slurm.plugin_not_in_release refuses the spec first; doctor, on the rendered files
    of such a spec, names the plugin and why no apt-get install brings it."""
    from estate.pipeline import render_all
    from estate.spec.load import load
    from estate.spec.resolved import Estate
    loaded = load(spec_variant(tmp_path, lambda d: d["slurm"].update(gres_autodetect="nvml")))
    est = Estate(loaded.spec, loaded.files)
    assert "gpu/nvml" in slurm_plugins(est)["gres.conf"]
    checks = doctor_local(est, render_all(est, "variant.yaml"),
                          fake_root(tmp_path, est, missing=("gpu/nvml",)))
    nvml = [c for c in checks if c.id == "doctor.plugin" and c.message.startswith("gpu/nvml ")]
    assert len(nvml) == 1 and not nvml[0].ok
    assert "NVML" in nvml[0].fix and "apt-get" not in nvml[0].fix
