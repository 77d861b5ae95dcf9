#!/usr/bin/env bash
# A Debian root with another Slurm release for the namespace lab, built once per recipe.
#
#   scripts/slurm-root.sh 24.11      # prints the root's path (builds it if needed)
#
# The suite comes from slurm.version (estate.catalogue SLURM_SUITES) and the packages from
# the roles a lab node runs (python3 -m estate.catalogue root), so the cache key below
# changes whenever either does: build/slurm-root/<suite>-<hash>. A root is built in a
# temporary directory and renamed into place, so an interrupted build leaves nothing behind.
# Needs root and debootstrap (scripts/install-deps.sh installs it); 2-4 min cold on 2 cores,
# about 0.6 GB (MariaDB for slurmdbd is most of it).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/slurm-root.sh SLURM_VERSION}
mirror=${ESTATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=$(python3 -m estate.catalogue suite "$version") \
    || { echo "no Debian suite known for Slurm $version (estate/catalogue.py)" >&2; exit 2; }
pkgs=$(python3 -m estate.catalogue root --sep ,)
extras=$(python3 -m estate.catalogue root-extras --sep ' ')
# the recipe: suite, packages, mirror and this script's commands (not its comments)
hash=$(printf '%s\n' "$suite" "$pkgs" "$extras" "$mirror" | cat - <(grep -v '^ *#' "$0") \
    | sha256sum | cut -c1-12)
cache=$PWD/build/slurm-root
root=$cache/$suite-$hash
if [ -x "$root/usr/sbin/slurmctld" ]; then
    echo "$root"; exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXXXX")
chmod 755 "$tmp"   # mktemp's 0700 would become the root's /: munge's postinst runs as munge
trap 'rm -rf "$tmp" "$tmp.log"' EXIT
echo "debootstrap $suite (minbase + $pkgs) into $root" >&2
debootstrap --variant=minbase --include="$pkgs" "$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1 \
    || { tail -20 "$tmp.log" >&2; exit 1; }
# The roles' extras (Open MPI, PMIx) by apt inside the root: its resolver takes the
# alternatives that debootstrap's does not (trixie's libltdl-dev: "automake | automaken").
if [ -n "$extras" ]; then
    mount -t proc proc "$tmp/proc"
    # shellcheck disable=SC2086 # one word per package
    { chroot "$tmp" apt-get update -q && DEBIAN_FRONTEND=noninteractive chroot "$tmp" \
        apt-get install -y -q --no-install-recommends $extras; } >>"$tmp.log" 2>&1 \
        || { umount "$tmp/proc"; tail -20 "$tmp.log" >&2; exit 1; }
    umount "$tmp/proc"
fi
# Names resolve from the /etc/hosts the lab binds into each node, never over DNS: with a
# nameserver that cannot be reached, every lookup waits and slurmctld answers after the
# clients' MessageTimeout (docs: /work/shared/LAB-NOTES.md, measured 2026-12-01).
: >"$tmp/etc/resolv.conf"
sed -i 's/^hosts:.*/hosts: files/' "$tmp/etc/nsswitch.conf"
rm -rf "$tmp/var/cache/apt/archives/"*.deb "$tmp/var/lib/apt/lists/"*
# Roots of older recipes are dead weight on a CI machine's disk.
find "$cache" -mindepth 1 -maxdepth 1 -name "$suite-*" ! -name "$suite-$hash" \
    -exec rm -rf {} +
mv "$tmp" "$root"
echo "$root"
