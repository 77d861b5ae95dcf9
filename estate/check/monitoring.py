"""Monitoring validators: Prometheus runs on a node of the estate that can reach the
exporters on the segment it scrapes (estate.model.monitoring)."""
from __future__ import annotations

from estate.check._common import problem, short
from estate.check.findings import Severity
from estate.check.registry import validator
from estate.model.flows import flow
from estate.model.monitoring import JOBS
from estate.spec.hostlist import Hostlist

E, W = Severity.ERROR, Severity.WARNING


@validator("monitoring.unknown_host", E, "monitoring",
           "monitoring.host is not a node of the spec")
def unknown_host(estate):
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
def host_off_segment(estate):
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
def targets_off_segment(estate):
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
