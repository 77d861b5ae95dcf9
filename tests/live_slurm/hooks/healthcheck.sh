#!/bin/sh
# The live tier's health check (HealthCheckProgram): slurmd runs it every HealthCheckInterval.
# A node is unhealthy while /run/estate-hooks/unhealthy exists; it then drains itself with
# the reason that file holds, as NHC does for a failed check.
if [ -e /run/estate-hooks/unhealthy ]; then
    exec scontrol update NodeName="$(hostname)" State=DRAIN \
        Reason="health check: $(head -c 100 /run/estate-hooks/unhealthy)"
fi
