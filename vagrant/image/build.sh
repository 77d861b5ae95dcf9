#!/bin/sh
# Build the lab node image once per recipe: the tag is a hash of the files in
# this directory, so an unchanged recipe reuses the image and a changed one
# rebuilds it. Prints the image tag on stdout.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# One build at a time: `make lab` starts one ahead of the lab (while .venv, doctor and the
# namespace lab run), and the lab's own call then waits for it and finds the image.
exec 9>"${TMPDIR:-/tmp}/estate-lab-image.lock"
flock 9
mirror=${ESTATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The host's apt settings for its mirror's Release files, carried into the nodes: a
# mirror that serves a frozen snapshot (this machine's) is only usable with the expiry
# check off, for suites that carry a Valid-Until date (testing: containerd's forky). Where
# the host checks expiry, so do the nodes (nothing is carried).
apt_settings=$(apt-config dump 2>/dev/null \
    | grep -E '^Acquire::(Check-Valid-Until|Check-Date) "(false|0)";$' || true)
# What every lab node's roles install (estate/catalogue.py), preinstalled once here rather
# than by five nodes at once on two cores; the roles still install it (a no-op then). Not
# munge or Slurm: their packages create users the spec gives fixed ids first.
preload=$(cd "$here/../.." && python3 -m estate.catalogue packages common firewall \
    node_exporter --sep ' ')
hash=$( (cd "$here" && cat Dockerfile build.sh ssh-hostkeys.conf sshd-estate.conf;
         printf '%s\n' "$apt_settings" "$preload") | sha256sum | cut -c1-12)
base=estate-lab-base:$hash
node=estate-lab-node:$hash

if docker image inspect "$node" >/dev/null 2>&1; then
    docker tag "$node" estate-lab-node:current
    echo "$node"; exit 0
fi
if ! docker image inspect "$base" >/dev/null 2>&1; then
    root=$(mktemp -d /tmp/estate-lab-root.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    echo "debootstrap bookworm (minbase) into $root" >&2
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 \
        || { tail -20 "$root.log" >&2; exit 1; }
    rm -f "$root.log"
    tar -C "$root" -c . | docker import - "$base" >/dev/null
fi
echo "building $node" >&2
docker build -q --build-arg BASE="$base" --build-arg APT_SETTINGS="$apt_settings" \
    --build-arg PRELOAD="$preload" \
    -t "$node" "$here" >/dev/null
docker tag "$node" estate-lab-node:current
# Older recipes' images are dead weight on a 2-core CI machine's disk.
docker images --format '{{.Repository}}:{{.Tag}}' \
    | grep -E '^estate-lab-(base|node):[0-9a-f]{12}$' | grep -v ":$hash\$" \
    | xargs -r docker rmi >/dev/null 2>&1 || true
echo "$node"
