#!/usr/bin/env bash
# Installs the Debian packages every tier needs. Idempotent and quick when done.
# Used by `make lab` and `make test` (and so by CI on a fresh machine).
# The list is not kept here: estate/catalogue.py derives it from the roles the host runs
# (the namespace lab runs the Slurm roles' daemons here) plus the labs' tools.
set -euo pipefail
cd "$(dirname "$0")/.."
# `install-deps.sh test`: also what only the test tiers use (a browser for the status pages);
# `install-deps.sh image`: only what the lab's node image is built with, so that `make lab`
# builds it while the rest installs.
if [[ ${1:-} == image ]]; then
  mapfile -t PKGS < <(python3 -m estate.catalogue image-tools)
else
  mapfile -t PKGS < <(python3 -m estate.catalogue host; [[ ${1:-} != test ]] || python3 -m estate.catalogue test-tools)
fi
mapfile -t CONFLICTS < <(python3 -m estate.catalogue conflicts)
((${#PKGS[@]})) || { echo "estate.catalogue named no packages" >&2; exit 1; }
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
for p in "${CONFLICTS[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "$p is installed and conflicts with Estate's daemons: removing it" >&2
    apt-get remove -y -q "$p" >/dev/null
  fi
done
# Debian's packages start nothing here (PID 1 is not systemd); the tiers start what they use.
