"""Telemetry facts: what each exporter exposes and the rules read, in one place.

The Slurm exporter (not in Debian; Estate's to write) and the rendered rules
(estate.render.monitoring) share SLURM_METRICS: the exporter must expose exactly these
names and labels, and the rules read nothing else from it. The node_exporter and
kube-state-metrics names are theirs (node_exporter 1.5's mountstats collector,
kube-state-metrics v2), listed so that the rules and their tests spell them once.

Each scrape job is one flow of the matrix (estate.model.flows): its targets are the
flow's nodes on the flow's segment, at the flow's port, so a target the firewall does not
admit from the monitoring host cannot be rendered.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from estate.model import model
from estate.model.flows import dotted, flow
from estate.model.nodes import GroupFacts
from estate.model.slurm import gpu_workers, gres_kinds
from estate.spec.resolved import Estate


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str                       # gauge | counter
    labels: tuple[str, ...]
    help: str


# The Slurm exporter's contract. Every series also carries the scrape's node and plane
# labels; with HA controllers each controller's exporter reports the same cluster, so the
# rules take the max over exporters before they sum.
SLURM_METRICS: tuple[Metric, ...] = (
    Metric("slurm_jobs", "gauge", ("state", "partition", "account", "user"),
           "Jobs by base state in lower case (pending, running, suspended, completing)."),
    Metric("slurm_jobs_pending", "gauge", ("reason", "partition", "account"),
           "Pending jobs by the reason squeue gives (Resources, Priority, Dependency, ...)."),
    Metric("slurm_job_pending_seconds_max", "gauge", ("reason", "partition", "account"),
           "Seconds since submission of the longest-waiting pending job of the group."),
    Metric("slurm_nodes", "gauge", ("state", "partition"),
           "Nodes of the partition by base state (NODE_STATES); every state is exported, "
           "0 where none, and a node counts once in each partition it is in."),
    Metric("slurm_gpus_allocated", "gauge", ("partition", "account"),
           "GPUs allocated to the account's running jobs."),
    Metric("slurm_job_info", "gauge", ("job_id", "partition", "account", "user"),
           "1 for each running job: joins a GPU's hpc_job label (the DCGM exporter's job "
           "mapping) to the job's account and user."),
    Metric("slurm_gpus_total", "gauge", ("partition",),
           "GPUs the partition's nodes configure (their Gres)."),
    Metric("slurm_scheduler_cycle_seconds", "gauge", (),
           "The main scheduler's last cycle (sdiag), for dashboards."),
    Metric("slurm_node_partition", "gauge", ("nodename", "partition"),
           "1 for each node (its NodeName) in each partition it is in: the rules join a "
           "node's filesystem to the partitions whose queues it holds up."),
    Metric("slurm_up", "gauge", (),
           "1 where the exporter's last read of Slurm (squeue, sinfo, sdiag) succeeded, 0 "
           "where one failed (slurmctld unreachable, munge down): the other series are then "
           "absent, so every Slurm alert is blind."),
)
SLURM = {m.name: m for m in SLURM_METRICS}
NODE_STATES = ("idle", "allocated", "mixed", "completing", "draining", "drained", "down",
               "fail", "future")
# Nodes that cannot take the queue's jobs: a job waiting then is the nodes' fault, not the
# scheduler's, and SchedulerQueueDelay stays quiet.
UNHEALTHY = ("down", "drained", "draining", "fail")
QUEUE_REASONS = ("Resources", "Priority")

# kube-state-metrics v2
KSM_UNAVAILABLE = "kube_deployment_status_replicas_unavailable"    # {namespace, deployment}
KSM_WAITING = "kube_pod_container_status_waiting_reason"  # {namespace, pod, container, reason}
KSM_REQUESTS = "kube_pod_container_resource_requests"     # {namespace, pod, resource, ...}
WAITING_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull")
KSM_PHASE = "kube_pod_status_phase"                       # {namespace, pod, phase}
# PodScheduled=False: no node fits (Unschedulable) or Kueue holds the pod for its queue's
# quota (SchedulingGated); a capacity wait, not a failure
KSM_SCHEDULED = "kube_pod_status_scheduled"               # {namespace, pod, condition}
KSM_POD_OWNER = "kube_pod_owner"                  # {namespace, pod, owner_kind, owner_name}
KSM_RS_OWNER = "kube_replicaset_owner"     # {namespace, replicaset, owner_kind, owner_name}
GPU_REQUEST = "nvidia_com_gpu"     # nvidia.com/gpu as kube-state-metrics labels the resource

# node_exporter 1.5, --collector.mountstats: per mount {export, protocol, mountaddr} and
# NFS operation; a retransmission is a transmission beyond the operation's first
NFS_REQUESTS = "node_mountstats_nfs_operations_requests_total"
NFS_TRANSMISSIONS = "node_mountstats_nfs_operations_transmissions_total"
NFS_REQUEST_TIME = "node_mountstats_nfs_operations_request_time_seconds_total"
# the mount's transport: RPCs sent, retransmissions included (a mount whose sends grow while
# no operation completes is stalled); the mount's age, a series as long as it is mounted
NFS_SENDS = "node_mountstats_nfs_transport_sends_total"
NFS_AGE = "node_mountstats_nfs_age_seconds_total"
# the server's side (--collector.nfsd, on by default): 0 threads once nfs-server stops
NFSD_THREADS = "node_nfsd_server_threads"
# the textfile directory is Debian's default, named so the collector and the exporter agree
# (estate.model.certificates writes its expiry metrics there)
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
NODE_EXPORTER_ARGS = ("--collector.mountstats", "--collector.nfs",
                      f"--collector.textfile.directory={TEXTFILE_DIR}")

# NVIDIA's DCGM exporter (the vendored 4.8.2, default counters): each GPU's utilization in
# percent, labelled gpu (its index, which names the job mapping's files) and, with
# --hpc-job-mapping-dir, hpc_job: one series per job holding the GPU, none on a GPU no
# job holds (upstream's transformation/hpc.go, hpcJobAttribute).
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_JOB_LABEL = "hpc_job"

# The DCGM exporter's HPC job mapping on Slurm GPU workers: Estate's Prolog and Epilog keep
# one file per GPU index here, holding the IDs of the jobs on it (then run the site's own).
JOB_MAP_DIR = "/run/estate/dcgm-job-map"


def gpu_job_map(estate: Estate) -> bool:
    """The mapping is rendered where the spec monitors and a Slurm worker has GPUs."""
    return estate.spec.monitoring is not None and bool(gpu_workers(estate))


def unmapped_mig_groups(estate: Estate) -> tuple[GroupFacts, ...]:
    """The Slurm worker groups whose GPUs carry a MIG layout, where the mapping is not kept
    (their Prolog and Epilog leave it alone): the exporter's HPC mapping keys whole GPUs by
    their index (a file per index, matched with the gpu label), while SLURM_JOB_GPUS numbers
    a node's MIG devices in slurmd's own order, so a map there would label another GPU with
    the job. Their utilization is no job's; Slurm's accounting still counts their GPU-hours."""
    if not gpu_job_map(estate):
        return ()
    return tuple(g for g in model(estate).groups
                 if g.slurm_compute and any(k.mig for k in gres_kinds(g)))


@dataclass(frozen=True)
class Alert:
    """An alert's plane (None: the scrape target's own plane label), the series label its
    tenant copies (or, quoted, the tenant itself), and its causes (each a rule)."""
    plane: str | None
    tenant: str
    causes: tuple[str, ...]


# Every alert Estate renders. Each names its plane, tenant and cause in its labels; one
# incident pages once (estate.render.monitoring: the rules' `unless`, Alertmanager's
# inhibit_rules).
ALERTS = {
    "SchedulerQueueDelay": Alert("slurm", "account", ("queue_delay",)),
    "SlurmExporterFailing": Alert("slurm", "node", ("slurm_unreadable",)),
    "ContainerDeploymentFailed": Alert("kubernetes", "namespace",
                                       ("unavailable_replicas", "container_waiting")),
    "KubernetesCapacityWait": Alert("kubernetes", "namespace", ("gpus", "resources")),
    "SharedFilesystemDegraded": Alert("storage", "node", ("retransmissions", "latency")),
    "SharedFilesystemDown": Alert("storage", "node", ("server_down", "rpcs_stalled")),
    "ScrapeTargetDown": Alert(None, "job", ("target_down",)),
    "RuleEvaluationFailing": Alert("monitoring", "'prometheus'", ("rule_failures",)),
    "AlertmanagerNotificationsFailing": Alert("monitoring", "'alertmanager'",
                                              ("notify_failures",)),
    # the certificate expiry collector's series (estate.model.certificates) keep their node's
    # plane, as ScrapeTargetDown does its target's
    "CertificateExpiring": Alert(None, "node", ("expiring",)),
    "Watchdog": Alert("monitoring", "'prometheus'", ("watchdog",)),
}
WATCHDOG = "Watchdog"
# The planes an alert's plane label takes: the alerts' own, and the scrape targets' (a
# node's plane, `shared` for a node of neither, `monitoring` for Prometheus and
# Alertmanager themselves), which ScrapeTargetDown keeps.
MONITORING_PLANE = "monitoring"
ALERT_PLANES = ("slurm", "kubernetes", "storage", "shared", MONITORING_PLANE)
TENANT_LABELS = {"slurm": "account", "kubernetes": "namespace", "storage": "node"}


def tenant_template(alert: str) -> str:
    """The tenant label's value in the rule: a label of the series, or a literal."""
    tenant = ALERTS[alert].tenant
    return tenant.strip("'") if tenant.startswith("'") else f"{{{{ $labels.{tenant} }}}}"


