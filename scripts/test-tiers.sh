#!/usr/bin/env bash
# Runs the test tiers (make test-<tier>), each to the end even when an earlier one failed,
# and prints one line per tier with its wall time, then the total.
# A running lab (from `make lab`) is taken down first: the tiers bring up their own and
# need its subnets and namespaces; each tier removes what it brought up.
# Groups are run one after another. Within a group, '+' joins lanes that run side by side
# and ',' chains tiers that run one after another in their lane; each tier's log is printed
# when its group ends. The first lane runs at normal priority, the others under `nice`:
# the first starts with the tier whose daemons have deadlines (live Slurm waits on
# slurmctld's timers and uses a tenth of a core); the others soak up the CPU it leaves.
# Usage: scripts/test-tiers.sh GROUP...  (e.g. unit+fuzz live-slurm,vm+molecule,lab)
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
summary=build/test-tiers.txt
: > "$summary"
rm -f build/tier-*.status build/tier-*.log
start_all=$SECONDS
failed=()
echo "== setup: Debian packages, the tiers' tools (estate/catalogue.py) and .venv"
start=$SECONDS
make -s test-deps venv || { echo "setup failed: no tier can run" >&2; exit 1; }
printf 'setup %-12s %-7s %4d s\n' "" done $((SECONDS - start)) | tee -a "$summary"
echo "== lab-down: nothing of a previous lab may hold the tiers' names"
make -s lab-down > build/lab-down.log 2>&1 || { echo "lab-down failed (build/lab-down.log):"; tail -20 build/lab-down.log; }
# A lab from another checkout (its Vagrant state elsewhere) holds the same container names
# and subnets: say so here, where the cause is plain, not as a Docker name conflict later.
if docker info >/dev/null 2>&1; then
  left=$(docker ps -aq --filter label=estate-lab=1)
  [ -z "$left" ] || { echo "lab containers still present after lab-down:"; docker ps -a --filter label=estate-lab=1; }
fi
report() {   # tier status seconds
  printf 'tier %-12s %-7s %4d s\n' "$1" "$2" "$3" | tee -a "$summary"
  [ "$2" = passed ] || failed+=("$1")
}
run_tier() {   # tier: make test-<tier>, its status and seconds in build/tier-<tier>.status
  local t0=$SECONDS s
  if make -s "test-$1"; then s=passed; else s=FAILED; fi
  echo "$s $((SECONDS - t0))" > "build/tier-$1.status"
}
run_lane() {   # tier[,tier...], one after another, each with its own log
  local tier
  IFS=, read -r -a chain <<< "$1"
  for tier in "${chain[@]}"; do run_tier "$tier" > "build/tier-$tier.log" 2>&1; done
}
for group in "$@"; do
  if [[ $group != *[+,]* ]]; then
    echo "== tier $group"
    start=$SECONDS
    if make -s "test-$group"; then status=passed; else status=FAILED; fi
    report "$group" "$status" $((SECONDS - start))
    continue
  fi
  IFS=+ read -r -a lanes <<< "$group"
  echo "== side by side: ${lanes[*]}"
  start=$SECONDS
  pids=()
  for i in "${!lanes[@]}"; do
    if ((i == 0)); then run_lane "${lanes[i]}" &
    else ( renice -n 10 -p "$BASHPID" >/dev/null; run_lane "${lanes[i]}" ) &
    fi
    pids+=($!)
  done
  wait "${pids[@]}"
  for tier in ${group//[+,]/ }; do
    echo "== tier $tier"
    cat "build/tier-$tier.log"
    read -r status secs < "build/tier-$tier.status" || { status=FAILED; secs=0; }
    report "$tier" "$status" "$secs"
  done
  echo "side by side ${group}: $((SECONDS - start)) s"
done
echo
echo "== test tiers (wall time, 2-core machine)"
cat "$summary"
printf 'total %19s %4d s (%d min %02d s)\n' "" $((SECONDS - start_all)) \
  $(((SECONDS - start_all) / 60)) $(((SECONDS - start_all) % 60))
if ((${#failed[@]})); then
  echo "failed tiers: ${failed[*]}" >&2
  exit 1
fi
