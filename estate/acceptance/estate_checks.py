"""Estate's acceptance checks for ReFrame: a Slurm cluster as its users use it.

Run as a user, never as root, with the site configuration Estate renders beside this file
(/etc/estate/reframe/settings.py on the login nodes):

    reframe -C settings.py -c estate_checks.py -r --tag quick --system CLUSTER:login

Tags say what a check needs:

- quick: no shared filesystem. These run on the `login` partition (the login node, the
  local scheduler) and drive srun, salloc and sbatch themselves. What srun and salloc
  print streams back to the login node over srun's own connection, and batch jobs are
  judged from sacct, not from files their nodes wrote (a batch job's output lands on its
  first node, which the login node cannot read without shared storage).
- shared-fs: ReFrame's own way, a job script per test in its stage directory, which the
  job's nodes must read and write: a filesystem the login node and the workers share
  (the VM tier's NFS home). Run with --stage and --output on it.
- driver: needs root on a node for part of the check. Estate's runner
  (estate.verify.reframe) runs it and does that part: it kills slurmd on the node the
  requeue check's job runs on.
- bridge: calls slurmrestd's TLS front with a tenant's token; only the admin hosts and the
  tenants' nodes may reach it, so it runs from an admin host (--system CLUSTER:bridge),
  with ESTATE_BRIDGE_TOKEN_FILE and ESTATE_BRIDGE_CA naming the token and the estate's CA.

ESTATE_REFRAME_BROKEN names checks (class names, comma-separated) whose sanity expects
one node, task or GPU more than is true: the suite must then report them failed (the
broken-on-purpose case of the tests).
"""
import os
import re
import shlex
import sys

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import run_after, run_before, sanity_function

WAIT = 180  # seconds a job may take, queued and run, before the check gives up
# sacct's rows once slurmdbd holds the job's end: it records it a moment after sbatch --wait
SACCT = ('sacct_done() {{ for i in $(seq 30); do out=$(sacct -j "$1" -n -P -o {fields}); '
         'case "$out" in *PENDING*|*RUNNING*|*REQUEUED*|"") sleep 1;; *) break;; esac; '
         'done; printf "%s\\n" "$out"; }}')


def broken(check) -> int:
    """1 where ESTATE_REFRAME_BROKEN names the check: its sanity then expects one more."""
    names = os.environ.get("ESTATE_REFRAME_BROKEN", "").split(",")
    return 1 if type(check).__name__ in names else 0


def slurm_partition(login, min_nodes: int = 1, min_gpus: int = 0):
    """The facts of the Slurm partition a login check submits to (the login partition's
    extras list them): the default partition if it has the nodes and GPUs, else the first
    visible one that has, else None."""
    found = [p for p in login.extras["slurm_partitions"]
             if p["nodes"] >= min_nodes and p["gpus_per_node"] >= min_gpus]
    found.sort(key=lambda x: (not x["default"], x["hidden"]))
    return found[0] if found else None


class LoginCheck(rfm.RunOnlyRegressionTest):
    """A check the login node runs itself (the local scheduler): the commands it drives
    submit to the Slurm partition that slurm_partition() picks."""
    valid_systems = ["*:login"]
    valid_prog_environs = ["builtin"]
    time_limit = "10m"
    min_nodes, min_gpus = 1, 0
    executable = "true"
    tags = {"quick", "estate"}

    @run_after("setup")
    def pick_partition(self):
        self.target = slurm_partition(self.current_partition, self.min_nodes, self.min_gpus)
        self.skip_if(self.target is None, f"no Slurm partition with {self.min_nodes} "
                     f"nodes and {self.min_gpus} GPUs per node")
        self.part = self.target["slurm_partition"]
        self.prerun_cmds = [SACCT.format(fields=self.sacct_fields)] + self.script()

    sacct_fields = "JobID,State,NodeList"

    def script(self) -> list[str]:
        raise NotImplementedError


