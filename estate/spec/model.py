"""The estate spec: one typed model for both planes.

Unknown keys are forbidden everywhere. Cross-references (a node's class, a
partition's nodes, a mount's export) are plain names here; the validators in
``estate.check`` resolve them and report what does not resolve, so a spec with
many mistakes is reported whole rather than stopping at the first.

No ``from __future__ import annotations`` here, unlike the rest of Estate: pydantic would
evaluate each of the models' 230 string annotations again at import, 0.05 s of every
command's start (tests/unit/test_entry.py keeps it out).
"""

from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, SecretStr, StringConstraints, Tag

from estate.catalogue import DEFAULT_SLURM, SLURM_SUITES, SPEC_ROLES
from estate.kubernetes_releases import DEFAULT_VERSION
from estate.spec.bounds import (IPv4, BlockSize, CoresPerSocket, Fairshare, GpuMemoryGB,
                                 GpuQuota, GresCount, IPv4Cidr, K8sPriority, LinkGbps,
                                 MAX_MEMORY_MB, MAX_CORES_PER_SOCKET, MAX_SOCKETS,
                                 MemoryMB, SLURM_UINT32_MAX, Reserved,
                                 SlurmMemoryMB, SlurmPriority, SlurmWeight, Sockets)
from estate.spec.types import (AbsolutePath, AptSource, CgroupMountpoint, DevicePrefix,
                               DnsName, EmailAddress, FreeText, LabelKey, LabelValue,
                               LdapDn, LdapUri, SecretEnv, OptionList, OwnedDirectory, ProgramPath, RelativeFile, SchedulerValue, SlurmConfValue, SlurmTime,
                               StoragePath, Version, WebUrl)

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_.-]*$", max_length=63)]
# A MIG GPU-instance profile as nvidia-smi and nvidia-mig-parted name it: 1g.10gb, 1g.10gb+me.
MigProfileName = Annotated[str, StringConstraints(pattern=r"^[1-7]g\.[0-9]{1,3}gb(\+me)?$",
                                                  max_length=16)]
HostlistExpr = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.,\[\]-]+$")]
Plane = Literal["slurm", "kubernetes"]
Purpose = Literal["management", "fabric", "service", "storage"]
if TYPE_CHECKING:   # built from the catalogue at run time; the type checker sees strings
    Role = str
    SlurmVersion = str
else:
    Role = Literal[SPEC_ROLES]   # the roles a spec may name, from the role catalogue
    SlurmVersion = Literal[tuple(SLURM_SUITES)]  # the releases Estate renders for (catalogue)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --- network -----------------------------------------------------------------

class Segment(Strict):
    name: Name
    cidr: IPv4Cidr
    vlan: int = Field(ge=1, le=4094)
    purpose: Purpose
    reserved: Reserved = Field(
        10, description="Host addresses at the start of the CIDR kept for gateways "
        "and VIPs; automatic allocation starts after them.")
    mtu: int = Field(1500, ge=576, le=9216)


# --- hardware ----------------------------------------------------------------

class GPU(Strict):
    vendor: Literal["nvidia"] = "nvidia"
    model: Name = Field(description="Short model name, used as the Slurm GRES type and "
                        "the Kueue flavor, e.g. h100.")
    product: FreeText = Field(description="Product string as the driver reports it, e.g. "
                         "NVIDIA-H100-80GB-HBM3 (the nvidia.com/gpu.product label).")
    count: int = Field(ge=1, le=16)
    memory_gb: GpuMemoryGB
    mig: bool = False
    mig_profiles: dict[MigProfileName, Annotated[int, Field(ge=1, le=7)]] = Field(
        {}, description="The MIG layout of each GPU: profile -> instances per GPU, e.g. "
        "{1g.10gb: 7}; the profiles must be the model's and fit its 7 compute and 8 memory "
        "slices (estate.model.nvidia.MIG_PROFILES). Kubernetes advertises the instances "
        "(mig-parted config, quotas in what the nodes advertise); Slurm schedules each as a "
        "GPU of that type (Gres=gpu:1g.10gb:N) and needs slurm.gres_autodetect: nvml.")
    emulated: bool = Field(False, description="Fake devices (the lab's mknod'd /dev/nvidiaN) "
                           "with no NVIDIA driver: `estate doctor` reports the driver check "
                           "as not applicable for them instead of failing. Never on real "
                           "hardware.")


def _gpus_form(value) -> str:
    return "list[GPU]" if isinstance(value, list) else "one[GPU]"


# One kind (a mapping) or a list of kinds. The form is chosen by the value's shape, so a
# mistake is reported against the form written only (the tags hold '[', which
# load.schema_findings drops from error paths like pydantic's own union tags).
GpuKinds = Annotated[Union[Annotated[GPU, Tag("one[GPU]")],
                           Annotated[list[GPU], Field(min_length=1, max_length=8),
                                     Tag("list[GPU]")]],
                     Discriminator(_gpus_form)]


class NIC(Strict):
    name: Name
    speed_gbps: LinkGbps
    kind: Literal["ethernet", "infiniband"] = "ethernet"
    segments: list[Name] = Field([], description="The segments this NIC carries (its "
                                 "addresses there): jobs' interface variables "
                                 "(NCCL_SOCKET_IFNAME) name the NIC on the fabric.")
    hca: Name | None = Field(None, description="The InfiniBand HCA behind this NIC as "
                             "ibv_devices names it (mlx5_0): NCCL_IB_HCA and UCX_NET_DEVICES.")


class NodeClass(Strict):
    name: Name
    sockets: Sockets
    cores_per_socket: CoresPerSocket
    threads_per_core: int = Field(1, ge=1, le=8)
    memory_mb: MemoryMB
    gpus: GpuKinds | None = Field(
        None, description="The node's GPUs: one kind, or a list of kinds on one node (Slurm "
        "only: Gres=gpu:a100:4,gpu:t4:2; Kubernetes cannot tell kinds apart under one "
        "nvidia.com/gpu).")
    nics: list[NIC] = []

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @property
    def gpu_kinds(self) -> tuple[GPU, ...]:
        """The GPU kinds in spec order, whichever form the spec used: what everything that
        looks at a class's GPUs reads, so the two forms never need two code paths."""
        if self.gpus is None:
            return ()
        return tuple(self.gpus) if isinstance(self.gpus, list) else (self.gpus,)

    @property
    def gpu(self) -> GPU | None:
        """The class's first GPU kind: its only one wherever one is assumed (a Kubernetes
        worker: kubernetes.gpu_kinds refuses several), whichever form the spec used."""
        return self.gpu_kinds[0] if self.gpu_kinds else None

    @property
    def gpu_count(self) -> int:
        """All the node's GPUs, every kind."""
        return sum(g.count for g in self.gpu_kinds)


