#!/usr/bin/env bash
# Creates .venv/checkov, Checkov's own environment (pyproject's `scan` extra), which
# tests/unit/test_checkov.py runs: its pins conflict with the test extra's (pyproject.toml
# says which). Only the tests need it, so `make lab` does not wait for it (~35 s); `make
# test-unit` makes it. Re-installs only when the extra or this script changes.
set -euo pipefail
cd "$(dirname "$0")/.."
py=python3
if /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then py=/usr/bin/python3; fi
scan=$("$py" -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["scan"]))')
stamp=.venv/checkov/.scan.sha256
want=$( (echo "$scan"; cat "$0") | sha256sum | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then exit 0; fi
"$py" -m venv --clear .venv/checkov
# shellcheck disable=SC2086 # one word per requirement
.venv/checkov/bin/pip install -q $scan
echo "$want" > "$stamp"