@rfm.simple_test
class BatchStepsOnTwoNodes(LoginCheck):
    """A batch job whose srun steps run on its 2 nodes: each step completes, and the
    first ran on two distinct nodes (sacct's NodeList, expanded by scontrol)."""
    descr = "a batch job with srun steps on 2 nodes"
    min_nodes = 2

    def script(self):
        return [f"job=$(timeout {WAIT} sbatch --wait --parsable -p {self.part} -N2 -t 3 "
                "-D /tmp -o /dev/null --wrap 'srun -N2 -n2 hostname; srun -N2 -n2 true')",
                'sacct_done "$job"',
                'echo "step0-nodes $(scontrol show hostnames $(sacct -j "$job.0" -n -P '
                '-o NodeList) | sort -u | wc -l)"']

    @sanity_function
    def validate(self):
        rows = dict(sn.evaluate(sn.extractall(r"^\d+(\.\w+|)\|(\w+)\|", self.stdout,
                                              (1, 2))))
        return sn.all([sn.assert_true({"", ".batch", ".0", ".1"} <= set(rows),
                                      msg=f"sacct's job and steps: {rows}"),
                       sn.assert_eq(set(rows.values()), {"COMPLETED"}),
                       sn.assert_eq(sn.extractsingle(r"^step0-nodes (\d+)", self.stdout, 1,
                                                     int), 2 + broken(self))])


@rfm.simple_test
class JobArray(LoginCheck):
    """A 3-task job array: every task completes (sacct -X, one row each)."""
    descr = "a job array"
    sacct_fields = "JobID,State"

    def script(self):
        return [f"job=$(timeout {WAIT} sbatch --wait --parsable -p {self.part} -N1 -t 3 "
                "--array=1-3 -D /tmp -o /dev/null --wrap 'srun hostname')",
                # sacct splits the array into its tasks a moment after the job ends
                'for i in $(seq 30); do [ "$(sacct -j "$job" -X -n -P -o JobID,State | '
                'grep -c "^[0-9]*_[0-9]*|COMPLETED")" -ge 3 ] && break; sleep 1; done',
                'sacct -j "$job" -X -n -P -o JobID,State']

    @sanity_function
    def validate(self):
        tasks = sn.extractall(r"^\d+_(\d+)\|COMPLETED", self.stdout, 1, int)
        return sn.assert_eq(sn.sorted(tasks), list(range(1, 4 + broken(self))))


@rfm.simple_test
class OneGpuPerStep(LoginCheck):
    """Two steps side by side in a 2-GPU allocation, each given one GPU (--gres=gpu:1
    --exact): each task sees exactly one CUDA_VISIBLE_DEVICES index, and where Slurm says
    which GPU of the node a step has (SLURM_STEP_GPUS), the two steps' differ."""
    descr = "one GPU per step (each task's CUDA_VISIBLE_DEVICES)"
    min_gpus = 2

    def script(self):
        # the variables are expanded by each task's shell, on the node
        step = ('srun -n1 --gres=gpu:1 --exact sh -c "echo step \\$SLURM_STEP_ID '
                'cuda=\\$CUDA_VISIBLE_DEVICES node_gpus=\\${SLURM_STEP_GPUS:-?}"')
        return [f"timeout {WAIT} salloc -p {self.part} -N1 -n2 --gres=gpu:2 -t 3 "
                f"sh -c '{step} & {step} & wait'"]

    @sanity_function
    def validate(self):
        steps = sn.evaluate(sn.extractall(r"^step \d+ cuda=(\S*) node_gpus=(\S+)",
                                          self.stdout, (1, 2)))
        known = [g for _, g in steps if g != "?"]
        return sn.all([sn.assert_eq(len(steps), 2 + broken(self)),
                       sn.assert_true(all(c.isdigit() for c, _ in steps),
                                      msg=f"one GPU index per step: {steps}"),
                       sn.assert_eq(len(set(known)), len(known),
                                    msg="two steps were given the same GPU: {0} != {1}")])


@rfm.simple_test
class InteractiveSalloc(LoginCheck):
    """An interactive allocation: salloc grants 2 nodes and srun runs on both."""
    descr = "an interactive salloc"
    min_nodes = 2

    def script(self):
        return [f"timeout {WAIT} salloc -p {self.part} -N2 -t 3 srun -N2 -n2 hostname"]

    @sanity_function
    def validate(self):
        hosts = set(sn.evaluate(sn.extractall(r"^(\S+)$", self.stdout, 1)))
        return sn.all([sn.assert_found(r"Granted job allocation", self.stderr),
                       sn.assert_eq(len(hosts), 2 + broken(self))])


