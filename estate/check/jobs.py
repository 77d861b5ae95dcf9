"""Job traffic validators (docs/jobs.md): a narrowing the site's launchers can live with,
NICs that name real segments, the jobs' NIC on the fabric declared, and connection
tracking sized where job traffic stays tracked (estate.model.jobs derives the facts)."""
from __future__ import annotations

from estate.check._common import problem, short
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model import jobs
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING


@validator("jobs.narrowing_launcher", E, "jobs",
           "firewall.jobs.ports narrows job traffic to ports a named launcher cannot live "
           "with (NCCL cannot pin its ports; Open MPI needs a port per rank)")
def narrowing_launcher(estate: Estate) -> Problems:
    given = estate.spec.firewall.jobs
    if given.ports is None:
        return
    lo, hi = given.ports
    path = ("firewall", "jobs", "ports")
    if hi < lo:
        yield problem(path, f"the range {lo}-{hi} ends before it starts",
                      "give (first, last) with first <= last")
        return
    if "nccl" in given.launchers:
        yield problem(path, f"NCCL is one of the site's launchers, and it cannot keep to "
                      f"{lo}-{hi}: its bootstrap and socket transport listen on ports the "
                      "kernel picks (NVIDIA/nccl#388), so multi-node NCCL jobs would hang",
                      "remove firewall.jobs.ports (every port between the workers), or "
                      "nccl from firewall.jobs.launchers if no job uses NCCL")
    need = jobs.ports_needed(estate) if "openmpi" in given.launchers else 1
    if hi - lo + 1 < need:
        yield problem(path, f"{lo}-{hi} holds {hi - lo + 1} ports; the launchers need "
                      f"{need}: torchrun's MASTER_PORT, {jobs.OOB_PORTS} for Open MPI's "
                      f"out-of-band channel and one per rank of the fullest worker "
                      f"({jobs.ranks_per_node(estate)} CPUs) for its TCP transport",
                      f"widen the range to at least {need} ports")


@validator("jobs.nic_segment", E, "jobs",
           "a NIC says it carries a segment the spec does not have")
def nic_segment(estate: Estate) -> Problems:
    known = {s.name for s in estate.spec.segments}
    for ci, cls in enumerate(estate.spec.node_classes):
        for ni, nic in enumerate(cls.nics):
            for si, seg in enumerate(nic.segments):
                if seg not in known:
                    yield problem(("node_classes", ci, "nics", ni, "segments", si),
                                  f"NIC {nic.name} of class {cls.name} names segment "
                                  f"{seg}, which the spec does not have",
                                  f"name one of {', '.join(sorted(known))}")


@validator("jobs.no_fabric_nic", W, "jobs",
           "workers have a fabric address, but their class names no NIC on the fabric: "
           "jobs are not told which interface to use (NCCL_SOCKET_IFNAME)")
def no_fabric_nic(estate: Estate) -> Problems:
    fabrics = set(jobs.fabrics(estate))
    for name in jobs.worker_classes(estate):
        ci, cls = next((i, c) for i, c in enumerate(estate.spec.node_classes)
                       if c.name == name)
        on = [f for f in sorted(fabrics) if jobs._class_on(estate, name, f)]
        if on and not any(jobs.nic_on(cls, f) for f in on):
            yield problem(("node_classes", ci, "nics"), f"the workers of class {name} have "
                          f"an address on {', '.join(on)}, but none of the class's NICs "
                          "says it carries it: multi-node jobs pick an interface by "
                          "themselves (docker0, the management network)",
                          f"add segments: [{on[0]}] to the NIC on that segment")


@validator("jobs.conntrack_overflow", W, "jobs",
           "job traffic stays tracked (workers without a fabric address), and an all-to-all "
           "across the workers would overflow nf_conntrack_max")
def conntrack_overflow(estate: Estate) -> Problems:
    fabrics = jobs.fabrics(estate)
    tracked = [n for n in sorted(jobs.workers(estate))
               if not any(estate.address(n, f) is not None for f in fabrics)]
    if len(tracked) < 2:
        return
    given = estate.spec.firewall.jobs.conntrack_max
    limit = given or jobs.CONNTRACK_MAX
    need = jobs.conntrack_estimate(estate, len(tracked))
    if need > limit:
        g = jobs.gpus_per_node(estate)
        yield problem(("firewall", "jobs"), f"{short(Hostlist.from_names(tracked))} "
                      f"({len(tracked)} workers) have no fabric address, so their job "
                      f"traffic is tracked on {estate.spec.slurm.address_segment}: an "
                      f"all-to-all across them holds about {need} connections per node "
                      f"({g} x {g} ranks x {len(tracked) - 1} peers x "
                      f"{jobs.CONNECTIONS_PER_PAIR}), past nf_conntrack_max {limit}"
                      f"{'' if given else ' (the kernel default)'}; new connections "
                      "are then dropped", "give the workers a fabric address (untracked), "
                      "or raise net.netfilter.nf_conntrack_max on them and state it in "
                      "firewall.jobs.conntrack_max")
