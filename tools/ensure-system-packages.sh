#!/usr/bin/env bash
# Install the Debian packages a target needs, only if they are missing.
#   base: what creating the virtualenv needs
#   test: servers and tools the test suite starts (PostgreSQL, ipmitool, the
#         disk and network tools the virtual lab and ironic-python-agent use,
#         apache2-utils for a real `htpasswd -B`, redis-server for the tooz
#         coordination backend, haproxy in front of the HA inspection test,
#         dnsmasq-base, nftables and busybox's udhcpc for the PXE filter's
#         network-namespace tests, chromium and its driver with a font for the
#         dashboard's browser tests and screenshots, qemu-system-x86 and the
#         iPXE ROMs of its NICs for the virtual machines that network-boot, and
#         ipxe, the binaries PXE firmware chainloads through the DHCP service, with
#         curl to fetch them over TFTP as firmware would; xorriso, isolinux,
#         syslinux-common, grub-efi-amd64-bin, grub-common, mtools and dosfstools
#         to build the agent's boot ISOs, and ovmf to boot them as UEFI firmware;
#         what `ramdisk` needs, syslinux for the lab's bootable instance image, and
#         dropbear-bin, whose SSH client logs in to a rescued machine; docker-registry,
#         the reference OCI registry, for disk images named oci://)
#   ramdisk: what building the agent's ramdisk needs (mmdebstrap, cpio, zstd)
set -euo pipefail

want=(python3 python3-venv python3-dev gcc)
if [ "${1:-base}" = "ramdisk" ] || [ "${1:-base}" = "test" ]; then
  want+=(mmdebstrap cpio zstd)
fi
if [ "${1:-base}" = "test" ]; then
  want+=(postgresql ipmitool gdisk parted iproute2 util-linux apache2-utils redis-server haproxy
         dnsmasq-base nftables busybox udhcpc chromium chromium-driver fonts-dejavu-core
         qemu-system-x86 ipxe-qemu ipxe curl xorriso isolinux syslinux-common
         grub-efi-amd64-bin grub-common mtools dosfstools ovmf syslinux dropbear-bin
         docker-registry)
fi

missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${missing[*]} (run as root, or install them)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
