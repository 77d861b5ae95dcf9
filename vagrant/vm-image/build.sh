#!/bin/sh
# The VM tier's disk: Debian bookworm with its own kernel (Debian's linux-image-amd64),
# systemd, sshd and python3, booted by QEMU straight from the kernel and initrd copied
# out here (no bootloader). Usage: build.sh OUT_DIR AUTHORIZED_KEY_FILE ROLE_PACKAGES
# Writes OUT_DIR/{root.img,vmlinuz,initrd.img}; OUT_DIR appears only when complete.
# The caller (estate/lab/vm.py) names OUT_DIR by a hash of this directory and the key,
# so an unchanged recipe is never rebuilt.
# ROLE_PACKAGES (comma-separated, from estate.catalogue): the packages the roles install here
# are preinstalled, for time only: under TCG their
# maintainer scripts take minutes (measured: nfs-kernel-server with nfs-common 221 s,
# chrony 97 s, nftables 34 s). The roles still run apt-get update through the VM's NAT
# NIC. nfs-server is disabled: only the nodes the storage role makes servers run it.
set -eu
out=$1; key=$2; roles=$3
here=$(cd "$(dirname "$0")" && pwd)
mirror=${ESTATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
size=${ESTATE_VM_DISK:-4G}
work=$(mktemp -d "${out%/}.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root

echo "vm image: debootstrap bookworm + linux-image-amd64 into $root" >&2
debootstrap --variant=minbase \
    --include=linux-image-amd64,systemd-sysv,udev,dbus,openssh-server,python3,iproute2,procps,kmod,$roles \
    bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -30 "$work/debootstrap.log" >&2; exit 1; }

echo "/dev/vda / ext4 defaults 0 1" > "$root/etc/fstab"
echo "deb $mirror bookworm main" > "$root/etc/apt/sources.list"
echo 'Acquire::Languages "none";' > "$root/etc/apt/apt.conf.d/90estate-vm"
# Package lists as of the build: a VM's apt-get update then mostly finds them current
# (fresh lists cost 45 s of TCG time per update, current ones 24 s).
chroot "$root" apt-get update -q >"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log" >&2; exit 1; }
# QEMU's user-mode network answers DNS here; no resolver daemon in the image.
echo "nameserver 10.0.2.3" > "$root/etc/resolv.conf"
echo "estate-vm" > "$root/etc/hostname"   # systemd.hostname= on the kernel line wins
install -d -m 0700 "$root/root/.ssh"
install -m 0600 "$key" "$root/root/.ssh/authorized_keys"
install -m 0644 "$here/sshd-estate.conf" "$root/etc/ssh/sshd_config.d/estate.conf"
install -D -m 0644 "$here/ssh-hostkeys.conf" "$root/etc/systemd/system/ssh.service.d/10-hostkeys.conf"
install -m 0755 "$here/estate-vm-net" "$root/usr/local/sbin/estate-vm-net"
install -m 0644 "$here/estate-vm-net.service" "$root/etc/systemd/system/estate-vm-net.service"
chroot "$root" systemctl enable -q systemd-networkd estate-vm-net
chroot "$root" systemctl disable -q nfs-server
# Periodic jobs that would compete for the one emulated CPU, or for the dpkg lock.
chroot "$root" systemctl mask -q e2scrub_reap.service e2scrub_all.timer apt-daily.timer \
    apt-daily-upgrade.timer dpkg-db-backup.timer fstrim.timer
# A small initrd (the full one is 36 MB, slow to unpack under TCG): the modules to
# mount the root filesystem from a virtio disk.
sed -i 's/^MODULES=.*/MODULES=list/' "$root/etc/initramfs-tools/initramfs.conf"
printf '%s\n' virtio_pci virtio_blk ext4 >> "$root/etc/initramfs-tools/modules"
chroot "$root" update-initramfs -u -k all >"$work/initramfs.log" 2>&1 \
    || { tail -20 "$work/initramfs.log" >&2; exit 1; }
# Each VM gets its own machine-id and ssh host keys at first boot, not the image's.
: > "$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id" "$root"/etc/ssh/ssh_host_*
chroot "$root" apt-get clean

mkdir -p "$work/out"
cp -L "$root/vmlinuz" "$work/out/vmlinuz"
cp -L "$root/initrd.img" "$work/out/initrd.img"
echo "vm image: ext4 root filesystem ($size, sparse)" >&2
mkfs.ext4 -q -F -L estate-root -d "$root" "$work/out/root.img" "$size"
rm -rf "$out"
mv "$work/out" "$out"
