#!/usr/bin/env python3
"""Slurm's clients as the unit tier's ReFrame runs meet them: each prints what Debian's
Slurm 22.05 printed for the same command in the Docker lab (2 nodes gpu[1-2], 2 GPUs
each, user alice of account research). Linked as sbatch, salloc, srun, sacct, sacctmgr
and scontrol; the job's id says which check submitted it."""
import os
import sys

name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
text = " ".join(args)
JOBS = {"--array": "43", "--gres=gpu:1": "44"}


def opt(flag):
    return args[args.index(flag) + 1] if flag in args else ""


if name == "sbatch":
    print(next((j for k, j in JOBS.items() if k in text), "42"))
elif name == "sacctmgr":
    print("research")
elif name == "scontrol":   # show hostnames gpu[1-2]
    print("gpu1\ngpu2" if "[" in text else args[-1])
elif name == "sacct":
    job, fields = opt("-j"), opt("-o")
    if fields == "Partition":
        print("gpu")
    elif job == "42.0":
        print("gpu[1-2]")
    elif job == "43":
        print("\n".join(f"43_{i}|COMPLETED" for i in (1, 2, 3)))
    elif job == "44" and "AllocTRES" in fields:
        print("44|COMPLETED|research|gpu|billing=2,cpu=2,gres/gpu=1,mem=3840M,node=1")
    else:
        print(f"{job}|COMPLETED|gpu[1-2]\n{job}.batch|COMPLETED|gpu1\n"
              f"{job}.0|COMPLETED|gpu[1-2]\n{job}.1|COMPLETED|gpu[1-2]")
elif name == "salloc":
    print("salloc: Granted job allocation 45", file=sys.stderr)
    first = next(i for i, a in enumerate(args) if a in ("srun", "sh"))
    os.execvp(args[first], args[first:])
elif name == "srun":
    if args[-1] == "hostname":
        print("gpu1\ngpu2")
    else:   # one step of OneGpuPerStep: its own GPU of the node, seen as index 0
        step = 0
        while True:   # the two steps start together: each claims its number atomically
            try:
                os.close(os.open(os.path.join(os.environ["SHIM_STEPS"], str(step)),
                                 os.O_CREAT | os.O_EXCL))
                break
            except FileExistsError:
                step += 1
        step = str(step)
        env = dict(os.environ, SLURM_STEP_ID=step, CUDA_VISIBLE_DEVICES="0",
                   SLURM_STEP_GPUS=step)
        first = args.index("sh")
        os.execvpe("sh", args[first:], env)