# Alertmanager (spec.monitoring.alertmanager): one instance on the monitoring host, at the
# flow of this name; its root route's receiver where the spec names none, which drops what
# it gets (the alerts stay in Alertmanager's UI and API).
ALERTMANAGER_FLOW = "alertmanager"
NULL_RECEIVER = "null"
# How Alertmanager batches notifications: one per alert name and tenant of a plane (both
# causes of a failed deployment in one namespace come together).
GROUP_BY = ("alertname", "plane", "tenant")


@lru_cache(maxsize=32)   # a validator asks once per route
def tenants(estate: Estate, plane: str) -> frozenset[str]:
    """The values a plane's alerts may carry in their tenant label (the Kubernetes plane's:
    the tenants' namespaces, which routes may name)."""
    spec = estate.spec
    if plane == "slurm":
        return frozenset(a.name for a in spec.slurm.accounts)
    if plane == "kubernetes":
        return frozenset(t.name for t in spec.kubernetes.tenants) if spec.kubernetes \
            else frozenset()
    if plane == "storage":
        return frozenset(estate.nodes)   # the node exporter's node label, every node's
    if plane == MONITORING_PLANE:
        return frozenset(a.tenant.strip("'") for a in ALERTS.values()
                         if a.plane == MONITORING_PLANE) | {j.name for j in JOBS}
    return frozenset(j.name for j in JOBS)   # shared: ScrapeTargetDown's, the scrape job


