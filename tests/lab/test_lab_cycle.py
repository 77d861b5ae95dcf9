"""The lab for real: `estate lab up` from stacks/lab.yaml through Vagrant (docker
provider), provisioned cold by the Pulumi program's graph run without the engine
(`estate pulumi dry-run lab`: every node's step command in dependency order, the
Kubernetes nodes too), a second run of that graph and a second apply that change nothing, `estate verify`, a spec change that
reaches slurmctld, drift repaired, faults that heal (an apply killed half-way is finished
by the next, a node that cannot be reached is named while the others converge), and
`estate lab down` leaving nothing behind.

Needs root, dockerd (started if absent), debootstrap and vagrant (make deps). It
takes the lab over: a lab already up is reused, and it is removed at the end.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from estate.render.lab import container_name
from tests.lab import drift_case
from tests.lab.lab_commands import ESTATE, OUT, ROOT, SPEC, SSH, estate

pytestmark = pytest.mark.lab

NODES = "ctl1,login1,gpu[1-2],nfs1"
# The Kubernetes nodes are not started by default (no kubeadm in any reachable registry);
# the Pulumi graph runs on them too, where their roles end at "unsupported here".
ALL_NODES = NODES + ",k8s[1-2]"
# the last step keeps the tree the run applied: the next run's workers restart in the
# batches of a diff against it (estate.pulumi.plan.restart_batches)
STEPS = ["node-nfs1", "node-ctl1", "node-login1", "node-gpu1", "node-gpu2", "node-k8s1",
         "node-k8s2", "join-token-revoke", "applied-tree"]


def on(node_addr: str, command: str) -> str:
    return subprocess.run([*SSH, f"root@{node_addr}", command], text=True,
                          capture_output=True, timeout=120, check=True).stdout


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (dockerd, iptables)")
    missing = [t for t in ("dockerd", "docker", "vagrant", "debootstrap") if not shutil.which(t)]
    if missing:
        pytest.skip(f"the lab needs {', '.join(missing)}: run `make deps`")
    tmp = tmp_path_factory.mktemp("lab")
    # The machines only: the first provisioning is the Pulumi graph's, cold.
    estate("lab", "up", SPEC, "-o", OUT, "--nodes", ALL_NODES, "--no-provision",
           "--no-verify", "--report", str(tmp / "up.json"))
    cold = dry_run(tmp / "cold.json")
    yield {"dry_run": cold, "apply": apply_json(tmp)}
    estate("lab", "down", "-o", OUT)


def dry_run(path: Path) -> dict:
    """`pulumi up`'s graph without the engine; the report even when a step failed."""
    proc = estate("pulumi", "dry-run", "lab", "--json", str(path), check=False)
    if not path.is_file():
        pytest.fail(f"estate pulumi dry-run lab wrote no report:\n{proc.stderr[-3000:]}")
    return json.loads(path.read_text())


def steps_of(report: dict) -> dict[str, dict]:
    return {s["name"]: s for s in report["steps"]}


def test_the_pulumi_graph_converges_the_lab_from_cold(lab):
    report = lab["dry_run"]
    steps = steps_of(report)
    assert report["ok"], {n: s["summary"] for n, s in steps.items() if s["outcome"] != "ok"}
    assert list(steps) == STEPS
    for node in ("nfs1", "ctl1", "login1", "gpu1", "gpu2", "k8s1", "k8s2"):
        out = steps[f"node-{node}"]["outputs"]
        assert out["ok"] and out["changed"] > 0, out   # cold: every node had work to do
    # Slurm converges; storage is the only thing a container cannot do there, besides the
    # DCGM exporter on the GPU workers (no NVIDIA driver), and the lab stack accepts both
    # (stacks/Pulumi.lab.yaml), so the steps succeed and say so.
    assert steps["node-ctl1"]["outputs"]["status"] == "changed"
    for node, roles in (("nfs1", ["storage"]), ("login1", ["storage"]),
                        ("gpu1", ["dcgm_exporter", "storage"]),
                        ("gpu2", ["dcgm_exporter", "storage"])):
        accepted = steps[f"node-{node}"]["outputs"]["accepted_unsupported"]
        assert [a.split(": ")[1] for a in accepted] == roles, accepted
    # The Kubernetes nodes end at "unsupported here" with the reason: no kubeadm.
    for node, role in (("k8s1", "k8s_control_plane"), ("k8s2", "k8s_worker")):
        out = steps[f"node-{node}"]["outputs"]
        assert out["status"] == "unsupported"
        assert any(u.startswith(f"{role}: ") and "kubeadm" in u for u in out["unsupported"]), out
    # No control plane handed out a token, so there is none to revoke.
    assert steps["join-token-revoke"]["outputs"]["revoked"] is None
    from estate.pulumi.dryrun import APPLIED
    assert (ROOT / APPLIED.format(stack="lab") / "MANIFEST.json").is_file()


