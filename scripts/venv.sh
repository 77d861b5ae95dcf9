#!/usr/bin/env bash
# Creates .venv with the pinned dependencies; re-installs only when pyproject.toml, this
# script or the interpreter changes.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's own python3 (packages python3 and python3-venv, estate/catalogue.py) where it can
# make a venv: Debian builds it with profile-guided and link-time optimisation, so Estate
# runs 10-15% faster on it than on an unoptimised build such as pyenv's default
# (BENCHMARKS.md, 2026-12-03: a whole 10,000-node `estate check`, 0.73 -> 0.62 s). Any
# other python3 on PATH otherwise.
py=python3
if /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
  py=/usr/bin/python3
fi
UV_VERSION=0.13.10
# The extra to install: `lab` (what `make lab` runs) or `test` (every tier; it holds lab's).
extra=${1:-test}
stamp=.venv/.pyproject.sha256
base=$( (cat pyproject.toml "$0"; "$py" -c 'import sys; print(sys.executable, sys.version)') |
       sha256sum | cut -d' ' -f1)
# compat: a plain path entry in a .pth file. The default editable mode imports a finder
# module in every interpreter the venv starts, 0.013 s of each `estate` command.
install_extra() {
  .venv/bin/uv pip install -q --python .venv/bin/python -e ".[$extra]" \
      --config-setting editable_mode=compat
  echo "$base $extra" > "$stamp"
}
if [[ -f $stamp ]]; then
  read -r have have_extra < "$stamp" || true
  # a test venv serves the lab too; a lab venv gains the test extra in place
  if [[ $have == "$base" && ( $have_extra == "$extra" || $have_extra == test ) ]]; then exit 0; fi
  if [[ $have == "$base" && $have_extra == lab ]]; then install_extra; exit 0; fi
fi
# a worktree's .venv may be a link to another checkout's venv: never clear through it
if [[ -L .venv ]]; then
  echo "scripts/venv.sh: .venv is a link ($(readlink .venv)); not recreating it here" >&2
  exit 1
fi
"$py" -m venv --clear .venv
# uv installs what pip would, resolved the same way from the same index, in a tenth of the
# time (BENCHMARKS.md: a fresh .venv with the lab extra, 45-78 s with pip, ~8 s with uv);
# it comes into the venv through pip, pinned.
.venv/bin/pip install -q --disable-pip-version-check "uv==$UV_VERSION" 2> >(grep -v "is ignored: it is neither" >&2)
install_extra