@rfm.simple_test
class AccountingRecordsTheJob(LoginCheck):
    """sacct shows a GPU job's account (the user's default account, from sacctmgr), its
    partition and gres/gpu among its allocated TRES."""
    descr = "accounting: sacct shows the account, the partition and gres/gpu"
    min_gpus = 1
    sacct_fields = "JobID,State,Account,Partition,AllocTRES"

    @run_after("setup")
    def needs_accounting(self):
        self.skip_if(not self.current_partition.extras["accounting"],
                     "the cluster keeps no accounting (no slurmdbd)")

    def script(self):
        return [f"job=$(timeout {WAIT} sbatch --wait --parsable -p {self.part} -N1 -t 3 "
                "--gres=gpu:1 -D /tmp -o /dev/null --wrap 'srun true')",
                'echo "default-account $(sacctmgr -n -P show user "$(id -un)" '
                'format=DefaultAccount)"',
                'sacct_done "$job" >/dev/null',
                # slurmdbd fills in the partition a moment after the job's end
                'for i in $(seq 30); do [ -n "$(sacct -j "$job" -X -n -P -o Partition)" ] '
                '&& break; sleep 1; done',
                'sacct -j "$job" -X -n -P -o JobID,State,Account,Partition,AllocTRES']

    @sanity_function
    def validate(self):
        account = sn.evaluate(sn.extractsingle(r"^default-account (\S+)", self.stdout, 1))
        got, part, tres = sn.evaluate(sn.extractsingle(
            r"^\d+\|COMPLETED\|([^|]+)\|([^|]+)\|(\S*)$", self.stdout, (1, 2, 3)))
        return sn.all([
            sn.assert_eq(got, account), sn.assert_eq(part, self.part),
            sn.assert_true(re.search(rf"(^|,)gres/gpu={1 + broken(self)}(,|$)", tres),
                           msg=f"AllocTRES {tres}: not gres/gpu={1 + broken(self)}")])


@rfm.simple_test
class BatchStepsSharedStage(rfm.RunOnlyRegressionTest):
    """ReFrame's own batch job on a Slurm partition: 2 tasks, one per node, launched by
    srun from the job script in the stage directory; ReFrame reads their output there."""
    descr = "a batch job with srun steps on 2 nodes (ReFrame's job script, shared stage)"
    valid_systems = ["+slurm +multinode"]
    valid_prog_environs = ["builtin"]
    num_tasks, num_tasks_per_node = 2, 1
    executable = "hostname"
    prerun_cmds = ["srun true"]
    time_limit = "3m"
    tags = {"shared-fs", "estate"}

    @sanity_function
    def validate(self):
        hosts = set(sn.evaluate(sn.extractall(r"^(\S+)$", self.stdout, 1)))
        return sn.assert_eq(len(hosts), 2 + broken(self))


# MPI hello in Python: mpi4py over Debian's Open MPI (the catalogue's pmix extra puts both on
# the workers and login nodes), so that no compiler or MPI headers are needed on any node.
HELLO = ("from mpi4py import MPI; c = MPI.COMM_WORLD; "
         'print("hello from rank %d of %d on %s" % '
         "(c.Get_rank(), c.Get_size(), MPI.Get_processor_name()), flush=True)")


@rfm.simple_test
class MpiHelloOverPmix(rfm.RunOnlyRegressionTest):
    """MPI hello on 2 nodes, one rank each, wired up by srun --mpi=pmix (the environment's
    MPI, MpiDefault): each rank reports its rank, the world's size and its node, from the
    job script in the shared stage directory."""
    descr = "MPI hello over PMIx across 2 nodes"
    valid_systems = ["+slurm +multinode"]
    valid_prog_environs = ["+mpi"]
    executable = "python3"
    executable_opts = ["-c", shlex.quote(HELLO)]
    num_tasks, num_tasks_per_node = 2, 1
    time_limit = "3m"
    tags = {"shared-fs", "estate"}

    @run_before("run")
    def pmix(self):
        self.job.launcher.options = [f"--mpi={self.current_environ.extras['mpi']}"]

    @sanity_function
    def validate(self):
        ranks = sn.evaluate(sn.extractall(r"hello from rank (\d+) of (\d+) on (\S+)",
                                          self.stdout, (1, 2, 3)))
        return sn.all([
            sn.assert_eq(sorted(int(r) for r, _, _ in ranks), list(range(2 + broken(self)))),
            sn.assert_eq({size for _, size, _ in ranks}, {"2"}),
            sn.assert_eq(len({host for _, _, host in ranks}), 2)])


