"""The lab driver: spec -> rendered tree -> image -> networks -> Vagrant machines.

`estate lab up` does, in order, each step idempotent and timed:
render (atomic), ssh key and secrets (once, under .lab/), dockerd, the node
image (rebuilt only when its recipe changes), one Docker network per segment,
`vagrant up`, then the roles (estate.provision.apply) and the checks
(estate.verify). `estate lab down` removes every container, network and the
iptables rules Docker made for them, and says if anything was left.

Everything the lab creates is named estate-lab* and labelled estate-lab=1, so it
never touches other tiers on the same host (e.g. the Slurm namespace lab).
"""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from estate import paths
from estate.lab import driver
from estate.lab.driver import LabError
from estate.render.lab import PATH as NODES_PATH
from estate.provision.secrets import LAB_DIR, LAB_SECRETS, LAB_SSH_KEY
from estate.render.lab import MOLECULE_PREFIX, PREFIX, container_name

VAGRANT_STATE = LAB_DIR / "vagrant"
LABEL = f"{PREFIX}=1"


@dataclass
class Timings:
    steps: dict[str, float] = field(default_factory=dict)

    def step(self, name: str, log=print):
        timings = self

        class _Step:
            def __enter__(self):
                self.t0 = time.monotonic()
                log(f"lab: {name} ...")

            def __exit__(self, *exc):
                timings.steps[name] = round(time.monotonic() - self.t0, 2)
        return _Step()

    @property
    def total(self) -> float:
        return round(sum(self.steps.values()), 2)


def run(cmd: list[str], env: dict | None = None, check: bool = True, quiet: bool = False,
        timeout: int = 900) -> subprocess.CompletedProcess:
    proc = driver.run(cmd, env=env, check=check, timeout=timeout)
    if not quiet and proc.stdout and proc.returncode != 0:
        print(proc.stdout)
    return proc


# --- host prerequisites ---------------------------------------------------------------

def ensure_ssh_key() -> Path:
    return driver.ensure_ssh_key(LAB_SSH_KEY, "estate-lab")


def ensure_dockerd() -> None:
    run([str(paths.SCRIPTS / "start-dockerd.sh")])


def ensure_image() -> str:
    """The node image's tag (vagrant/image/build.sh rebuilds only for a new recipe)."""
    out = run([str(paths.VAGRANT / "image" / "build.sh")]).stdout.strip().splitlines()
    return out[-1]


# --- networks ---------------------------------------------------------------------------

def _network(name: str) -> dict | None:
    proc = run(["docker", "network", "inspect", name], check=False, quiet=True)
    return json.loads(proc.stdout)[0] if proc.returncode == 0 else None


def remove_molecule_leftovers() -> None:
    """Molecule's scenarios (vagrant/molecule.sh) take the lab spec's subnets; a run that
    was interrupted leaves its networks behind and Docker then refuses the lab's ("Pool
    overlaps with other one"). Those without containers are leftovers and go; one in use
    means a scenario is running now."""
    ids = run(["docker", "network", "ls", "-q", "--filter", f"label={MOLECULE_PREFIX}=1"],
              quiet=True).stdout.split()
    for net in ids:
        have = _network(net)
        if have and have.get("Containers"):
            raise LabError(f"network {have['Name']} of a molecule scenario is in use (is "
                           f"vagrant/molecule.sh running?): it holds the lab's subnets")
        if have:
            run(["docker", "network", "rm", net], quiet=True)


