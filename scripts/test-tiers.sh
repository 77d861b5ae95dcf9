#!/usr/bin/env bash
# Runs the test tiers one after another (make test-<tier>), each to the end even when an
# earlier one failed, and prints one line per tier with its wall time, then the total.
# A running lab (from `make lab`) is taken down first: the tiers bring up their own and
# need its subnets and namespaces; each tier removes what it brought up.
# Usage: scripts/test-tiers.sh TIER...   (e.g. unit fuzz live-slurm lab molecule vm)
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
for tier in "$@"; do
  echo "== tier $tier"
  start=$SECONDS
  if make -s "test-$tier"; then status=passed; else status=FAILED; failed+=("$tier"); fi
  printf 'tier %-12s %-7s %4d s\n' "$tier" "$status" $((SECONDS - start)) | tee -a "$summary"
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