# A node feature as --constraint names it: a word, or a word with a value (CPU_GEN:SKX).
# Slurm's constraint operators (& | * [ ] ( ) ! , and blanks) cannot appear in one.
FEATURE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:=+-]*$"
SlurmFeature = Annotated[str, StringConstraints(pattern=FEATURE_PATTERN, max_length=63)]


class NodeSlurm(Strict):
    """Per-group Slurm overrides; defaults derive from the node class."""
    real_memory_mb: SlurmMemoryMB | None = None
    gres_count: GresCount | None = None
    weight: SlurmWeight = 1
    features: list[SlurmFeature] = []
    core_spec_count: int | None = Field(None, ge=1, le=MAX_SOCKETS * MAX_CORES_PER_SOCKET,
                                        description="CoreSpecCount: cores kept for the "
                                        "system (slurmd, the OS), never given to jobs.")
    mem_spec_limit_mb: SlurmMemoryMB | None = Field(None, description="MemSpecLimit: "
                                                    "memory (MB) kept for the system.")
    gres_typed: bool = Field(True, description="Gres=gpu:<model>:N; false: Gres=gpu:N, "
                             "untyped (jobs then cannot ask for a GPU model).")
    shards_per_gpu: int | None = Field(None, ge=1, le=1024, description="GRES shard: each "
                                       "GPU shared by up to this many jobs (--gres=shard:N).")
    state: Literal["unknown", "cloud", "future"] = Field(
        "unknown", description="The nodes' State=: cloud nodes are powered up on demand by "
        "slurm.power_saving's resume program; future nodes are defined but not yet in "
        "service (scontrol update State=RESUME brings them in).")


class NodeGroup(Strict):
    hosts: HostlistExpr = Field(description="Slurm hostlist expression, e.g. gpu[001-032].")
    node_class: Name = Field(alias="class")
    plane: Plane | None = Field(None, description="Scheduler that owns the nodes; "
                                "none for shared infrastructure such as storage.")
    roles: list[Role]
    rack: Name | None = Field(None, description="Rack the group stands in; none where the "
                              "source (an imported cluster) does not say.")
    switch: Name | None = Field(None, description="Leaf switch (topology).")
    addresses: dict[Name, Literal["auto"] | IPv4] = Field(
        {}, description="Segment name -> 'auto' or the first node's address "
        "(later nodes of the group take consecutive addresses). None: no NodeAddr; "
        "slurmctld resolves the names at start-up.")
    slurm: NodeSlurm = NodeSlurm()
    labels: dict[LabelKey, LabelValue] = {}


# --- topology ----------------------------------------------------------------

class Switch(Strict):
    name: Name
    switches: list[Name] = Field([], description="Child switches (SwitchName ... Switches=).")
    nodes: HostlistExpr | None = Field(None, description="Extra nodes under this switch, "
                                       "in addition to nodes naming it as their leaf.")
    link_speed_gbps: LinkGbps | None = None


class Block(Strict):
    name: Name
    nodes: HostlistExpr


class Topology(Strict):
    switches: list[Switch] = []
    blocks: list[Block] = []
    block_sizes: list[BlockSize] = []


# --- slurm -------------------------------------------------------------------

OverSubscribe = Annotated[str, StringConstraints(
    pattern=r"^(NO|EXCLUSIVE|(YES|FORCE)(:[1-9][0-9]{0,3})?)$")]
# A TRES as TRESBillingWeights and PriorityWeightTRES name it: CPU, Mem, GRES/gpu, GRES/gpu:h100
TresName = Annotated[str, StringConstraints(
    pattern=r"^(CPU|Mem|Node|Energy|FS/Disk|VMem|Pages|(GRES|License)/[A-Za-z][A-Za-z0-9_.-]*"
            r"(:[A-Za-z0-9_.-]+)?)$", max_length=80)]
TresWeight = Annotated[float, Field(ge=0, le=1_000_000)]
PreemptMode = Literal["off", "cancel", "requeue", "suspend"]
# PrivateData's values in any release Estate renders for (which release reads which:
# estate.model.slurm_privacy, from slurm_conf/keys/<release>.json)
PrivateDataValue = Literal["accounts", "cloud", "events", "jobs", "nodes", "partitions",
                           "reservations", "usage", "users"]


class NodeSet(Strict):
    """A named set of Slurm nodes (slurm.conf NodeSet=), listed in partitions by its name:
    the nodes of some classes, a hostlist, or every node with a feature. Exactly one."""
    name: Name
    classes: list[Name] = Field([], description="The Slurm workers of these node classes "
                                "(rendered as their hostlist).")
    nodes: HostlistExpr | None = Field(None, description="These hosts (Nodes=).")
    feature: SlurmFeature | None = Field(None, description="Every node with this feature "
                                         "(Feature=; nodes[].slurm.features).")


