#!/bin/sh
# The live tier's prolog: slurmd runs it as root on each node of a job before the job's first
# step (a failure drains the node). A site checks GPUs, scratch space and the like here;
# the tier leaves a mark that it ran, which the tests look for.
mkdir -p /run/estate-hooks
echo "$SLURM_JOB_ID $SLURM_JOB_USER" > "/run/estate-hooks/prolog-$SLURM_JOB_ID"
