#!/bin/sh
# The live tier's SuspendProgram: slurmctld runs it with the idle cloud nodes to power down.
echo "$1" >> /var/log/slurm/power-suspend.log
