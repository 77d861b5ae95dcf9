#!/usr/bin/env bash
# containerd as Kubernetes nodes get it (estate.kubernetes_releases: Debian's CONTAINERD_SUITE
# build, through a pin), unpacked under build/containerd/ for the unit tier, which runs its
# own parser on the rendered configs (`containerd --config FILE config dump`). Nothing is
# installed on this host: its docker.io keeps the host's own containerd. apt fetches the
# package through its own signed index (the Debian archive keyring) into a private apt
# directory. Prints the binary's path. Idempotent: a second run only prints.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r suite mirror keyring < <(python3 -c 'from estate.kubernetes_releases import *
print(CONTAINERD_SUITE, DEBIAN_MIRROR, DEBIAN_KEYRING)')
out=build/containerd/$suite
bin=$out/root/usr/bin/containerd
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
apt_dir=$out/apt
rm -rf "$out"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$out/root"
echo "deb [signed-by=$keyring] $mirror $suite main" > "$apt_dir/sources.list"
opts=(-o "Dir::Etc::SourceList=$PWD/$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
      -o "Dir::State::Lists=$PWD/$apt_dir/lists" -o "Dir::Cache::Archives=$PWD/$apt_dir/archives"
      -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
      -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=/dev/null"
      -o "APT::Sandbox::User=root" -q)
apt-get "${opts[@]}" update >"$out/apt.log" 2>&1 || { cat "$out/apt.log" >&2; exit 1; }
(cd "$apt_dir" && apt-get "${opts[@]}" download containerd) >>"$out/apt.log" 2>&1 \
  || { cat "$out/apt.log" >&2; exit 1; }
dpkg-deb -x "$apt_dir"/containerd_*.deb "$out/root"
rm -rf "$apt_dir/lists"
"$bin" --version >&2
echo "$bin"