@rfm.simple_test
class JobRequeuedWhenSlurmdDies(LoginCheck):
    """A requeueable job whose node's slurmd dies: Slurm requeues it, and it completes on
    another node. The runner (estate.verify.reframe) kills slurmd on the node the job
    named estate-requeue runs on, as root there; this check only submits and judges."""
    descr = "a job requeued when its node's slurmd dies, completing elsewhere"
    min_nodes = 2
    time_limit = "15m"
    tags = {"driver", "estate"}
    sacct_fields = "JobID,State,NodeList"

    def script(self):
        return [f"job=$(sbatch --parsable --requeue -J estate-requeue -p {self.part} -N1 "
                "-t 5 -D /tmp -o /dev/null --wrap 'sleep 30')",
                # the runner kills its node's slurmd: wait for the job to end elsewhere
                "for i in $(seq 600); do s=$(sacct -j \"$job\" -X -n -P -o State); "
                "[ \"$s\" = COMPLETED ] && break; sleep 1; done",
                'sacct -j "$job" -X -D -n -P -o JobID,State,NodeList']

    @sanity_function
    def validate(self):
        rows = sn.evaluate(sn.extractall(r"^\d+\|(\w+)\|(\S+)$", self.stdout, (1, 2)))
        return sn.all([
            sn.assert_ge(len(rows), 2 + broken(self), msg="runs of the job: {0} < {1}"),
            sn.assert_eq(rows[-1][0], "COMPLETED"),
            sn.assert_ne(rows[0][1], rows[-1][1], msg="requeued onto its own node {0}")])


@rfm.simple_test
class BridgeJobAsTenant(rfm.RunOnlyRegressionTest):
    """A job submitted over the bridge with each tenant's token (slurmrestd through its TLS
    front, the certificate checked against the estate's CA) runs as the grant's user,
    charged to the grant's account, and completes."""
    descr = "a job submitted over the bridge as the tenant"
    valid_systems = ["*:bridge"]
    valid_prog_environs = ["builtin"]
    executable = sys.executable
    time_limit = "5m"
    tags = {"bridge", "estate"}

    @run_after("setup")
    def needs_token(self):
        self.token_file = os.environ.get("ESTATE_BRIDGE_TOKEN_FILE", "")
        self.ca = os.environ.get("ESTATE_BRIDGE_CA", "")
        self.skip_if(not (self.token_file and self.ca), "set ESTATE_BRIDGE_TOKEN_FILE and "
                     "ESTATE_BRIDGE_CA: a tenant's token and the estate's CA")
        extras = self.current_partition.extras
        self.grant = extras["grants"][0]
        self.executable_opts = ["-c", "'import sys; exec(open(sys.argv[1]).read())'",
                                "bridge.py", extras["url"], extras["api"], self.token_file,
                                self.ca, self.grant["user"], self.grant["account"],
                                self.grant["partition"], self.grant["qos"] or ""]

    @run_before("run")
    def write_client(self):
        with open(os.path.join(self.stagedir, "bridge.py"), "w") as f:
            f.write(BRIDGE_CLIENT)

    @sanity_function
    def validate(self):
        user = sn.extractsingle(r"^user (\S+)", self.stdout, 1)
        return sn.all([sn.assert_found(r"^state COMPLETED", self.stdout),
                       sn.assert_eq(user, self.grant["user"] + "x" * broken(self)),
                       sn.assert_eq(sn.extractsingle(r"^account (\S+)", self.stdout, 1),
                                    self.grant["account"])])


# Run on the admin host by the bridge check: Estate's own bridge client and job body
# (the same code `estate verify` and the live tier call slurmrestd with).
BRIDGE_CLIENT = r"""
import json, sys, time
from estate.model.bridge import REST_API, job_request
from estate.verify.bridge import call
url, api, token_file, ca, user, account, partition, qos = sys.argv[1:9]
token = open(token_file).read().strip()
version = next(v for v, a in REST_API.items() if a == api)
body = job_request(version, "#!/bin/sh\nid -un\n", name="estate-reframe-bridge",
                   partition=partition, account=account, qos=qos or None)
status, answer = call(url, ca, token, user, "POST", f"/slurm/{api}/job/submit", body)
job = (answer.get("result") or {}).get("job_id") or answer.get("job_id")
print("submitted", status, job)
rec = {}
for _ in range(90):
    status, answer = call(url, ca, token, user, "GET", f"/slurm/{api}/job/{job}")
    rec = (answer.get("jobs") or [{}])[0]
    state = rec.get("job_state")
    state = state if isinstance(state, list) else [state]
    if set(state) & {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}:
        break
    time.sleep(1)
print("state", " ".join(str(s) for s in state))
print("user", rec.get("user_name"))
print("account", rec.get("account"))
"""
