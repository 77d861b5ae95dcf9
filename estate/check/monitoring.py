"""Monitoring validators: Prometheus runs on a node of the estate that can reach the
exporters on the segment it scrapes, and Alertmanager's routes name receivers, planes and
tenants its alerts carry (estate.model.monitoring)."""
from __future__ import annotations

from estate.check._common import duplicates, problem, short
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model.flows import flow
from estate.model.monitoring import (ALERT_PLANES, JOBS, NULL_RECEIVER, TENANT_LABELS,
                                     tenants, unmapped_mig_groups)
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING


@validator("monitoring.unknown_host", E, "monitoring",
           "monitoring.host is not a node of the spec")
def unknown_host(estate: Estate) -> Problems:
    mon = estate.spec.monitoring
    if mon and mon.host not in estate.nodes:
        yield problem(("monitoring", "host"), f"monitoring host '{mon.host}' is not a node "
                      "of spec.nodes: nothing would run Prometheus, and no exporter's flow "
                      "would admit a scraper", "name a node of spec.nodes (a controller or a "
                      "node of its own)")


def _segment_known(estate) -> bool:
    return estate.spec.monitoring.segment in {s.name for s in estate.spec.segments}


@validator("monitoring.host_off_segment", E, "monitoring",
           "the monitoring host has no address on the segment it scrapes")
def host_off_segment(estate: Estate) -> Problems:
    mon = estate.spec.monitoring
    if not mon or mon.host not in estate.nodes or not _segment_known(estate):
        return   # unknown_host or network.unknown_segment says so
    if estate.address(mon.host, mon.segment) is None:
        yield problem(("monitoring", "host"), f"monitoring host '{mon.host}' has no address "
                      f"on segment '{mon.segment}': the exporters' flows admit it there only, "
                      "so no scrape would get through",
                      f"add '{mon.segment}: auto' to its group's addresses, or set "
                      "monitoring.segment to one it has")


@validator("monitoring.targets_off_segment", W, "monitoring",
           "exporters on nodes without an address on the monitoring segment are not scraped")
def targets_off_segment(estate: Estate) -> Problems:
    mon = estate.spec.monitoring
    if not mon or not _segment_known(estate):
        return
    for job in JOBS:
        f = flow(estate, job.flow)
        off = [n for n in estate.nodes if f and n in f.to and
               estate.address(n, f.segment) is None]
        if off:
            yield problem(("monitoring", "segment"), f"{short(Hostlist.from_names(off))} "
                          f"have no address on '{f.segment}': Prometheus does not scrape "
                          f"their {job.flow} (job {job.name})",
                          f"give them an address on '{f.segment}', or scrape over a "
                          "segment every node has")


@validator("monitoring.mig_gpu_attribution", W, "monitoring",
           "GPUs with MIG devices on Slurm workers: their utilization is no job's")
def mig_gpu_attribution(estate: Estate) -> Problems:
    groups = unmapped_mig_groups(estate)
    for ci, cls in enumerate(estate.spec.node_classes):
        hosts = Hostlist([r for g in groups if g.spec.node_class == cls.name
                          for r in g.hosts.ranges])
        if not hosts:
            continue
        for ki, gpu in enumerate(cls.gpu_kinds):
            if gpu.mig_profiles:
                at = ("node_classes", ci, "gpus") + ((ki,) if isinstance(cls.gpus, list)
                                                     else ())
                yield problem(at + ("mig_profiles",), f"{short(hosts)} run Slurm jobs on "
                              f"MIG devices of their {gpu.model} GPUs: the DCGM exporter's "
                              "HPC job mapping keys whole GPUs, and Slurm numbers MIG devices "
                              "in its own order, so Estate keeps no job mapping there and "
                              "these GPUs' utilization is attributed to no job and no "
                              "tenant; Slurm's accounting (estate report's sacct side) still "
                              "counts their jobs' GPU-hours, each MIG device as a GPU",
                              "accept it, or give jobs that need per-tenant utilization "
                              "whole GPUs (a class without mig_profiles)")