def ensure_networks(doc: dict) -> list[str]:
    """One internal bridge network per segment, with the segment's CIDR and MTU.

    Internal: lab traffic stays on the lab's bridges (each node also has Docker's
    default bridge as eth0, its way to the Debian mirror, like a VM's NAT NIC).
    """
    remove_molecule_leftovers()
    made = []
    for seg in doc["segments"]:
        have = _network(seg["network"])
        if have:
            subnets = [c.get("Subnet") for c in have["IPAM"]["Config"]]
            if subnets == [seg["cidr"]]:
                continue
            if have.get("Containers"):
                raise LabError(f"network {seg['network']} has subnet {subnets}, the spec says "
                               f"{seg['cidr']}, and machines use it: run `estate lab down` first")
            run(["docker", "network", "rm", seg["network"]])
        run(["docker", "network", "create", "--internal", "--subnet", seg["cidr"],
             "--gateway", seg["gateway"], "--label", LABEL,
             "-o", f"com.docker.network.bridge.name={seg['bridge']}",
             "-o", f"com.docker.network.driver.mtu={seg['mtu']}", seg["network"]])
        made.append(seg["network"])
    return made


# --- vagrant ----------------------------------------------------------------------------

def vagrant_env(render_dir: Path, image: str | None = None) -> dict:
    env = {"VAGRANT_CWD": str(paths.VAGRANT), "VAGRANT_DOTFILE_PATH": str(VAGRANT_STATE),
           "ESTATE_LAB_NODES": str(Path(render_dir).resolve() / NODES_PATH),
           "ESTATE_LAB_SSH_KEY": str(LAB_SSH_KEY), "VAGRANT_DEFAULT_PROVIDER": "docker",
           "VAGRANT_CHECKPOINT_DISABLE": "1", "VAGRANT_NO_COLOR": "1"}
    if image:
        env["ESTATE_LAB_IMAGE"] = image
    return env


def lab_document(render_dir: Path) -> dict:
    path = Path(render_dir) / NODES_PATH
    if not path.is_file():
        raise LabError(f"{path} is missing: the spec was not rendered there, or it has more "
                       "nodes than a lab brings up (estate.render.lab.MAX_NODES)")
    return json.loads(path.read_text())


def started_nodes(doc: dict, only: list[str] | None = None) -> list[dict]:
    return [n for n in doc["nodes"] if (n["name"] in only if only else n["autostart"])]


def running(nodes: list[dict], image: str) -> bool:
    """Every machine's container exists, runs, and runs the current image."""
    names = [n["container"] for n in nodes]
    proc = run(["docker", "inspect", "-f", "{{.State.Running}} {{.Config.Image}}", *names],
               check=False, quiet=True)
    lines = proc.stdout.split("\n")[:len(names)] if proc.returncode == 0 else []
    return len(lines) == len(names) and all(l == f"true {image}" for l in lines)


def not_started(render_dir: Path) -> dict[str, str]:
    """The spec's lab machines whose container does not run, each with why: what `estate
    drift --lab` and verify skip instead of reporting them unreachable."""
    nodes = lab_document(render_dir)["nodes"]
    proc = run(["docker", "ps", "--format", "{{.Names}}", "--filter", f"label={LABEL}"],
               check=False, quiet=True)
    up = set(proc.stdout.split()) if proc.returncode == 0 else set()
    return {n["name"]: ("not started by the lab (the lab starts the Slurm and storage nodes; "
                        f"`estate lab up SPEC --nodes {n['name']}` starts this one)"
                        if not n["autostart"] else "its lab container is not running "
                        "(`estate lab up SPEC` starts it)")
            for n in nodes if n["container"] not in up}


def vagrant_up(render_dir: Path, image: str, names: list[str], log=print) -> None:
    env = vagrant_env(render_dir, image)
    up = ["vagrant", "up", "--provider=docker"]
    if run([*up, "--parallel", *names], env=env, timeout=900, check=False,
           quiet=True).returncode == 0:
        return
    # Vagrant 2.3's docker provider, creating machines in parallel, has recorded one
    # machine's container as another's (nfs1's id was ctl1's container, and nfs1 had none:
    # "docker inspect ... No such object"). Start again from nothing, one machine at a time.
    log("lab: vagrant up --parallel failed; removing its containers and bringing the "
        "machines up one at a time")
    run(["vagrant", "destroy", "-f", *names], env=env, check=False, quiet=True)
    run(["docker", "rm", "-f", *(container_name(n) for n in names)], check=False, quiet=True)
    import shutil
    for name in names:
        shutil.rmtree(VAGRANT_STATE / "machines" / name, ignore_errors=True)
    run([*up, "--no-parallel", *names], env=env, timeout=900)