class Partition(Strict):
    name: Name
    nodes: HostlistExpr | None = Field(None, description="Hosts in the partition; with "
                                       "nodesets, in addition to theirs.")
    nodesets: list[Name] = Field([], description="slurm.nodesets whose nodes are in the "
                                 "partition (Nodes= names them).")
    default: bool = False
    max_time: SlurmTime = "INFINITE"
    default_time: SlurmTime | None = Field(None, description="DefaultTime: the limit of a job "
                                           "that asks for none. Default: max_time, capped at "
                                           "1 hour (00:30:00 partitions keep 30 minutes), so a "
                                           "job without --time never holds nodes for MaxTime.")
    qos: Name | None = None
    allow_accounts: list[Name] = []
    deny_accounts: list[Name] = []
    allow_qos: list[Name] = []
    allow_groups: list[Name] = []
    hidden: bool = False
    priority_tier: int = Field(1, ge=0, le=65533)
    oversubscribe: OverSubscribe | None = Field(None, description="OverSubscribe: NO, "
                                                "EXCLUSIVE, YES[:N] or FORCE[:N] (Slurm's "
                                                "default: NO).")
    preempt_mode: PreemptMode | None = Field(None, description="PreemptMode of the jobs in this "
                                             "partition when a higher tier preempts them; "
                                             "default: slurm.preemption.mode.")
    grace_time_s: int | None = Field(None, ge=0, le=7 * 86400, description="GraceTime: seconds "
                                     "a job of this partition gets between the SIGTERM of its "
                                     "preemption and its requeue or cancel (SIGTERM, KillWait, "
                                     "SIGKILL). preempt/partition_prio reads the preempted "
                                     "job's partition's; gang suspension and preempt/qos "
                                     "never read it (slurm.grace_time_unused).")
    max_mem_per_node_mb: SlurmMemoryMB | None = None
    def_cpu_per_gpu: int | None = Field(None, ge=1, le=MAX_CORES_PER_SOCKET * 16 * 8,
                                        description="DefCpuPerGPU. Default: the CPUs of the "
                                        "partition's node class divided by its GPUs.")
    def_mem_per_gpu_mb: SlurmMemoryMB | None = Field(None, description="DefMemPerGPU. Default: "
                                                     "RealMemory divided by the GPUs.")
    tres_billing_weights: dict[TresName, TresWeight] = {}


class QOS(Strict):
    name: Name
    priority: SlurmPriority = 0
    max_gpus_per_user: GpuQuota | None = None
    max_wall: SlurmTime | None = None
    grace_time_s: int | None = Field(None, ge=0, le=7 * 86400, description="GraceTime of the "
                                     "QOS (sacctmgr): what preempt/qos gives a preempted job "
                                     "of this QOS between SIGTERM and its requeue or cancel.")


class Account(Strict):
    name: Name
    parent: Name = "root"
    fairshare: Fairshare
    users: list[Name] = []
    qos: list[Name] = []
    coordinators: list[Name] = Field([], description="Its coordinators (sacctmgr add "
                                     "coordinator): under PrivateData they see, and may "
                                     "manage, the jobs, usage and associations of this "
                                     "account and its sub-accounts. Each must be a user of "
                                     "some account.")


class Preemption(Strict):
    """PreemptType and the cluster's PreemptMode (partitions may override the mode)."""
    type: Literal["partition_prio", "qos"] = Field("partition_prio", description="preempt/"
                                                   "partition_prio: a higher priority_tier "
                                                   "partition preempts a lower one; preempt/qos: "
                                                   "QOS preempt lists.")
    mode: Literal["cancel", "requeue", "suspend"] = Field("requeue", description="suspend "
                                                          "renders SUSPEND,GANG (Slurm needs gang "
                                                          "scheduling to resume suspended jobs).")


class Timeouts(Strict):
    """Daemon timeouts in seconds; the defaults are Slurm's own."""
    slurmctld: int = Field(120, ge=1, le=65533, description="SlurmctldTimeout: how long the "
                           "backup waits for the primary before taking over.")
    slurmd: int = Field(300, ge=1, le=65533, description="SlurmdTimeout: a silent slurmd is "
                        "set DOWN after this.")
    message: int = Field(10, ge=1, le=100, description="MessageTimeout (Slurm warns above 100).")
    unkillable_step: int = Field(60, ge=1, le=65533, description="UnkillableStepTimeout: a step "
                                 "still alive this long after SIGKILL drains its node.")
    kill_wait: int = Field(30, ge=0, le=65533, description="KillWait: SIGTERM to SIGKILL.")
    batch_start: int = Field(10, ge=1, le=65533, description="BatchStartTimeout.")
    inactive_limit: int = Field(0, ge=0, le=65533, description="InactiveLimit (0: none).")


PriorityFlag = Literal["ACCRUE_ALWAYS", "CALCULATE_RUNNING", "DEPTH_OBLIVIOUS", "NO_FAIR_TREE",
                       "INCR_ONLY", "MAX_TRES", "NO_NORMAL_ALL", "NO_NORMAL_ASSOC",
                       "NO_NORMAL_PART", "NO_NORMAL_QOS", "NO_NORMAL_TRES",
                       "SMALL_RELATIVE_TO_TIME"]
PriorityWeight = Annotated[int, Field(ge=0, le=SLURM_UINT32_MAX)]


class Priority(Strict):
    """priority/multifactor's weights (PriorityWeight*) and PriorityFlags."""
    age: PriorityWeight = 1000
    fairshare: PriorityWeight = 10000
    job_size: PriorityWeight = 0
    partition: PriorityWeight = 1000
    qos: PriorityWeight = 5000
    assoc: PriorityWeight = 0
    tres: dict[TresName, TresWeight] = Field({}, description="PriorityWeightTRES.")
    flags: list[PriorityFlag] = []
    decay_half_life: SlurmTime = "7-0"
    max_age: SlurmTime = "7-0"


SelectParameter = Literal["CR_CPU", "CR_CPU_Memory", "CR_Core", "CR_Core_Memory", "CR_Socket",
                          "CR_Socket_Memory", "CR_Memory", "CR_ONE_TASK_PER_CORE",
                          "CR_CORE_DEFAULT_DIST_BLOCK", "CR_LLN", "CR_Pack_Nodes"]
ResourceLimit = Literal["ALL", "NONE", "AS", "CORE", "CPU", "DATA", "FSIZE", "MEMLOCK",
                        "NOFILE", "NPROC", "RSS", "STACK"]
# slurm.conf keys are words (values: types.SlurmConfValue)
ConfKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9]*$", max_length=64)]
SchedulerOption = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)]


class Slurmrestd(Strict):
    segment: Name = "service"
    port: int = Field(6820, ge=1, le=65535)


class Accounting(Strict):
    host: Name = Field(description="Node that runs slurmdbd (with MariaDB on the same node, "
                       "reached over its unix socket, so no database password exists).")
    port: int = Field(6819, ge=1, le=65535)


