"""An HA control plane, checked on the rendered files: the VIP kube-vip announces is the
spec's and kubeadm's controlPlaneEndpoint, kube-vip's static pod passes the strict Pod
schema, and every control plane has its etcd snapshot and certificate renewal timers, the
renewal well within kubeadm's one-year certificates."""
from __future__ import annotations

from typing import TYPE_CHECKING

from estate.check.kubernetes_schema import _dicts, parse_error, validate_object
from estate.check.registry import ArtifactContext, Problem, Problems, validator
from estate.findings import Severity
from estate.model import kubernetes as k8s
from estate.spec.hostlist import Hostlist

if TYPE_CHECKING:
    import configparser

E = Severity.ERROR
INIT = "kubernetes/kubeadm/init.yaml"


def _endpoint_host(ctx) -> str | None:
    a = ctx.artifacts.get(INIT)
    conf = next((d for d in _dicts(a) if d.get("kind") == "ClusterConfiguration"), None) \
        if a else None
    endpoint = str((conf or {}).get("controlPlaneEndpoint", ""))
    return endpoint.rpartition(":")[0] or None


def _vip_of(pod: dict) -> str | None:
    for c in pod.get("spec", {}).get("containers", []):
        for e in c.get("env", []):
            if e.get("name") in ("address", "vip_address"):
                return str(e.get("value"))
    return None


@validator("kubernetes.api_vip_mismatch", E, "kubernetes",
           "kube-vip's VIP is not the spec's and kubeadm's endpoint, or its pod is invalid",
           stage="artifacts")
def api_vip_mismatch(ctx: ArtifactContext) -> Problems:
    plane = ctx.estate.spec.kubernetes
    if not plane or not plane.api_vip:
        return
    vip, hint = str(plane.api_vip), "re-render: the rendered files disagree with the spec"
    if (host := _endpoint_host(ctx)) != vip:
        yield Problem(INIT, f"controlPlaneEndpoint's host is {host}, not the API VIP {vip} "
                      "(kubernetes.api_vip): nodes would join through one control plane", hint)
    cps = {n.name for n in k8s.control_planes(ctx.estate)}
    for path in (k8s.KUBE_VIP_PATH, k8s.KUBE_VIP_INIT_PATH):
        a = ctx.artifacts.get(path)
        if a is None:
            yield Problem(path, f"no kube-vip manifest: nothing holds the VIP {vip}", hint)
            continue
        if err := parse_error(a):
            yield Problem(path, f"the rendered file is not valid YAML: {err}", hint)
            continue
        missing = sorted(cps - set(a.consumers)) if path == k8s.KUBE_VIP_PATH else []
        if missing:
            yield Problem(path, f"control planes {', '.join(missing)} run no kube-vip: the "
                          "VIP cannot move to them", hint)
        for pod in _dicts(a):
            for err in validate_object(pod, plane.version):
                yield Problem(path, f"kube-vip Pod: {err}", "fix the renderer (kube_vip_pod)")
            if (got := _vip_of(pod)) != vip:
                yield Problem(path, f"kube-vip announces {got}, not the API VIP {vip}", hint)


def _unit(content: bytes) -> configparser.ConfigParser:
    import configparser   # only for an HA Kubernetes plane: not on every command's start
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str   # type: ignore[method-assign,assignment]  # keys as written
    parser.read_string(content.decode())
    return parser


@validator("kubernetes.control_plane_timers", E, "kubernetes",
           "a control plane without its etcd snapshot or certificate renewal timer, or a "
           "renewal sparser than kubeadm's one-year certificates allow", stage="artifacts")
def control_plane_timers(ctx: ArtifactContext) -> Problems:
    if not ctx.estate.spec.kubernetes:
        return
    cps = Hostlist.from_names(n.name for n in k8s.control_planes(ctx.estate))
    for name in k8s.TIMERS:
        for path in (k8s.SYSTEMD_UNITS + k8s.timer_unit(name),
                     k8s.SYSTEMD_UNITS + k8s.service_unit(name), f"{k8s.SBIN}estate-{name}"):
            a = ctx.artifacts.get(path)
            missing = sorted(set(cps) - set(a.consumers)) if a else list(cps)
            if missing:
                yield Problem(path, f"control planes {', '.join(missing[:5])} do not get "
                              f"{path.rsplit('/', 1)[-1]}",
                              "re-render (build_control_plane_timers)")
        timer = ctx.artifacts.get(k8s.SYSTEMD_UNITS + k8s.timer_unit(name))
        if timer is not None:
            yield from _schedule_problems(timer, name)


def _schedule_problems(timer, name: str):
    import configparser
    try:
        calendar = _unit(timer.content).get("Timer", "OnCalendar", fallback=None)
    except configparser.Error as err:
        yield Problem(timer.path, f"not a systemd unit: {err}", "re-render")
        return
    if calendar is None:
        yield Problem(timer.path, "the timer has no OnCalendar=", "re-render")
        return
    days = k8s.CALENDAR_DAYS.get(calendar.strip())
    if name == "cert-renew" and (days is None or days > k8s.CERT_RENEW_MAX_DAYS):
        gap = f"every {days} days" if days else f"on '{calendar}', which Estate cannot bound"
        yield Problem(timer.path, f"certificate renewal runs {gap}: kubeadm's certificates "
                      f"expire after {k8s.CERT_VALIDITY_DAYS} days and renewal must come well "
                      f"before (at most every {k8s.CERT_RENEW_MAX_DAYS} days)",
                      f"OnCalendar={k8s.CERT_RENEW_SCHEDULE}, as rendered")
