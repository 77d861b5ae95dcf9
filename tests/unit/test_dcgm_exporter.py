"""The DCGM exporter on the Slurm GPU workers, validated without GPUs.

What can be proven here is proven with the real tools: systemd 252 verifies the rendered
unit (and refuses a broken one), bookworm's podman 4.3.1 parses its command line up to the
image (which no registry here serves, so nothing runs), and the image and capabilities
are the vendored Kubernetes manifest's, read independently. That the exporter sees the
GPUs and labels them with the jobs needs GPUs and NVIDIA's registry: roles/dcgm_exporter's
suite checks it on real nodes and says "unsupported here" elsewhere (the lab)."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from estate.catalogue import HOST_TOOLS
from estate.model.destinations import destination, installer
from estate.model.flows import matrix
from estate.model.kubernetes import DCGM_MANIFEST
from estate.model.monitoring import JOB_MAP_DIR
from estate.pipeline import build
from estate.provision.inventory import runtime_facts, targets as deploy_targets
from estate.render import dcgm_exporter as dcgm
from estate.render.templates import RenderError, unit_word
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from tests.unit.checkutil import ROOT, spec_dict

UNIT = "estate-dcgm-exporter.service"


@pytest.fixture(scope="module")
def lab():
    result = build(ROOT / "stacks" / "lab.yaml")
    assert result.ok, [f.message for f in result.blocking]
    return result


def _tool(name: str) -> str:
    """Installed by scripts/install-deps.sh (catalogue HOST_TOOLS): missing is a broken
    machine, not a reason to skip."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run scripts/install-deps.sh, which installs "
                    f"Debian's {', '.join(HOST_TOOLS['telemetry'])}")
    return path


def _unit(lab, node: str = "gpu1") -> str:
    """The unit `node` installs."""
    [unit] = [a for p, a in lab.artifacts.items() if p.startswith(dcgm.UNITS)
              and node in a.consumers]
    return unit.content.decode()