PrologFlag = Literal["Alloc", "Contain", "DeferBatch", "NoHold", "Serial", "X11"]
HealthCheckState = Literal["ALLOC", "ANY", "CYCLE", "IDLE", "MIXED"]


class HealthCheck(Strict):
    program: RelativeFile = Field(description="The site's health check script, next to the "
                                  "spec; it drains a node it finds unhealthy (scontrol update "
                                  "NodeName=$(hostname) State=DRAIN Reason=...).")
    interval: int = Field(300, ge=1, le=86400, description="HealthCheckInterval (seconds).")
    node_state: list[HealthCheckState] = Field(["ANY"], min_length=1,
                                               description="HealthCheckNodeState.")


class NodeHooks(Strict):
    """Programs slurmd runs on the compute nodes; the scripts come from files next to the
    spec and are installed on every Slurm worker."""
    prolog: RelativeFile | None = Field(None, description="Prolog: runs as root before a "
                                        "job's first step on each node; a failure drains "
                                        "the node and requeues the job held.")
    epilog: RelativeFile | None = Field(None, description="Epilog: runs as root when the job "
                                        "ends on each node; a failure drains the node.")
    task_prolog: RelativeFile | None = Field(None, description="TaskProlog: runs as the "
                                             "job's user before each task; what it prints "
                                             "(export NAME=value) sets the task's "
                                             "environment. Estate's own TaskProlog runs it "
                                             "after printing the jobs' network variables.")
    prolog_flags: list[PrologFlag] = Field(
        ["Alloc"], description="PrologFlags. Default Alloc: every node of a job runs the "
        "Prolog when the job is allocated, not only the first node and the others when a "
        "step reaches them, so what a prolog sets up (the GPU job map) is on every node of "
        "a multi-node job. Add Contain where users ssh into their jobs' nodes "
        "(pam_slurm_adopt).")
    health_check: HealthCheck | None = None
    reboot_program: AbsolutePath | None = Field(None, description="RebootProgram: an "
                                                "installed program (scontrol reboot).")


class PowerSaving(Strict):
    """slurmctld powers cloud nodes (nodes[].slurm.state: cloud) up and down through the
    site's programs; the other nodes are excluded (SuspendExcNodes)."""
    resume_program: RelativeFile = Field(description="ResumeProgram, next to the spec: "
                                         "powers up the nodes in its argument (a hostlist).")
    suspend_program: RelativeFile = Field(description="SuspendProgram, next to the spec.")
    suspend_time: int = Field(600, ge=1, le=31 * 86400, description="SuspendTime: seconds "
                              "idle before a cloud node is powered down.")
    resume_timeout: int = Field(300, ge=1, le=65533, description="ResumeTimeout: a node not "
                                "registered this long after its resume is set DOWN.")
    suspend_timeout: int = Field(30, ge=1, le=65533, description="SuspendTimeout.")
    resume_rate: int = Field(300, ge=0, le=65533, description="ResumeRate (nodes/minute).")
    suspend_rate: int = Field(60, ge=0, le=65533, description="SuspendRate (nodes/minute).")


class Slurm(Strict):
    cluster_name: Name
    version: SlurmVersion = Field(DEFAULT_SLURM, description="The Slurm release (major.minor) "
                                  "the nodes run: it decides which slurm.conf keys and "
                                  "plugins are rendered and accepted (22.05: Debian 12, "
                                  "24.11: Debian 13; topology blocks need >= 23.11).")
    controllers: list[Name] = Field(min_length=1, max_length=2,
                                    description="Primary first, then the backup.")
    address_segment: Name = Field("management", description="Segment whose addresses "
                                  "become NodeAddr and SlurmctldHost addresses.")
    gpu_device_path: DevicePrefix = Field("/dev/nvidia", description="Device file prefix; the lab "
                                 "points it at fake device nodes.")
    gres_autodetect: Literal["off", "nvml"] = Field(
        "off", description="gres.conf AutoDetect: off (Estate writes each GPU's File= and "
        "Cores=) or nvml (slurmd asks NVIDIA's NVML; needed for MIG). nvml needs a Slurm "
        "built with NVML: Debian's packages are not (slurm.plugin_not_in_release).")
    process_tracking: Literal["cgroup", "linuxproc"] = Field(
        "cgroup", description="cgroup: proctrack/cgroup, task/cgroup,task/affinity and "
        "cgroup.conf's Constrain{Cores,RAMSpace,Devices}: jobs get their cores, memory and "
        "GPUs only. linuxproc: none of that (process tracking by parent PID only), for "
        "hosts that cannot give slurmd a cgroup tree of its own.")
    cgroup_mountpoint: CgroupMountpoint = Field(
        "/sys/fs/cgroup", description="cgroup.conf CgroupMountpoint (cgroup v1). Another "
        "path: each worker binds its own cgroup of every controller Slurm uses there before "
        "slurmd starts, so that job cgroups nest under the node's own: nodes that are "
        "containers on one kernel (the lab's) would otherwise make their jobs' cgroups at "
        "the top of the kernel's hierarchy, outside the node's own limits.")
    mail_prog: ProgramPath | None = Field(
        None, description="MailProg: the program slurmctld mails job events with (--mail-type), "
        "e.g. /usr/bin/mail where the controllers have a mail transport. Default: none, and "
        "mail is off (MailProg=/bin/true, said in slurm.conf): Slurm's default "
        "/bin/mail does not exist on Debian without a mail agent, and slurmctld then logs "
        "'Configured MailProg is invalid' and drops every mail.")
    state_dir: OwnedDirectory = "/var/spool/slurmctld"
    config_overrides: bool = Field(False, description="Trust slurm.conf over the hardware "
                                   "slurmd detects (SlurmdParameters=config_overrides); "
                                   "for labs whose nodes emulate bigger hardware.")
    accounting: Accounting | None = Field(None, description="slurmdbd accounting; needed "
                                          "for fair share, QOS and account limits.")
    select_type_parameters: list[SelectParameter] = Field(
        ["CR_Core_Memory"], description="SelectTypeParameters: one CR_* resource type, then "
        "options; a *_Memory type makes memory a consumable resource.")
    scheduler_parameters: dict[SchedulerOption, SchedulerValue] = Field(
        {}, description="SchedulerParameters: option -> true (a flag) or a number, e.g. "
        "{bf_continue: true, bf_window: 4320}.")
    mpi_default: Literal["none", "pmi2", "pmix", "pmix_v4", "cray_shasta"] = "none"
    job_acct_gather: Literal["linux", "cgroup", "none"] | None = Field(
        None, description="JobAcctGatherType; default: linux with accounting, none without.")
    propagate_resource_limits_except: list[ResourceLimit] | None = Field(
        None, description="PropagateResourceLimitsExcept. Default: [MEMLOCK] when a Slurm "
        "node has an InfiniBand NIC (RDMA needs the locked-memory limit slurmd gives, not "
        "the login shell's), else not set.")
    timeouts: Timeouts = Timeouts()
    priority: Priority = Priority()
    preemption: Preemption | None = None
    hooks: NodeHooks = NodeHooks()
    power_saving: PowerSaving | None = None
    extra: dict[ConfKey, SlurmConfValue] = Field(
        {}, description="Other slurm.conf settings, key -> value; the key must be one "
        "Slurm's parser knows (slurm_conf/keys/) and not one Estate renders itself.")
    nodesets: list[NodeSet] = []
    partitions: list[Partition] = []
    qos: list[QOS] = []
    accounts: list[Account] = []
    private_data: list[PrivateDataValue] | None = Field(
        None, description="PrivateData (slurm.conf and slurmdbd.conf): what a user sees of "
        "others' work. Default: [accounts, jobs, usage, users] where the estate has more "
        "than one tenant or account (a user, or a bridge user, lists its own jobs, usage and "
        "associations only), else none; [] turns it off. SlurmUser, root, slurm.operators "
        "and the accounts' coordinators still see everything (theirs).")
    operators: list[Name] = Field([], description="Users with AdminLevel=Operator in "
                                  "slurmdbd: they see every job, usage and association "
                                  "under PrivateData (and may hold, requeue and update "
                                  "jobs). Each must be a user of some account.")
    enforce_part_limits: Literal["ALL", "ANY", "NO"] = Field(
        "ALL", description="EnforcePartLimits: ALL refuses at submission (sbatch prints "
        "Slurm's reason) a job that breaks a limit of any partition it names (MaxTime, "
        "MaxMemPerNode, AllowAccounts/DenyAccounts...); NO accepts it to pend forever.")
    kill_invalid_depend: bool = Field(True, description="DependencyParameters="
                                      "kill_invalid_depend: a job whose dependency can never "
                                      "be met (afterok on a failed job) is cancelled instead "
                                      "of pending forever (DependencyNeverSatisfied).")
    slurmrestd: Slurmrestd | None = Slurmrestd()