# --- Alertmanager ----------------------------------------------------------------------------

AM = ("monitoring", "alertmanager")


def _alertmanager(estate):
    mon = estate.spec.monitoring
    return mon.alertmanager if mon else None


@validator("monitoring.alertmanager_duplicate_receiver", E, "monitoring",
           "two Alertmanager receivers have the same name")
def duplicate_receiver(estate: Estate) -> Problems:
    am = _alertmanager(estate)
    for i, r, first in duplicates(am.receivers if am else [], lambda r: r.name):
        yield problem((*AM, "receivers", i, "name"), f"receiver '{r.name}' is defined twice "
                      f"(first as receivers[{first}]): Alertmanager refuses the configuration",
                      "merge their webhooks and emails into one receiver, or rename one")


@validator("monitoring.alertmanager_reserved_receiver", E, "monitoring",
           f"an Alertmanager receiver is named '{NULL_RECEIVER}', Estate's own")
def reserved_receiver(estate: Estate) -> Problems:
    am = _alertmanager(estate)
    for i, r in enumerate(am.receivers if am else []):
        if r.name == NULL_RECEIVER:
            yield problem((*AM, "receivers", i, "name"), f"'{NULL_RECEIVER}' is the receiver "
                          "Estate renders for alerts no route takes (they stay in "
                          "Alertmanager's UI and API)", "give the receiver another name; "
                          "leave alertmanager.receiver out to keep such alerts to Alertmanager")


def _named_receivers(am):
    """(spec path, receiver name) of every reference to a receiver."""
    if am.receiver is not None:
        yield (*AM, "receiver"), am.receiver
    if am.watchdog is not None:
        yield (*AM, "watchdog", "receiver"), am.watchdog.receiver
    for i, route in enumerate(am.routes):
        yield (*AM, "routes", i, "receiver"), route.receiver


@validator("monitoring.alertmanager_unknown_receiver", E, "monitoring",
           "an Alertmanager route or the watchdog names a receiver the spec does not define")
def unknown_receiver(estate: Estate) -> Problems:
    am = _alertmanager(estate)
    if not am:
        return
    known = {r.name for r in am.receivers}
    defined = ", ".join(sorted(known)) or "none"
    for loc, name in _named_receivers(am):
        if name not in known:
            yield problem(loc, f"receiver '{name}' is not one of monitoring.alertmanager."
                          f"receivers ({defined}): Alertmanager refuses a route to an "
                          "undefined receiver",
                          "define it under monitoring.alertmanager.receivers (with its webhooks "
                          "or emails), or name a defined one")


@validator("monitoring.alertmanager_unused_receiver", W, "monitoring",
           "an Alertmanager receiver no route sends to")
def unused_receiver(estate: Estate) -> Problems:
    am = _alertmanager(estate)
    if not am:
        return
    named = {name for _, name in _named_receivers(am)}
    for i, r in enumerate(am.receivers):
        if r.name not in named:
            yield problem((*AM, "receivers", i, "name"), f"no route and not "
                          f"alertmanager.receiver sends to receiver '{r.name}': it never "
                          "gets an alert", "route a plane or tenant to it "
                          "(alertmanager.routes), or remove it")


@validator("monitoring.alertmanager_unknown_plane", E, "monitoring",
           "an Alertmanager route names a plane no alert carries")
def unknown_plane(estate: Estate) -> Problems:
    am = _alertmanager(estate)
    for i, route in enumerate(am.routes if am else []):
        if route.plane not in ALERT_PLANES:
            yield problem((*AM, "routes", i, "plane"), f"plane '{route.plane}' is no alert's "
                          "plane label (an alert's own, or, for ScrapeTargetDown, its "
                          "target's): the route would never match",
                          f"use one of {', '.join(ALERT_PLANES)}")