def test_a_second_run_of_the_pulumi_graph_changes_nothing(lab, tmp_path):
    report = dry_run(tmp_path / "again.json")
    steps = steps_of(report)
    assert report["ok"], {n: s["summary"] for n, s in steps.items() if s["outcome"] != "ok"}
    assert {n: s["outputs"]["changed"] for n, s in steps.items()
            if s["outputs"].get("changed")} == {}


def test_an_unsupported_role_the_stack_does_not_accept_fails_its_step(lab):
    """What `pulumi up` shows on a stack that accepts only storage: k8s2's step fails,
    naming each unsupported role and why."""
    proc = estate("pulumi", "step", SPEC, "k8s2", "--lab", "--accept-unsupported", "storage",
                  check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "unsupported here: k8s_worker: " in proc.stderr
    assert "estate:acceptUnsupported: [k8s_worker]" in proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["ok"] is False


def apply_json(tmp: Path, *extra) -> dict:
    out = tmp / "apply.json"
    estate("apply", SPEC, "-o", OUT, "--lab", "--limit", NODES, "--json", str(out), *extra)
    return json.loads(out.read_text())


def test_every_node_is_provisioned_and_apply_agrees(lab):
    hosts = lab["apply"]["hosts"]
    assert set(hosts) == {"ctl1", "login1", "gpu1", "gpu2", "nfs1"}
    assert not {h: r["failed"] for h, r in hosts.items() if r["failed"]}
    # storage is reported, not hidden: this kernel has no NFS server (nfs1) or client
    # (the nodes that mount /home/shared); the GPU workers' DCGM exporter has no NVIDIA
    # driver (nor NVIDIA's repository); nothing else is unsupported
    assert {h for h, r in hosts.items() if r["status"] == "unsupported"} == \
        {"nfs1", "login1", "gpu1", "gpu2"}
    assert "no NFS server" in hosts["nfs1"]["unsupported"][0]
    for gpu in ("gpu1", "gpu2"):
        assert [u.split(":")[0] for u in hosts[gpu]["unsupported"]] == \
            ["dcgm_exporter", "storage"], hosts[gpu]["unsupported"]
        assert "no NVIDIA driver" in hosts[gpu]["unsupported"][0]
        assert "no NFS client" in hosts[gpu]["unsupported"][1]


def test_second_run_changes_nothing(lab, tmp_path):
    result = apply_json(tmp_path)
    assert {h: r["changed"] for h, r in result["hosts"].items() if r["changed"]} == {}


def test_keys_appear_in_no_output_or_rendered_file(lab, tmp_path):
    import base64
    proc = estate("apply", SPEC, "-o", OUT, "--lab", "--limit", NODES)
    seen = proc.stdout + proc.stderr + (tmp_path / "x").as_posix()
    rendered = b"".join(p.read_bytes() for p in (ROOT / OUT).rglob("*") if p.is_file())
    for name in ("munge.key", "jwt_hs256.key"):
        key = (ROOT / ".lab/secrets" / name).read_bytes()
        for form in (key.hex(), base64.b64encode(key).decode()):
            assert form not in seen
        assert key not in rendered and key.hex().encode() not in rendered


def test_verify_passes_and_names_what_is_unsupported(lab, tmp_path):
    proc = estate("verify", SPEC, "-o", OUT, "--lab", "--limit", NODES, "--drills",
                  "--report-dir", str(tmp_path))
    report = json.loads((tmp_path / "verify.json").read_text())
    assert report["ok"], proc.stdout[-3000:]
    failed = [r for r in report["results"] if r["outcome"] == "failed"]
    assert failed == []
    unsupported = {(r["node"], r["role"], r["check"].split(":")[0]) for r in report["results"]
                   if r["outcome"] == "unsupported"}
    nodes = ("ctl1", "login1", "gpu1", "gpu2", "nfs1")
    # only four things are unsupported in containers: setting the clock, NFS (every
    # storage check on the NFS server and its clients, the installed files included), the
    # DCGM exporter on the GPU workers (no NVIDIA driver: its checks, its unit file, and
    # its scrape targets, named by the monitoring host) and the scrape targets of the
    # Kubernetes nodes, which the container lab does not check
    targets_named = ("the_targets_of_nodes_not_checked",
                     "the_targets_whose_exporter_cannot_run_here")
    # and the NFS drill, which stops the storage server's kernel NFS (none in containers)
    nfs_drill = ("nfs1", "cluster", "drill_the_nfs_server_stops_and_the_storage_alert_pages")
    assert nfs_drill in unsupported
    unsupported.discard(nfs_drill)
    assert {(n, role) for n, role, check in unsupported
            if (role, check) not in {("common", "time_sync")} |
            {("cluster", t) for t in targets_named}} == \
        {(n, "storage") for n in ("nfs1", "login1", "gpu1", "gpu2")} | \
        {(n, "dcgm_exporter") for n in ("gpu1", "gpu2")}
    for named in targets_named:
        assert ("ctl1", "cluster", named) in unsupported
    dcgm = next(r for r in report["results"]
                if r["check"].startswith("the_targets_whose_exporter_cannot_run_here"))
    assert "dcgm/gpu1" in dcgm["detail"] and "dcgm/gpu2" in dcgm["detail"], dcgm
    assert {(n, "common", "time_sync") for n in nodes} <= unsupported
    assert not [r for r in report["results"] if r["role"] == "storage"
                and r["outcome"] != "unsupported"]
    checks = {(r["role"], r["check"]) for r in report["results"] if r["outcome"] == "passed"}
    for want in [("cluster", "slurm_view_matches_spec"), ("cluster", "gpu_job"),
                 ("cluster", "job_across_two_workers"), ("cluster", "rest_api_takes_a_jwt"),
                 ("munge", "key_is_the_estates"),
                 ("slurmrestd", "slurmrestd_listens_on_loopback_and_the_front_on_its_segment"),
                 ("cluster", "every_scrape_target_of_the_nodes_checked_is_up"),
                 ("cluster", "a_running_job_shows_under_its_account_and_partition_then_in_"
                             "the_report"),
                 ("cluster", "alertmanager_is_ready_and_prometheus_sends_it_the_alerts"),
                 ("cluster", "alertmanager_routes_each_alert_to_the_specs_receiver"),
                 ("cluster", "the_rendered_rules_run_on_the_live_series_and_no_alert_fires"),
                 ("monitoring", "alertmanager_runs_on_a_valid_configuration"),
                 ("monitoring", "alertmanager_listens_on_the_monitoring_segment_only_with_no_"
                                "cluster_port"),
                 ("firewall", "input_denies_by_default"),
                 ("cluster", "rest_api_reach_follows_the_flows"),
                 # the users' side (estate/verify/checks/test_users.py)
                 ("cluster", "a_batch_job_runs_srun_steps_on_two_nodes"),
                 ("cluster", "two_steps_with_one_gpu_each"),
                 ("cluster", "a_job_array_completes"),
                 ("cluster", "a_job_opens_its_own_gpu_and_not_the_other"),
                 ("cluster", "a_step_over_its_memory_ends_out_of_memory"),
                 ("cluster", "tasks_are_bound_to_their_cores_and_accounted"),
                 ("cluster", "every_node_of_a_job_runs_the_prolog"),
                 # jobs that span nodes (estate/verify/checks/test_jobs.py)
                 ("cluster", "a_batch_jobs_ranks_reach_each_other"),
                 ("cluster", "an_open_mpi_job_over_tcp_from_a_login_node"),
                 ("cluster", "a_workers_job_port_is_dropped_from_here"),
                 # the acceptance suite's quick part (ReFrame) and the incident drills
                 ("cluster", "reframe_quick_suite_passes"),
                 ("cluster", "a_check_broken_on_purpose_fails_the_suite"),
                 ("cluster", "drill_the_slurm_exporter_stops_pages_and_resolves"),
                 ("cluster", "drill_a_job_held_pending_fires_the_queue_delay")]:
        assert want in checks
    # the reachability matrix with the firewall on: every designed flow between the nodes
    # succeeds, every undesigned one fails (each node's probes are a check of its own)
    reach = report["reachability"]
    assert reach["violations"] == [], reach["violations"][:20]
    assert reach["designed_ok"] > 0 and reach["denied_ok"] > 0
    assert {r["node"] for r in report["results"] if r["check"] == "reachability"
            and r["outcome"] == "passed"} == set(nodes)
    assert "designed ok" in proc.stdout and "0 violations" in proc.stdout
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert int(suite.find("testsuite").get("tests")) == len(report["results"])


def test_the_status_pages_render_in_headless_chromium(lab, tmp_path):
    """Each plane's status page, as the lab's own Prometheus serves it, loaded by Debian's
    headless Chromium: the DOM it built shows the Watchdog firing, the spec's tenants with
    what they are entitled to and every NFS export; the screenshot is a drawn page."""
    from estate.model.entitlement import entitled_gpus
    from estate.model.services import PORTS
    from estate.pipeline import build
    from estate.render import consoles, monitoring
    from tests.lab import browser
    from tests.unit.test_status_page import Tables
    assert browser.available(), "no headless Chromium: `make test-deps` installs it"
    estate_ = build(ROOT / SPEC).estate
    mon = estate_.spec.monitoring
    base = f"http://{estate_.address(mon.host, mon.segment)}:{PORTS['prometheus']}"
    entitled = entitled_gpus(estate_)
    exports = {e for e, _, _ in monitoring.nfs_exports(estate_)}
    for plane in consoles.planes(estate_):
        url = f"{base}/consoles/estate-{plane}.html"
        page = Tables()
        page.feed(browser.dom(url, home=tmp_path))
        assert page.texts.get("watchdog") == \
            "Watchdog firing: Prometheus evaluates its rules.", (plane, page.texts)
        assert page.tables["alerts"][0][:2] == ["Alert", "Cause"], page.tables["alerts"][0]
        assert {r[0]: r[2] for r in page.tables["allocation"][1:]} == \
            {t: f"{g:g}" for t, g in entitled[plane].items()}, (plane, page.tables)
        assert {r[0] for r in page.tables["exports"][1:]} == exports
        shot = browser.screenshot(url, tmp_path / f"{plane}.png", home=tmp_path)
        width, height, drawn = browser.drawn_rows(shot)
        assert (width, height) == (1280, 1600)
        assert drawn > 150, f"{plane}: only {drawn} rows of the screenshot are drawn"


def test_a_spec_change_reaches_slurmctld_and_is_undone(lab, tmp_path):
    spec = yaml.safe_load((ROOT / SPEC).read_text())
    spec["slurm"]["partitions"][0]["max_time"] = "2-00:00:00"
    changed = tmp_path / "lab.yaml"
    changed.write_text(yaml.safe_dump(spec))
    out = tmp_path / "apply.json"
    estate("apply", str(changed), "-o", str(tmp_path / "render"), "--lab", "--limit", NODES,
           "--json", str(out))
    result = json.loads(out.read_text())
    assert "slurmctld on the current configs" in result["hosts"]["ctl1"]["changed"]
    assert "MaxTime=2-00:00:00" in on("10.60.0.11", "scontrol show partition gpu")
    back = apply_json(tmp_path)
    assert "slurmctld on the current configs" in back["hosts"]["ctl1"]["changed"]
    assert "MaxTime=1-00:00:00" in on("10.60.0.11", "scontrol show partition gpu")


def test_drift_is_repaired_and_reported(lab, tmp_path):
    on("10.60.0.13", "echo '# drift' >> /etc/slurm/cgroup.conf && rm -f /dev/nvidia1")
    result = apply_json(tmp_path)
    changed = result["hosts"]["gpu1"]["changed"]
    assert "Install slurm/cgroup.conf -> /etc/slurm/cgroup.conf" in changed
    assert "GPU device files" in changed
    assert "character special file c3:1" in on("10.60.0.13",
                                               "stat -c '%F %t:%T' /dev/nvidia1")
    assert {h: r["changed"] for h, r in apply_json(tmp_path)["hosts"].items()
            if r["changed"]} == {}


STAMPS = "/var/lib/estate/applied"   # roles/_lib: the digest each daemon last started on
CTL, GPU1 = "10.60.0.11", "10.60.0.13"


def changes(result: dict) -> dict:
    return {h: r["changed"] for h, r in result["hosts"].items() if r["changed"]}


def test_an_apply_killed_half_way_is_finished_by_the_next(lab, tmp_path):
    """Work in three phases (slurmctld's and slurmd's stamps gone, gpu1's cgroup.conf
    drifted); the apply is killed (SIGKILL, its whole process group) as soon as it has
    repaired gpu1's file, before it can have finished gpu1. The next apply converges,
    restarting slurmd if the killed one had not, and a third changes nothing."""
    on(CTL, f"rm -f {STAMPS}/slurmctld")
    on(GPU1, f"echo '# drift' >> /etc/slurm/cgroup.conf && rm -f {STAMPS}/slurmd")
    proc = subprocess.Popen([ESTATE, "apply", SPEC, "-o", OUT, "--lab", "--limit", NODES],
                            cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "COLUMNS": "160"})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()
    seen, deadline = [], time.monotonic() + 600
    try:
        while not any("apply: phase compute" in x for x in seen):
            assert proc.poll() is None and time.monotonic() < deadline, seen
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                pass
        while "# drift" in on(GPU1, "cat /etc/slurm/cgroup.conf"):
            assert proc.poll() is None and time.monotonic() < deadline, seen
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # a restart already sent to gpu1 finishes there without its client: let it end
    # ([/]: the pattern must not match this loop's own command line)
    on(GPU1, f"for i in $(seq 60); do pgrep -f '[/]{STAMPS[1:]}' >/dev/null || exit 0; "
             f"sleep 0.5; done; exit 1")
    restarted = on(GPU1, f"cat {STAMPS}/slurmd 2>/dev/null || true").strip() != ""
    second = apply_json(tmp_path)
    assert not {h: r["failed"] for h, r in second["hosts"].items() if r["failed"]}
    assert "slurmctld on the current configs" not in second["hosts"]["ctl1"]["changed"]
    assert ("slurmd on the current settings" in second["hosts"]["gpu1"]["changed"]) \
        is not restarted, second["hosts"]["gpu1"]
    assert changes(apply_json(tmp_path)) == {}
    assert "idle" in on(CTL, "sinfo -h -n gpu1 -o %T")