# --- kubernetes --------------------------------------------------------------

class GpuSharing(Strict):
    mode: Literal["none", "time-slicing", "mig"] = "none"
    replicas: int = Field(1, ge=1, le=64, description="Time-slicing replicas per GPU.")
    mig_strategy: Literal["single", "mixed"] = "single"
    mig_devices: int | None = Field(None, ge=1, le=7, description="MIG devices each GPU is "
                                    "split into (single strategy, e.g. 7 for all-1g.10gb); "
                                    "Kueue quotas then count MIG devices.")
    fail_requests_greater_than_one: bool = Field(
        True, description="Time-slicing: refuse a pod asking for more than one replica, "
        "since two replicas of one GPU give no more GPU than one (the device plugin's "
        "failRequestsGreaterThanOne).")


class StorageGrant(Strict):
    """One export a tenant's pods may mount, as a pre-bound PersistentVolume and claim."""
    export: Name
    access: Literal["ro", "rw"] = Field("ro", description="ro: a read-only PersistentVolume "
                                        "(and the plane's nodes get the export read-only "
                                        "unless some tenant is granted it rw); rw: both "
                                        "read-write.")
    reason: FreeText = Field("", description="Why the tenant needs it; required when the "
                             "export is the Slurm plane's too (a cross-plane grant).")


class Bridge(Strict):
    """What a Kubernetes tenant may ask of Slurm over slurmrestd. Slurm itself enforces it:
    the user's only associations are (account, partition) pairs of this grant, with these
    QOS, so a job for anything else is refused by slurmctld whatever the caller sends."""
    user: Name = Field(description="identity.users: the Slurm user the tenant's jobs are "
                       "submitted and run as; its tokens name it (JWT claim sun). A user of "
                       "its own: no slurm.accounts[].users may list it.")
    account: Name = Field(description="slurm.accounts: the account the jobs are charged to.")
    partitions: list[Name] = Field(min_length=1, description="Partitions the jobs may use.")
    qos: list[Name] = Field([], description="QOS the jobs may use (the first is the "
                            "default); default: the account's.")
    token_lifetime: int = Field(900, ge=60, le=86400, description="The longest a token "
                                "lives (seconds); the minter renews it at half that.")


class RunAs(Strict):
    """The IDs a tenant's pods may run as, named from spec.identity: an admission policy
    refuses a pod whose securityContext sets or leaves any other UID or GID."""
    users: list[Name] = Field(min_length=1, description="identity.users whose UIDs the "
                              "pods may run as (runAsUser, which a pod must set); never a "
                              "system user.")
    groups: list[Name] = Field([], description="identity.groups whose GIDs the pods may use "
                               "(runAsGroup, which a pod must set, fsGroup, "
                               "supplementalGroups), besides the users' primary groups, "
                               "which are always granted.")


class Tenant(Strict):
    name: Name
    gpus: dict[Name, GpuQuota] = Field(description="GPU model -> nominal quota (GPUs).")
    cohort: Name = "estate"
    priority: K8sPriority = Field(0, description="PriorityClass value for the tenant's workloads.")
    allow_from: list[Name] = Field([], description="Tenants whose pods may reach this "
                                   "tenant's pods.")
    bridge: Bridge | None = Field(None, description="Granted the bridge to the batch "
                                  "plane: the tenant's pods submit jobs to slurmrestd (through "
                                  "its TLS front) as one Slurm user, within this grant.")
    storage: list[StorageGrant] = Field([], description="Exports granted to the tenant: it "
                                        "gets a PersistentVolume for these only.")
    groups: list[Name] = Field([], description="identity.groups whose members administer "
                               "the tenant's namespace (a RoleBinding to Kubernetes' built-in "
                               "'edit' role there; nothing cluster-wide).")
    run_as: RunAs | None = Field(None, description="The identity the tenant's pods run as "
                                 "(a ValidatingAdmissionPolicy on its namespace); none: "
                                 "pods run as their images say.")


