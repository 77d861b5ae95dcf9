#!/usr/bin/env bash
# Starts dockerd if it is not answering (no systemd on these machines).
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
mkdir -p /var/log
# dockerd outlives this script: it must not inherit the caller's descriptors beyond
# stdio, or it holds their locks for ever (`flock /tmp/estate-lab.lock make ...` would
# leave the lab lock taken by dockerd and every later lab waiting).
(
  for fd in /proc/"$BASHPID"/fd/*; do
    fd=${fd##*/}
    if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
  done
  exec nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null
) &
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 0.5
done
echo "dockerd did not start; see /var/log/dockerd.log" >&2
tail -n 20 /var/log/dockerd.log >&2
exit 1