def _tenant_hint(estate, plane: str) -> str:
    if plane == "kubernetes" and not estate.spec.kubernetes:
        return "the spec has no kubernetes section: remove the route"
    where = {"slurm": "slurm.accounts", "kubernetes": "kubernetes.tenants",
             "storage": "nodes"}.get(plane, "the scrape jobs (" + ", ".join(
                 sorted(tenants(estate, plane))) + ")")
    return f"name one of {where}, or leave tenant out to route the whole plane"


@validator("monitoring.alertmanager_unknown_tenant", E, "monitoring",
           "an Alertmanager route names a tenant its plane's alerts never carry")
def unknown_tenant(estate: Estate) -> Problems:
    am = _alertmanager(estate)
    for i, route in enumerate(am.routes if am else []):
        if route.tenant is None or route.plane not in ALERT_PLANES:
            continue   # the whole plane, or unknown_plane says so
        if route.tenant not in tenants(estate, route.plane):
            label = TENANT_LABELS.get(route.plane, "scrape job or component")
            yield problem((*AM, "routes", i, "tenant"), f"tenant '{route.tenant}' is not a "
                          f"{route.plane} tenant: the {route.plane} alerts' tenant label is "
                          f"their {label}, and no {label} of the spec has this name, so the "
                          "route would never match", _tenant_hint(estate, route.plane))


@validator("monitoring.alertmanager_duplicate_route", E, "monitoring",
           "two Alertmanager routes for the same plane and tenant")
def duplicate_route(estate: Estate) -> Problems:
    am = _alertmanager(estate)
    for i, route, first in duplicates(am.routes if am else [],
                                      lambda r: (r.plane, r.tenant)):
        what = f"tenant '{route.tenant}' of plane" if route.tenant else "the whole plane"
        yield problem((*AM, "routes", i), f"routes[{first}] already routes {what} "
                      f"'{route.plane}' (to '{am.routes[first].receiver}'): Alertmanager "
                      f"takes the first, so this one to '{route.receiver}' never matches",
                      "keep one route; to notify two receivers, give one receiver both "
                      "webhooks or emails")


@validator("monitoring.alertmanager_no_smtp", E, "monitoring",
           "an Alertmanager receiver mails without monitoring.alertmanager.smtp")
def no_smtp(estate: Estate) -> Problems:
    am = _alertmanager(estate)
    if not am or am.smtp:
        return
    for i, r in enumerate(am.receivers):
        if r.emails:
            yield problem((*AM, "receivers", i, "emails"), f"receiver '{r.name}' mails "
                          "alerts, but no relay is set: Alertmanager refuses an email "
                          "receiver without a smarthost and a sender",
                          "set monitoring.alertmanager.smtp: {smarthost: HOST, port: 587, "
                          "sender: alertmanager@DOMAIN}")


@validator("monitoring.alertmanager_repeat_before_interval", W, "monitoring",
           "Alertmanager's repeat interval is shorter than its group interval")
def repeat_before_interval(estate: Estate) -> Problems:
    am = _alertmanager(estate)
    if am and am.repeat_interval_s < am.group_interval_s:
        yield problem((*AM, "repeat_interval_s"), f"repeat_interval_s ({am.repeat_interval_s})"
                      f" is shorter than group_interval_s ({am.group_interval_s}): a group "
                      "is only looked at every group interval, so notifications repeat "
                      "no sooner than that", "make repeat_interval_s at least "
                      "group_interval_s")


@validator("monitoring.watchdog_not_sent", W, "monitoring",
           "Alertmanager sends the Watchdog nowhere: a silent Prometheus goes unnoticed")
def watchdog_not_sent(estate: Estate) -> Problems:
    am = _alertmanager(estate)
    if am and am.receivers and am.watchdog is None:
        yield problem((*AM,), "the always-firing Watchdog alert stays in Alertmanager: if "
                      "Prometheus, its rules or Alertmanager stop, no alert says so, and no "
                      "one outside hears the silence",
                      "set monitoring.alertmanager.watchdog: {receiver: NAME} to a receiver "
                      "whose webhook is a dead man's switch outside the estate")