class Cni(Strict):
    """The pod network (Calico, installed by its operator: estate.model.cni)."""
    encapsulation: Literal["vxlan", "none"] = Field(
        "vxlan", description="How pod traffic crosses between nodes: vxlan (UDP 4789, works "
        "across routed segments; the safe default) or none (plain routes learnt over BGP, "
        "179/tcp; only when every plane node shares the API segment's L2 and nothing in "
        "between drops pod addresses).")


class Reservation(Strict):
    """What the kubelet keeps out of a node's allocatable for one consumer."""
    cpu_millicores: int = Field(ge=0, le=MAX_CORES_PER_SOCKET * 64 * 1000)
    memory_mb: int = Field(ge=0, le=MAX_MEMORY_MB)


class Kubelet(Strict):
    """The kubelet's node-allocatable settings, the same on every plane node (kubeadm's
    KubeletConfiguration is cluster-wide). Allocatable = capacity - kube_reserved -
    system_reserved - the memory eviction threshold; quotas split allocatable, not capacity."""
    kube_reserved: Reservation = Field(
        Reservation(cpu_millicores=250, memory_mb=512),
        description="For the kubelet and container runtime (kubeReserved).")
    system_reserved: Reservation = Field(
        Reservation(cpu_millicores=250, memory_mb=512),
        description="For the OS daemons: sshd, journald, node agents "
        "(systemReserved).")
    eviction_memory_mb: int = Field(100, ge=1, le=MAX_MEMORY_MB, description=(
        "Hard eviction threshold memory.available (evictionHard; the kubelet's default is "
        "100Mi); the kubelet evicts pods below it, so it is not allocatable either."))


ClaimName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.:-]*$",
                                             max_length=128)]


class Oidc(Strict):
    """The API server's OpenID Connect issuer (Dex, Keycloak, the site's IdP), rendered as
    the structured AuthenticationConfiguration. Groups carry no prefix, so a token's groups
    are the directory's and a RoleBinding to Group ops binds the directory's ops."""
    issuer: WebUrl = Field(description="The issuer URL, exactly as the tokens' iss claim "
                           "has it (https).")
    audiences: list[DnsName | Name] = Field(min_length=1, max_length=16, description="The "
                                            "client IDs a token must be issued to (aud).")
    username_claim: ClaimName = Field("preferred_username", description="The claim that "
                                      "names the user: the directory's uid (no prefix).")
    groups_claim: ClaimName = Field("groups", description="The claim that lists the user's "
                                    "groups: the directory's group names (no prefix). The "
                                    "issuer's CA must be in the control planes' trust store "
                                    "(kubeadm mounts /etc/ssl/certs into the API server).")


class Kubernetes(Strict):
    version: Version = Field(DEFAULT_VERSION, description=(
        "Kubernetes MAJOR.MINOR.PATCH; `estate check` warns once the minor is past its end "
        "of life (estate/kubernetes_releases.py)."))
    package_repository: AptSource | None = Field(None, description="apt repository (deb URL and "
                                           "suite) for kubelet/kubeadm/kubectl, e.g. a mirror; "
                                           "default: pkgs.k8s.io for the version's minor.")
    control_plane: list[Name] = Field(min_length=1)
    pod_cidr: IPv4Cidr
    service_cidr: IPv4Cidr
    api_segment: Name = "service"
    api_vip: IPv4 | None = Field(None, description=(
        "The API's virtual IP on api_segment, held by one control plane at a time (kube-vip, "
        "ARP mode); controlPlaneEndpoint is VIP:6443. Required with more than one control "
        "plane; take it from the segment's reserved addresses."))
    api_vip_interface: Name | None = Field(None, description=(
        "The control planes' network interface on api_segment, where kube-vip announces the "
        "VIP (e.g. eth0); required with api_vip."))
    gpu_sharing: GpuSharing = GpuSharing()
    gpu_sharing_by_class: dict[Name, GpuSharing] = {}
    kubelet: Kubelet = Kubelet()
    tenants: list[Tenant] = []
    cni: Cni = Cni()
    oidc: Oidc | None = Field(None, description="People authenticate with the issuer's "
                              "tokens (an AuthenticationConfiguration for the API server); "
                              "none: client certificates and service accounts only.")


# --- storage and identity ----------------------------------------------------

class Export(Strict):
    name: Name
    server: Name
    path: StoragePath
    segment: Name
    options: OptionList = "rw,sync,no_subtree_check,root_squash"
    reason: FreeText = Field("", description="Why its options weaken it (no_root_squash); "
                             "without one `estate check` warns.")


class Mount(Strict):
    export: Name
    path: StoragePath
    clients: HostlistExpr
    options: OptionList = "defaults,_netdev,vers=4.2"


class Storage(Strict):
    exports: list[Export] = []
    mounts: list[Mount] = []


Source = Literal["local", "directory"]
_SOURCE = ("Where the account lives: local (written into every node's passwd/group) or "
           "directory (identity.directory's LDAP, resolved through SSSD; the spec keeps its "
           "id so that estate check and the admission policies can use it).")


class Group(Strict):
    name: Name
    gid: int = Field(ge=0, le=2**31)
    source: Source = Field("local", description=_SOURCE)


class User(Strict):
    name: Name
    uid: int = Field(ge=0, le=2**31)
    group: Name
    home: AbsolutePath | None = None
    shell: AbsolutePath = "/bin/bash"
    system: bool = False
    source: Source = Field("local", description=_SOURCE)


class SecretRef(Strict):
    """Where `estate apply` finds a secret, as for the munge key: a file of the secrets
    directory, or a base64 environment variable. Never the secret itself."""
    file: RelativeFile = Field(description="Its file in the secrets directory "
                               "(--secrets-dir), e.g. ldap-bind.secret.")
    env: SecretEnv = Field(description="The variable that carries it base64-encoded "
                           "instead, e.g. ESTATE_LDAP_BIND_B64.")


