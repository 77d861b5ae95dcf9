#!/usr/bin/env bash
# Runs every molecule scenario (roles/<role>/molecule/default), one after another:
# destroy, create, converge (pyinfra), idempotence, verify (testinfra), destroy.
# They share the lab's node image and the lab spec's subnets, so the Vagrant lab must be
# down (Docker refuses two networks with one subnet). Usage: vagrant/molecule.sh [ROLE...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 PY_COLORS=0
scripts/start-dockerd.sh
if [ -n "$(docker ps -q --filter label=estate-lab=1)" ]; then
  echo "the Vagrant lab is up and holds the lab's subnets: run 'make lab-down' first" >&2
  exit 1
fi
vagrant/image/build.sh >/dev/null
# What an interrupted run left (the scenarios start with create, not destroy).
docker ps -aq --filter "name=^estate-mol-" | xargs -r docker rm -f >/dev/null
docker network ls -q --filter label=estate-mol=1 | xargs -r docker network rm >/dev/null
.venv/bin/python -m estate.lab.molecule scaffold
mkdir -p build
roles=("$@")
if [ ${#roles[@]} -eq 0 ]; then
  mapfile -t roles < <(.venv/bin/python -m estate.lab.molecule list)
fi
failed=()
for role in "${roles[@]}"; do
  start=$SECONDS
  # molecule keys its state (created: true ...) by the role directory's name only, under
  # ~/.ansible/tmp, so an interrupted run in any clone made the next one skip create and
  # converge into a container that no longer exists. Each run gets fresh state here.
  state="$PWD/build/molecule-state/$role"
  rm -rf "$state" && mkdir -p "$state"
  if (cd "roles/$role" && MOLECULE_EPHEMERAL_DIRECTORY="$state" molecule test) \
      > "build/molecule-$role.log" 2>&1; then
    echo "molecule $role: passed in $((SECONDS - start)) s"
  else
    echo "molecule $role: FAILED in $((SECONDS - start)) s (build/molecule-$role.log)"
    tail -30 "build/molecule-$role.log"
    failed+=("$role")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed scenarios: ${failed[*]}" >&2
  exit 1
fi
