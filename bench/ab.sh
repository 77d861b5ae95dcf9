#!/usr/bin/env bash
# Old against new on the same machine, alternating runs: a whole `estate ...` process of
# commit OLD (a throwaway worktree) and of this checkout, N times each, then the medians.
# Alternating puts a shared machine's slow spells on both sides alike.
# Usage: bench/ab.sh OLD N estate-args...   e.g. bench/ab.sh 5ec002a 21 check SPEC
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1 n=$2; shift 2
wt=$(mktemp -d /tmp/estate-ab.XXXXXX)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"' EXIT
git worktree add -q --detach "$wt" "$old"
unset PYTHONDONTWRITEBYTECODE
py=$PWD/.venv/bin/python
for _ in $(seq "$n"); do
  for side in old new; do
    dir=$PWD; [ "$side" = old ] && dir=$wt
    s=$(date +%s.%N)
    (cd "$dir" && PYTHONPATH=$dir "$py" -m estate "$@" >/dev/null 2>&1) || true
    echo "$side $(echo "$(date +%s.%N) - $s" | bc)"
  done
done | "$py" -c '
import statistics, sys
t = {}
for line in sys.stdin:
    side, s = line.split(); t.setdefault(side, []).append(float(s))
for side in ("old", "new"):
    print(f"{side} median {statistics.median(t[side]):.3f} s of {len(t[side])}")
old, new = statistics.median(t["old"]), statistics.median(t["new"])
print(f"change {new / old - 1:+.0%}")'