class DirectoryCache(Strict):
    """What a node keeps from the directory, so that it works on without it."""
    offline_hours: int = Field(1, ge=1, le=720, description="How long a node that has lost "
                               "the directory keeps resolving users and logging them in from "
                               "its cache (sssd entry and credential cache).")


def _secret_form(value) -> str:
    return "ref[SecretRef]" if isinstance(value, (dict, SecretRef)) else "inline[str]"


# A reference, or (refused by estate check, identity.bind_secret_inline) a password written
# inline: tagged, so that a bad reference is reported at its own fields only.
BindSecret = Annotated[Union[Annotated[SecretRef, Tag("ref[SecretRef]")],
                             Annotated[SecretStr, Tag("inline[str]")]],
                       Discriminator(_secret_form)]


class Directory(Strict):
    """An LDAP directory (FreeIPA, Active Directory, OpenLDAP) that the nodes of both planes
    resolve people through, with SSSD (docs/identity.md)."""
    uris: list[LdapUri] = Field(min_length=1, max_length=8, description="The servers, "
                                "tried in order: ldaps://HOST[:PORT], or ldap://HOST[:PORT] "
                                "with start_tls.")
    start_tls: bool = Field(False, description="Upgrade ldap:// connections with StartTLS; "
                            "estate check refuses ldap:// without it.")
    users_base: LdapDn = Field(description="Search base of the people, e.g. "
                               "ou=people,dc=example,dc=org.")
    groups_base: LdapDn = Field(description="Search base of the groups, e.g. "
                                "ou=groups,dc=example,dc=org.")
    bind_dn: LdapDn | None = Field(None, description="The service account SSSD binds as; "
                                   "none: anonymous binds.")
    bind_secret: BindSecret | None = Field(None, description="Where the bind "
                                                      "account's password is found: "
                                                      "{file, env}. A password written here "
                                                      "is refused by estate check.")
    ca: AbsolutePath | Literal["estate"] = Field(description="The CA certificate that "
                                                 "signs the servers, as a path on the nodes, "
                                                 "or estate (the estate's own TLS CA).")
    ldap_schema: Literal["rfc2307", "rfc2307bis"] = Field(description=(
        "rfc2307 (memberUid, OpenLDAP's nis schema) or rfc2307bis (member DNs: FreeIPA, "
        "Active Directory with its POSIX attributes)."))
    groups: list[Name] = Field([], description="The directory groups the spec uses "
                               "(identity.groups with source directory); only their members "
                               "may log in to the login nodes.")
    cache: DirectoryCache = DirectoryCache()


class Identity(Strict):
    groups: list[Group] = []
    users: list[User] = []
    directory: Directory | None = Field(None, description="Resolve the spec's directory "
                                        "users and groups from LDAP through SSSD on every "
                                        "node; none: every account is a local file entry.")


# --- firewall ----------------------------------------------------------------

Port = Annotated[int, Field(ge=1, le=65535)]


class Flow(Strict):
    """A flow the defaults (derived from roles, estate.model.flows) do not have, or one that
    replaces the default of the same name."""
    name: Name
    to: HostlistExpr = Field(description="Nodes that accept the flow.")
    segment: Name = Field(description="Segment it travels on: the nodes' addresses there.")
    proto: Literal["tcp", "udp"] = "tcp"
    port: Port
    port_end: Port | None = Field(None, description="Last port of a range starting at port.")
    from_roles: list[Role] = Field([], description="Nodes with these roles may connect.")
    from_hosts: HostlistExpr | None = Field(None, description="These nodes may connect.")
    from_cidrs: list[IPv4Cidr] = Field([], description="Addresses outside the estate's nodes.")
    reason: FreeText = Field(min_length=1, description="Why the estate needs this flow.")


Launcher = Literal["nccl", "openmpi", "torchrun"]


class JobTraffic(Strict):
    """Traffic between the tasks of a job that spans nodes (docs/jobs.md): every port
    between the Slurm workers unless narrowed."""
    ports: tuple[Port, Port] | None = Field(None, description="Narrow job traffic to this "
                                            "port range (first, last); none: every port. "
                                            "Open MPI's MCA parameters and torchrun's "
                                            "MASTER_PORT are rendered inside it.")
    launchers: list[Launcher] = Field([], description="What the site's jobs use to talk "
                                      "between nodes: estate check refuses a narrowing one "
                                      "of them cannot live with (NCCL cannot pin its ports).")
    conntrack_max: int | None = Field(None, ge=1024, le=2**31 - 1, description="The workers' "
                                      "net.netfilter.nf_conntrack_max, where job traffic "
                                      "stays tracked (no fabric); default: the kernel's "
                                      "262144 of a machine with 4 GiB or more.")


class Firewall(Strict):
    admin: list[IPv4Cidr] | None = Field(None, description="Admin hosts and the provisioner: "
                                         "ssh, kube-apiserver and slurmrestd from here. Default: "
                                         "the management segment's reserved block.")
    monitoring: list[IPv4Cidr] = Field([], description="Scrapers outside the estate's "
                                       "nodes (a central Prometheus) that may scrape the "
                                       "nodes' exporters too, besides monitoring.host.")
    srun_ports: tuple[Port, Port] = Field((60001, 63000), description="SrunPortRange: the "
                                          "ports srun listens on, opened between Slurm nodes.")
    flows: list[Flow] = Field([], description="Extra flows; one named like a default flow "
                              "replaces it (estate check refuses one that cuts a required flow).")
    jobs: JobTraffic = Field(JobTraffic(), description="Job traffic between the Slurm "
                             "workers (and back to the login nodes' launchers).")


# --- monitoring --------------------------------------------------------------