def receiver_for(estate: Estate, plane: str, tenant: str) -> str:
    """The receiver the spec sends an alert of this plane and tenant to: the tenant's route,
    else the plane's, else the root's (the first route of each, as Alertmanager takes)."""
    am = estate.spec.monitoring.alertmanager
    mine = [r for r in am.routes if r.plane == plane]
    route = next((r for r in mine if r.tenant == tenant), None) or \
        next((r for r in mine if r.tenant is None), None)
    return route.receiver if route else (am.receiver or NULL_RECEIVER)


def alertmanager_address(estate: Estate) -> str | None:
    """address:port Alertmanager listens on and Prometheus sends to: the monitoring host's
    address at the flow (None where the host has none there: monitoring.host_off_segment)."""
    found = targets(estate, Job("alertmanager", ALERTMANAGER_FLOW, None))
    return found[0][1] if found else None


@dataclass(frozen=True)
class Job:
    """One scrape job: the flow it travels and the nodes it reaches there."""
    name: str
    flow: str
    plane: str | None       # the targets' plane label; None: each node's own plane
    honor_labels: bool = False


# kube-state-metrics' series name nodes and namespaces themselves (node, namespace): they
# win over the scrape's labels, and its targets get no node label of their own.
# Prometheus and Alertmanager scrape themselves: their rule evaluation and notification
# failures are alerts too.
JOBS = (Job("node", "node-exporter", None),
        Job("slurm", "slurm-exporter", "slurm"),
        Job("dcgm", "dcgm-exporter", None),   # Kubernetes and Slurm GPU workers
        Job("kube-state-metrics", "kube-state-metrics", "kubernetes", honor_labels=True),
        Job("prometheus", "prometheus", "monitoring"),
        Job("alertmanager", "alertmanager", "monitoring"))


def targets(estate: Estate, job: Job) -> list[tuple[str, str, str]]:
    """(node, address:port, plane) of a job, in the spec's order: the job's flow's nodes
    that have an address on its segment (monitoring.targets_off_segment names the others).
    By group, from each group's first address: 10,000 nodes looked up one by one took
    0.07 s."""
    f = flow(estate, job.flow)
    if f is None or estate.spec.monitoring is None:
        return []
    out = []
    for gi, hosts in enumerate(estate.group_hosts):
        block = estate._block_index.get((gi, f.segment))
        if block is None:
            continue
        plane = job.plane or estate.spec.nodes[gi].plane or "shared"
        out += [(name, f"{dotted(block.first + i)}:{f.ports[0]}", plane)
                for i, name in enumerate(hosts.names())
                if name in f.to and estate.nodes[name].group == gi]   # a name's first place
    return out
