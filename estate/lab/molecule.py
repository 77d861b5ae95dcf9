"""molecule scenarios for the roles: generated from the lab spec, converged with pyinfra.

Each role has roles/<role>/molecule/default/ (docker driver, systemd containers from the
lab's node image, the spec's segments and addresses). Its converge and verify playbooks
call this module, which applies the scenario's deploys with estate.provision.apply over
pyinfra's @docker connector and runs the role's testinfra suites over docker://.
molecule's idempotence step then sees a change exactly when pyinfra made one.

    python -m estate.lab.molecule scaffold        # (re)write the scenario files
    python -m estate.lab.molecule list            # the roles that have a scenario
    python -m estate.lab.molecule converge ROLE   # called by converge.yml
    python -m estate.lab.molecule verify ROLE     # called by verify.yml
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from estate import paths
from estate.render.lab import MOLECULE_PREFIX

# A checkout's tool: the playbooks run it from the repository (chdir: repo).
SPEC = paths.work() / "stacks" / "lab.yaml"
RENDER = paths.work() / "build" / "molecule"
PREFIX = MOLECULE_PREFIX
IMAGE = "estate-lab-node:current"

# Deploys each scenario applies per node: the role under test on the node(s) it runs on,
# plus what that needs elsewhere. Nodes are the lab spec's, so rendered files and addresses
# are the real ones. A scenario verifies every role it applies, so roles are grouped by
# the nodes they need rather than given one scenario each: molecule spends ~45 s of Ansible
# per scenario whatever it converges, and the Slurm roles all need the same controller.
# Each role still converges from a bare container with only its dependencies on its node,
# idempotently (tests/unit checks that every container role is covered).
CONTROLLER = ["common", "munge", "slurmdbd", "slurm_controller"]
SCENARIOS: dict[str, dict[str, list[str]]] = {
    "firewall": {"login1": ["common", "firewall"]},
    # the controller and what talks to it: slurmrestd beside it, a worker, a login node
    "slurm_controller": {"ctl1": CONTROLLER + ["slurmrestd"],
                         "gpu1": ["common", "munge", "slurm_worker"],
                         "login1": ["common", "munge", "slurm_login"]},
    "storage": {"nfs1": ["common", "storage"]},
    # containerd on the rendered config; kernel settings and kubelet packages end
    # unsupported in a container without the upstream repository (reported, not passed).
    "k8s_node": {"k8s1": ["common", "k8s_node", "k8s_packages"]},
}


def container(node: str) -> str:
    return f"{PREFIX}-{node}"


def _build():
    from estate.pipeline import render_to
    return render_to(SPEC, RENDER)


# --- scenario files -----------------------------------------------------------------------

def _lab_doc() -> dict:
    from estate.pipeline import build
    from estate.render.lab import lab_document
    return lab_document(build(SPEC).estate)


def molecule_yml(role: str, doc: dict) -> dict:
    nodes = {n["name"]: n for n in doc["nodes"]}
    segs = {s["name"]: s for s in doc["segments"]}
    used = {net["segment"] for name in SCENARIOS[role] for net in nodes[name]["networks"]}
    networks = [{"name": f"{PREFIX}-{s}", "internal": True, "labels": {"estate-mol": "1"},
                 "ipam_config": [{"subnet": segs[s]["cidr"], "gateway": segs[s]["gateway"]}]}
                for s in segs if s in used]
    platforms = []
    for i, name in enumerate(SCENARIOS[role]):
        platform = {
            "name": container(name), "hostname": name, "image": IMAGE, "pre_build_image": True,
            "command": "/sbin/init", "override_command": True, "stop_signal": "SIGRTMIN+3",
            # systemd as PID 1 without --privileged (LAB-NOTES: it fails on these hosts)
            "cgroupns_mode": "host", "volumes": ["/sys/fs/cgroup:/sys/fs/cgroup:rw"],
            "tmpfs": ["/run", "/run/lock"], "capabilities": ["SYS_ADMIN", "NET_ADMIN"],
            "security_opts": ["seccomp=unconfined"],
            # the default bridge first: the node's way to the Debian mirror
            "networks": [{"name": "bridge"}] + [
                {"name": f"{PREFIX}-{net['segment']}", "ipv4_address": net["ip"]}
                for net in nodes[name]["networks"]],
        }
        if i == 0:
            platform["docker_networks"] = networks
        platforms.append(platform)
    return {
        "dependency": {"name": "shell", "command": "true"},
        "driver": {"name": "docker"},
        "platforms": platforms,
        "provisioner": {"name": "ansible", "playbooks": {"converge": "converge.yml",
                                                         "verify": "verify.yml"}},
        "verifier": {"name": "ansible"},
        # No destroy up front (an Ansible run per scenario): vagrant/molecule.sh removes
        # whatever an interrupted run left, once for all scenarios.
        "scenario": {"test_sequence": ["create", "converge", "idempotence", "verify",
                                       "destroy"]},
    }


def playbook(role: str, action: str) -> list:
    task: dict[str, Any] = {
        "name": f"{action.capitalize()} {role} (pyinfra via estate.lab.molecule)",
        "ansible.builtin.command": {
            "cmd": f"{{{{ repo }}}}/.venv/bin/python -m estate.lab.molecule {action} {role}",
            "chdir": "{{ repo }}"},
        "register": "out",
    }
    if action == "converge":
        # pyinfra's own change count decides, so molecule's idempotence step is pyinfra's.
        task["changed_when"] = "(out.stdout_lines | last | from_json).changed > 0"
    else:
        task["changed_when"] = False
    show = {"name": "Report", "ansible.builtin.debug": {"var": "out.stdout_lines"}}
    return [{"name": action.capitalize(), "hosts": "localhost", "connection": "local",
             "gather_facts": False,
             "vars": {"repo": "{{ playbook_dir }}/../../../.."}, "tasks": [task, show]}]


HEADER = "# Generated by `python -m estate.lab.molecule scaffold` from stacks/lab.yaml.\n"


def scenario_files(doc: dict | None = None) -> dict[Path, str]:
    doc = doc or _lab_doc()
    files = {}
    for role in SCENARIOS:
        d = paths.ROLES / role / "molecule" / "default"
        files[d / "molecule.yml"] = HEADER + yaml.safe_dump(molecule_yml(role, doc),
                                                            sort_keys=False)
        for action in ("converge", "verify"):
            files[d / f"{action}.yml"] = HEADER + "---\n" + yaml.safe_dump(
                playbook(role, action), sort_keys=False)
    return files


def scaffold() -> None:
    for path, text in scenario_files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# --- converge and verify ------------------------------------------------------------------

def _targets(role: str):
    """The scenario's nodes with only the scenario's deploys."""
    from dataclasses import replace

    from estate.provision.inventory import load_manifest, targets
    result = _build()
    ts = {t.name: t for t in targets(result.estate, load_manifest(RENDER))}
    return result, [replace(ts[n], deploys=[d for d in ts[n].deploys if d in deploys])
                    for n, deploys in SCENARIOS[role].items()]


def converge(role: str) -> int:
    from dataclasses import replace

    from estate.provision.apply import apply
    from estate.provision.inventory import inventory, runtime_facts
    from estate.provision.secrets import LAB_SECRETS, ensure_secrets
    from estate.provision.kube_pki import ensure_bridge_credentials
    from estate.provision.tls import ensure_tls
    result, ts = _targets(role)
    secrets = ensure_secrets(LAB_SECRETS)
    ensure_tls(secrets, result.estate)
    ensure_bridge_credentials(secrets, result.estate)
    # the docker connector reaches the containers: no SSH settings, no addresses
    ts = [replace(t, address=None) for t in ts]
    inv = inventory(ts, RENDER, secrets, runtime_facts(result.estate), None) \
        .renamed(lambda n: f"@docker/{container(n)}")
    result = apply(inv, log=lambda m: print(m, file=sys.stderr))
    for name, r in result.hosts.items():
        print(f"{name}: {r.status}; changed {r.changed}; failed {r.failed}; "
              f"unsupported {r.unsupported}")
    print(json.dumps({"changed": sum(len(r.changed) for r in result.hosts.values()),
                      "failed": sum(len(r.failed) for r in result.hosts.values()),
                      "unsupported": sum(len(r.unsupported) for r in result.hosts.values())}))
    return 0 if result.ok else 1


def verify(role: str) -> int:
    from estate.provision.inventory import Connection
    from estate.provision.secrets import LAB_SECRETS
    from estate.verify.context import VerifyContext
    from estate.verify.run import run_suites
    result, ts = _targets(role)
    ctx = VerifyContext(result.estate, RENDER, Connection(), RENDER / "verify",
                        secrets_dir=LAB_SECRETS, transport="docker",
                        containers={t.name: container(t.name) for t in ts})
    ctx.__dict__["nodes"] = {t.name: t for t in ts}   # the scenario's deploys only
    deploys = {d for t in ts for d in t.deploys}
    suites = [str(p) for d in sorted(deploys)
              for p in (paths.ROLES / d / "tests").glob("test_*.py")]
    suites.append(str(paths.CHECKS / "test_files.py"))
    report = run_suites(ctx, suites)
    return 0 if report.ok else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["scaffold"]:
        scaffold()
        return 0
    if argv[:1] == ["list"]:
        print("\n".join(SCENARIOS))
        return 0
    if len(argv) == 2 and argv[0] in ("converge", "verify") and argv[1] in SCENARIOS:
        return (converge if argv[0] == "converge" else verify)(argv[1])
    print(f"usage: python -m estate.lab.molecule scaffold | list | converge ROLE | "
          f"verify ROLE"
          f"  (ROLE: {', '.join(SCENARIOS)})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