class AlertThresholds(Strict):
    """When the rendered alerts fire (estate.model.monitoring writes the rules)."""
    queue_delay_s: int = Field(1800, ge=60, le=30 * 86400, description="SchedulerQueueDelay: "
                               "a Slurm job has waited this long (seconds) for Resources or "
                               "Priority while no node of its partition is down or drained.")
    deployment_failed_s: int = Field(600, ge=60, le=86400, description="ContainerDeployment"
                                     "Failed: seconds a Deployment has had unavailable "
                                     "replicas, or a container has waited in CrashLoopBackOff, "
                                     "ImagePullBackOff or ErrImagePull.")
    nfs_retransmit_ratio: float = Field(0.01, gt=0, le=1, description="SharedFilesystem"
                                        "Degraded: NFS RPC retransmissions per request on a node's "
                                        "mount, over 5 minutes.")
    nfs_latency_ms: int = Field(100, ge=1, le=600_000, description="SharedFilesystemDegraded: "
                                "average NFS RPC time (queued to answered, ms) on a node's "
                                "mount, over 5 minutes.")
    capacity_wait_s: int = Field(600, ge=60, le=86400, description="KubernetesCapacityWait: "
                                 "seconds a pod has been Pending and not scheduled (no node "
                                 "with the GPUs or resources it asks, or Kueue holding it "
                                 "for quota).")
    hold_s: int = Field(300, ge=10, le=86400, description="How long a cause lasts before its "
                        "alert fires (the rules' `for:`) for every alert without its own "
                        "above: a queue delay, a degraded or dead filesystem, a scrape target "
                        "down, the Slurm exporter failing to read Slurm, rule evaluation and "
                        "notification failures. A lab keeps it short so that a drill fires "
                        "within a minute.")


class AlertReceiver(Strict):
    """Where Alertmanager sends a group of alerts: webhooks and mail addresses (none: the
    alerts stay in Alertmanager's UI and API only)."""
    name: Name
    webhooks: list[WebUrl] = Field([], max_length=16, description="URLs Alertmanager POSTs "
                                   "each notification to (its webhook JSON).")
    emails: list[EmailAddress] = Field([], max_length=16, description="Addresses mailed "
                                       "through monitoring.alertmanager.smtp.")
    send_resolved: bool = Field(True, description="Notify when the alerts resolve too.")


class AlertRoute(Strict):
    """The alerts of a plane (their `plane` label: slurm, kubernetes or storage), or of one
    tenant there (their `tenant` label: the Slurm account, the Kubernetes namespace, the NFS
    client node), go to a receiver."""
    plane: Name = Field(description="An alert plane: slurm, kubernetes or storage.")
    tenant: Name | None = Field(None, description="One tenant of the plane; none: the whole "
                                "plane (a tenant's own route wins over its plane's).")
    receiver: Name = Field(description="A receiver of monitoring.alertmanager.receivers.")


class Smtp(Strict):
    """The relay the mail receivers send through: it must accept the monitoring host without
    a password (a rendered tree holds no secrets), e.g. by its address."""
    smarthost: DnsName
    port: int = Field(587, ge=1, le=65535)
    sender: EmailAddress = Field(description="The From address of the notifications.")
    require_tls: bool = Field(True, description="STARTTLS or refuse to send.")


class Watchdog(Strict):
    """The dead man's switch: the Watchdog alert always fires, and Alertmanager sends it to
    this receiver every repeat interval; a service outside the estate that stops hearing it
    knows Prometheus, its rules or Alertmanager have gone silent."""
    receiver: Name = Field(description="A receiver of monitoring.alertmanager.receivers (its "
                           "webhook is the outside service's heartbeat URL).")
    repeat_interval_s: int = Field(300, ge=60, le=86400, description="Seconds between two "
                                   "Watchdog notifications: the outside service's timeout "
                                   "must be longer.")


class Alertmanager(Strict):
    """Alertmanager on the monitoring host, which Prometheus sends its alerts to."""
    receiver: Name | None = Field(None, description="Where alerts no route takes go; none: "
                                  "nowhere (they stay visible in Alertmanager's UI and API).")
    receivers: list[AlertReceiver] = Field([], max_length=256)
    routes: list[AlertRoute] = Field([], max_length=4096)
    smtp: Smtp | None = None
    group_wait_s: int = Field(30, ge=0, le=3600, description="Seconds a new group of alerts "
                              "waits for more before its first notification.")
    group_interval_s: int = Field(300, ge=10, le=86400, description="Seconds between a "
                                  "group's notifications of new alerts.")
    repeat_interval_s: int = Field(14400, ge=60, le=30 * 86400, description="Seconds before "
                                   "a notification already sent is sent again.")
    watchdog: Watchdog | None = Field(None, description="Where the always-firing Watchdog "
                                      "alert goes (none: it stays in Alertmanager's UI and "
                                      "API, and nothing outside notices a silent Prometheus).")


class Monitoring(Strict):
    """Prometheus on one node of the estate, scraping both planes' exporters; the only node
    the exporters' flows admit (estate.model.flows)."""
    host: Name = Field(description="The node that runs Prometheus (a node of spec.nodes).")
    segment: Name = Field("management", description="Segment scraped over: the targets are "
                          "the nodes' addresses there, and the exporters' flows travel on it.")
    retention_days: int = Field(15, ge=1, le=3650, description="How long Prometheus keeps "
                                "samples (--storage.tsdb.retention.time).")
    scrape_interval_s: int = Field(30, ge=5, le=600, description="Seconds between scrapes "
                                   "and between rule evaluations.")
    alerts: AlertThresholds = AlertThresholds()
    alertmanager: Alertmanager = Field(Alertmanager(), description="Alertmanager on the "
                                       "monitoring host: receivers and the routes from the "
                                       "alerts' plane and tenant to them (none: it runs, and "
                                       "keeps the alerts to itself).")


# --- the whole estate --------------------------------------------------------

class Spec(Strict):
    name: Name
    description: FreeText = ""
    segments: list[Segment] = Field(min_length=1)
    node_classes: list[NodeClass] = Field(min_length=1)
    nodes: list[NodeGroup] = Field(min_length=1)
    topology: Topology = Topology()
    slurm: Slurm
    kubernetes: Kubernetes | None = None
    storage: Storage = Storage()
    identity: Identity = Identity()
    firewall: Firewall = Firewall()
    monitoring: Monitoring | None = Field(None, description="Telemetry across both planes: "
                                          "Prometheus, its scrape targets and alerts "
                                          "(none: nothing is rendered for it).")
