#!/usr/bin/env bash
# Instructions each process of a command executes (valgrind's callgrind, client code only):
# a measure of work that a shared machine's slow spells do not move, unlike wall time.
# A forked child inherits its parent's count at the fork, so for `estate check` the
# numbers read: parent total, child total; each side's own work after the fork is its
# total less the count at the fork (bench/instructions.sh .venv/bin/python -c "..." with
# the same imports, load and gate gives that).
# Usage: bench/instructions.sh COMMAND...  e.g. bench/instructions.sh .venv/bin/python -m estate check SPEC
# Needs valgrind (Debian package valgrind); runs about 50x slower than the command.
set -euo pipefail
command -v valgrind >/dev/null || { echo "bench/instructions.sh needs valgrind (apt-get install valgrind)" >&2; exit 2; }
out=$(mktemp -d /tmp/estate-callgrind.XXXXXX)
trap 'rm -rf "$out"' EXIT
unset PYTHONDONTWRITEBYTECODE
"$@" >/dev/null 2>&1 || true   # bytecode written first: a compile is not the command's work
valgrind --tool=callgrind --callgrind-out-file="$out/cg.%p" "$@" >/dev/null 2>"$out/log" || true
grep -h "Collected" "$out/log" | tr -d = | awk '{printf "pid %s: %.0f M instructions\n", $1, $4 / 1e6}'
