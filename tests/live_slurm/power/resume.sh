#!/bin/sh
# The live tier's ResumeProgram: slurmctld runs it as SlurmUser with the nodes to power up
# (a hostlist). A site calls its BMCs or cloud API here; the tier records the request where
# SlurmUser may write, and the test plays the machine room: it starts those nodes' slurmd.
echo "$1" >> /var/log/slurm/power-resume.log