def _exec_start(text: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def _upstream_container() -> dict:
    """The vendored manifest's container, read here without the renderer."""
    docs = yaml.safe_load_all((ROOT / DCGM_MANIFEST).read_text())
    [ds] = [d for d in docs if d and d["kind"] == "DaemonSet"]
    [c] = ds["spec"]["template"]["spec"]["containers"]
    return c


# --- one image, one pin -----------------------------------------------------------------

def test_the_image_is_the_vendored_manifests_on_both_planes(lab):
    want = _upstream_container()["image"]
    argv = _exec_start(_unit(lab))
    assert argv.count(want) == 1
    assert runtime_facts(lab.estate)["dcgm_image"] == want   # what the role pulls
    manifest = yaml.safe_load_all(lab.artifacts["kubernetes/manifests/22-dcgm-exporter.yaml"]
                                  .content)
    images = {c["image"] for d in manifest if d and d["kind"] == "DaemonSet"
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {want}


def test_the_capabilities_are_the_manifests(lab):
    caps = _upstream_container()["securityContext"]["capabilities"]
    argv = _exec_start(_unit(lab))
    assert [a for a in argv if a.startswith("--cap-")] == \
        [f"--cap-drop={c}" for c in caps["drop"]] + [f"--cap-add={c}" for c in caps["add"]]
    assert "SYS_ADMIN" in caps["add"] and "--privileged" not in argv


def test_the_exporter_reads_the_job_map_read_only_and_listens_at_the_flows_port(lab):
    argv = _exec_start(_unit(lab, "gpu2"))
    image = argv.index(dcgm.image())
    assert f"--volume={JOB_MAP_DIR}:{JOB_MAP_DIR}:ro" in argv[:image]
    assert "--network=host" in argv[:image] and "--device=nvidia.com/gpu=all" in argv[:image]
    # every address, as the node exporter: the firewall admits the monitoring host alone
    # (test_only_the_monitoring_host_reaches_the_slurm_gpu_workers_exporter)
    assert argv[image + 1:] == ["--address=:9400", f"--hpc-job-mapping-dir={JOB_MAP_DIR}"]
    assert f"RuntimeDirectory={JOB_MAP_DIR.removeprefix('/run/')}\n" in _unit(lab, "gpu2")


# --- the real tools: systemd and podman -----------------------------------------------

def _verify(text: str, tmp: Path) -> subprocess.CompletedProcess:
    (tmp / UNIT).write_text(text)
    return subprocess.run([_tool("systemd-analyze"), "verify", str(tmp / UNIT)],
                          capture_output=True, text=True, timeout=60)


def test_systemd_verifies_the_unit_without_a_warning(lab, tmp_path):
    """systemd-analyze needs ExecStart's program: Debian's podman, installed here as on the
    nodes (HOST_TOOLS)."""
    _tool("podman")
    proc = _verify(_unit(lab), tmp_path)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout == "", proc.stderr


@pytest.mark.parametrize("broken", [("Type=notify", "Type=notfy"),
                                    ("RuntimeDirectory=estate/", "RuntimeDirectory=/run/"),
                                    ("ExecStart=/usr/bin/podman ", "ExecStart=/usr/bin/podmn ")])
def test_systemd_refuses_a_broken_unit(lab, tmp_path, broken):
    """The check can fail: systemd warns (and ignores the line) or refuses."""
    text = _unit(lab)
    assert broken[0] in text
    proc = _verify(text.replace(broken[0], broken[1]), tmp_path)
    assert proc.returncode != 0 or proc.stderr != ""


def _podman(argv: list[str], tmp: Path) -> subprocess.CompletedProcess:
    """podman on a storage of its own (never the machine's; its run root must be shorter
    than 50 characters, so not under pytest's tmp_path; vfs, which mounts nothing, where
    overlay would leave a mount behind), %t and %n as systemd would expand them."""
    own = Path(tempfile.mkdtemp(prefix="estate-pm-"))
    try:
        words = [w.replace("%t", str(tmp)).replace("%n", UNIT) for w in argv]
        isolated = [f"--root={own / 'root'}", f"--runroot={own / 'run'}",
                    f"--tmpdir={own / 'tmp'}", "--storage-driver=vfs",
                    "--events-backend=none"]
        return subprocess.run([_tool("podman"), *isolated, *words[1:]], capture_output=True,
                              text=True, timeout=120)
    finally:
        shutil.rmtree(own, ignore_errors=True)


def test_podman_parses_the_command_line_up_to_the_image(lab, tmp_path):
    """Every option is podman 4.3.1's and takes its value; the run then stops where it
    needs the image, which --pull=never does not fetch (and no registry is reachable)."""
    argv = _exec_start(_unit(lab))
    assert argv[0] == dcgm.PODMAN and argv[1] == "run"
    proc = _podman(argv, tmp_path)
    assert proc.returncode == 125, proc.stderr
    assert proc.stderr.strip() == f"Error: {dcgm.image()}: image not known", proc.stderr


def test_podman_refuses_an_option_it_does_not_have(lab, tmp_path):
    argv = _exec_start(_unit(lab))
    """The check can fail: the exporter's own option on podman's side of the image."""
    proc = _podman(argv[:2] + [f"--hpc-job-mapping-dir={JOB_MAP_DIR}"] + argv[2:], tmp_path)
    assert proc.returncode == 125, proc.stderr
    assert "unknown flag: --hpc-job-mapping-dir" in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", ["ExecStop", "ExecStopPost"])
def test_podman_knows_the_stop_options(lab, command):
    line = next(x for x in _unit(lab).splitlines() if x.startswith(f"{command}="))
    argv = shlex.split(line.split("=", 1)[1])
    help_text = subprocess.run([_tool("podman"), argv[1], "--help"], capture_output=True,
                               text=True, timeout=60).stdout
    for word in argv[2:]:
        option = word.split("=", 1)[0]
        assert f" {option} " in help_text, (command, option)


# --- where it runs, who installs it, who may reach it ----------------------------------

def test_one_unit_for_the_slurm_gpu_workers_installed_by_their_role(lab):
    units = {p: a for p, a in lab.artifacts.items() if p.startswith(dcgm.UNITS)}
    assert {p: str(a.consumers) for p, a in units.items()} == {dcgm.UNIT: "gpu[1-2]"}
    assert destination(dcgm.UNIT) == f"/etc/systemd/system/{UNIT}"
    deploys = {t.name: t.deploys for t in deploy_targets(lab.estate, lab.artifacts.manifest())}
    assert [n for n, d in deploys.items() if "dcgm_exporter" in d] == ["gpu1", "gpu2"]
    assert installer(dcgm.UNIT, deploys["gpu1"]) == "dcgm_exporter"


def test_only_the_monitoring_host_reaches_the_slurm_gpu_workers_exporter(lab):
    est, m = lab.estate, matrix(lab.estate)
    for worker in ("gpu1", "gpu2"):
        assert m.allows("ctl1", worker, "tcp", 9400, "management").name == "dcgm-exporter"
        # the other workers only as job traffic (any unprivileged port: docs/jobs.md)
        assert {n: f.name for n in est.nodes if n not in ("ctl1", worker)
                and (f := m.allows(n, worker, "tcp", 9400, "management"))} == {
            n: "job-tcp" for n in ("gpu1", "gpu2") if n != worker}
    nft = lab.artifacts["network/nftables/group-002.nft"]
    assert "gpu1" in nft.consumers
    assert 'ip saddr { 10.60.0.11 } tcp dport 9400 counter accept comment "dcgm-exporter"' \
        in nft.content.decode()


def test_without_monitoring_no_slurm_exporter_and_no_opening():
    data = spec_dict("lab")
    del data["monitoring"]
    est = Estate(load_text(yaml.safe_dump(data), "t.yaml").spec)
    assert dcgm.render_dcgm_exporter(est) == []
    assert "dcgm_image" not in runtime_facts(est)
    flows = {f.name: f for f in matrix(est).flows}
    assert "dcgm-exporter" not in flows or not {"gpu1", "gpu2"} & flows["dcgm-exporter"].to


# --- systemd's quoting ---------------------------------------------------------------------

def test_unit_words_read_back_as_themselves():
    assert unit_word("--address=10.0.0.1:9400") == "--address=10.0.0.1:9400"
    assert unit_word("a b") == '"a b"'
    assert unit_word('50% of "$HOME"\\') == '"50%% of \\"$$HOME\\"\\\\"'
    with pytest.raises(RenderError):
        unit_word("x\nExecStartPre=/bin/rm -rf /")


# --- where the role says "unsupported here" ------------------------------------------------

def test_unsupported_looks_for_the_driver_before_any_network_probe(lab):
    """The role's (and its suite's) reasons, from what the node's shell answers: without a
    driver (the lab's GPU workers) that is the one reason, and no outside host is
    contacted; with a driver and nothing reachable, the repository and the registry."""
    from roles.dcgm_exporter.tasks import DRIVER, problems
    image = runtime_facts(lab.estate)["dcgm_image"]
    asked = []

    def nothing(command: str) -> str:
        asked.append(command)
        return ""
    found = problems(nothing, image)
    assert len(found) == 1 and found[0].startswith(
        f"no NVIDIA driver is loaded ({DRIVER} is missing)")
    assert len(asked) == 1 and DRIVER in asked[0]
    assert not any("nvidia.github.io" in c or "nvcr.io" in c for c in asked)

    def driver_only(command: str) -> str:
        return "ok" if DRIVER in command else ""
    found = problems(driver_only, image)
    assert [p.split(" (")[0] for p in found] == ["cannot reach nvidia.github.io:443",
                                                 "cannot reach nvcr.io:443"]
    assert problems(lambda command: "ok", image) == []
