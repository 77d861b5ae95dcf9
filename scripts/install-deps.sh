#!/usr/bin/env bash
# Installs the Debian packages every tier needs. Idempotent and quick when done.
# Used by `make lab` and `make test` (and so by CI on a fresh machine).
set -euo pipefail
PKGS=(
  # real Slurm (Debian bookworm: 22.05). Never slurm-wlm-emulator: it hijacks the daemons.
  slurmctld slurmd slurm-client munge slurmrestd slurmdbd mariadb-server
  # lab nodes: docker engine, local base image, Vagrant's docker provider
  docker.io debootstrap vagrant openssh-client rsync
  # namespaces, firewall
  iproute2 iptables nftables procps psmisc
  # Kubernetes plane: the real containerd validates the rendered config
  containerd
  # VM tier: real kernels for NFS (QEMU under TCG)
  qemu-system-x86 qemu-utils
)
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
if dpkg-query -W slurm-wlm-emulator >/dev/null 2>&1; then
  echo "slurm-wlm-emulator is installed and takes over slurmctld/slurmd: removing it" >&2
  apt-get remove -y -q slurm-wlm-emulator >/dev/null
fi
# Debian's packages start nothing here (PID 1 is not systemd); the tiers start what they use.