def wait_for_ssh(nodes: list[dict], timeout: float = 60) -> None:
    """Each machine's sshd answering on its management address (where pyinfra connects)."""
    containers = {n["name"]: n["container"] for n in nodes}
    driver.wait_for_ssh([(n["name"], n["networks"][0]["ip"]) for n in nodes], timeout,
                        why=lambda name: f"(docker logs {containers[name]})")


# --- down -------------------------------------------------------------------------------

def leftovers() -> dict[str, list[str]]:
    """Anything of the lab still on the host: containers, networks, bridges, iptables rules."""
    def lines(cmd):
        proc = run(cmd, check=False, quiet=True)
        return [l for l in proc.stdout.splitlines() if l.strip()] if proc.returncode == 0 else []
    return {
        "containers": lines(["docker", "ps", "-aq", "--filter", f"label={LABEL}"]),
        "networks": [n for n in lines(["docker", "network", "ls", "--format", "{{.Name}}"])
                     if n.startswith(PREFIX)],
        "bridges": [l.split(":")[1].strip() for l in lines(["ip", "-o", "link", "show"])
                    if f" {PREFIX}" in l],
        "iptables": [l for l in lines(["iptables-save"]) if PREFIX in l],
    }


def down(render_dir: Path | None = None, log=print) -> dict[str, list[str]]:
    if run(["docker", "info"], check=False, quiet=True).returncode != 0:
        log("lab: dockerd is not running, so no lab containers or networks exist")
        return leftovers()
    nodes_file = Path(render_dir or "") / NODES_PATH if render_dir else None
    if nodes_file and nodes_file.is_file() and VAGRANT_STATE.exists():
        run(["vagrant", "destroy", "-f"], env=vagrant_env(render_dir), check=False)
    # Whatever Vagrant did not know about (a lost .lab/vagrant, an interrupted up).
    ids = leftovers()["containers"]
    if ids:
        run(["docker", "rm", "-f", *ids])
    for net in leftovers()["networks"]:
        run(["docker", "network", "rm", net])
    if VAGRANT_STATE.exists():
        import shutil
        shutil.rmtree(VAGRANT_STATE / "machines", ignore_errors=True)
    return leftovers()


# --- up ---------------------------------------------------------------------------------

def up(spec: Path, render_dir: Path, only: list[str] | None = None, log=print):
    """Bring the machines up (no provisioning); returns (Build, started nodes, Timings)."""
    from estate.pipeline import render_to
    from estate.provision.secrets import ensure_secrets
    t = Timings()
    with t.step("render", log):
        result = render_to(spec, render_dir)
        doc = lab_document(render_dir)
        nodes = started_nodes(doc, only)
        unknown = set(only or []) - {n["name"] for n in doc["nodes"]}
        if unknown:
            raise LabError(f"no such lab node(s): {', '.join(sorted(unknown))}")
    with t.step("keys and secrets", log):
        ensure_ssh_key()
        ensure_secrets(LAB_SECRETS)
    with t.step("dockerd", log):
        ensure_dockerd()
    with t.step("node image", log):
        image = ensure_image()
    with t.step("networks", log):
        ensure_networks(doc)
    with t.step("vagrant up", log):
        # `vagrant up` on running machines only re-checks them (about 2 s a machine);
        # when Docker already shows each one running the current image, skip it.
        if not running(nodes, image):
            vagrant_up(render_dir, image, [n["name"] for n in nodes], log)
        wait_for_ssh(nodes)
    return result, nodes, t
