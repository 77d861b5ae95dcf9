#!/usr/bin/env bash
# Runs the test tiers one after another (make test-<tier>), each to the end even when an
# earlier one failed, and prints one line per tier with its wall time, then the total.
# A running lab (from `make lab`) is taken down first: the tiers bring up their own and
# need its subnets and namespaces; each tier removes what it brought up.
# Tiers joined by '+' run side by side (pure-Python tiers on the two cores, each with its
# own log printed when it ends); the others one after another.
# Usage: scripts/test-tiers.sh TIER...   (e.g. unit+fuzz live-slurm lab molecule vm)
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
summary=build/test-tiers.txt
: > "$summary"
start_all=$SECONDS
failed=()
echo "== setup: Debian packages (estate/catalogue.py) and .venv"
start=$SECONDS
make -s deps venv || { echo "setup failed: no tier can run" >&2; exit 1; }
printf 'setup %-12s %-7s %4d s\n' "" done $((SECONDS - start)) | tee -a "$summary"
echo "== lab-down: nothing of a previous lab may hold the tiers' names"
make -s lab-down >/dev/null 2>&1 || true
report() {   # tier status seconds
  printf 'tier %-12s %-7s %4d s\n' "$1" "$2" "$3" | tee -a "$summary"
  [ "$2" = passed ] || failed+=("$1")
}
for group in "$@"; do
  IFS=+ read -r -a tiers <<< "$group"
  if [ ${#tiers[@]} -eq 1 ]; then
    echo "== tier $group"
    start=$SECONDS
    if make -s "test-$group"; then status=passed; else status=FAILED; fi
    report "$group" "$status" $((SECONDS - start))
    continue
  fi
  echo "== tiers ${tiers[*]}, side by side"
  start=$SECONDS
  pids=()
  for tier in "${tiers[@]}"; do
    ( t0=$SECONDS; if make -s "test-$tier"; then s=passed; else s=FAILED; fi
      echo "$s $((SECONDS - t0))" > "build/tier-$tier.status" ) > "build/tier-$tier.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  for tier in "${tiers[@]}"; do
    echo "== tier $tier"
    cat "build/tier-$tier.log"
    read -r status secs < "build/tier-$tier.status" || { status=FAILED; secs=0; }
    report "$tier" "$status" "$secs"
  done
  echo "tiers ${tiers[*]} side by side: $((SECONDS - start)) s"
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
