#!/bin/sh
# The live tier's epilog: slurmd runs it as root on each node when a job ends there (a failure
# drains the node). The tier leaves a mark that it ran.
mkdir -p /run/estate-hooks
echo "$SLURM_JOB_ID" > "/run/estate-hooks/epilog-$SLURM_JOB_ID"
