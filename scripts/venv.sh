#!/usr/bin/env bash
# Creates .venv with the pinned dependencies; re-installs only when pyproject.toml changes.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.pyproject.sha256
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then exit 0; fi
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test]'
echo "$want" > "$stamp"