def test_a_node_that_cannot_be_reached_is_named_and_the_others_converge(lab, tmp_path):
    """gpu2's machine is stopped: apply exits 1 naming it unreachable, every other node
    still converges. Started again, the next apply brings gpu2 back."""
    subprocess.run(["docker", "stop", container_name("gpu2")], check=True, timeout=120,
                   capture_output=True)
    try:
        out = tmp_path / "apply.json"
        proc = estate("apply", SPEC, "-o", OUT, "--lab", "--limit", NODES, "--json", str(out),
                      check=False)
        result = json.loads(out.read_text())
        assert proc.returncode == 1, proc.stdout[-2000:]
        gpu2 = result["hosts"].pop("gpu2")
        assert gpu2["status"] == "failed"
        assert gpu2["failed"] == ["connect: cannot reach gpu2 (10.60.0.14)"], gpu2
        assert {h: r["failed"] for h, r in result["hosts"].items() if r["failed"]} == {}
        assert set(result["hosts"]) == {"ctl1", "login1", "gpu1", "nfs1"}
        assert "gpu2" in proc.stdout and "cannot reach gpu2" in proc.stdout
    finally:
        subprocess.run(["docker", "start", container_name("gpu2")], check=True, timeout=120,
                       capture_output=True)
    deadline = time.monotonic() + 60
    while subprocess.run([*SSH, "root@10.60.0.14", "true"], timeout=30).returncode:
        assert time.monotonic() < deadline, "gpu2 does not answer ssh after docker start"
        time.sleep(1)
    back = apply_json(tmp_path)
    assert {h: r["failed"] for h, r in back["hosts"].items() if r["failed"]} == {}


def test_estate_drift_names_three_changes_and_none_after_apply(lab, tmp_path):
    """estate drift (tests/lab/drift_case.py), on this module's provisioned lab."""
    drift_case.check(tmp_path)


def test_down_leaves_nothing_behind(lab):
    estate("lab", "down", "-o", OUT)
    status = estate("lab", "status").stdout
    for kind in ("containers", "networks", "bridges", "iptables"):
        assert f"{kind}: 0" in status, status
    listing = subprocess.run(["iptables-save"], text=True, capture_output=True).stdout
    assert "estate-lab" not in listing
    # the machines never had host port forwards (Vagrant reaches them on their own IPs)
    assert not [l for l in listing.splitlines() if "DNAT" in l and l.endswith(":22")]
