"""The demo with QEMU machines as its nodes (``metalforge-lab demo --machines qemu``).

What differs from the namespace nodes (``metalforge_lab.demo``): the nodes
are ``metalforge_lab.vm_nodes`` machines; metalforge runs the provisioning
network's DHCP service (a dnsmasq behind its PXE filter) on the bridge and
serves the agent ramdisk ``make ramdisk`` builds (the ``cloud`` kernel,
built on first use into ``--ramdisk-dir``); the nodes are enrolled with the
``ipxe`` boot interface; the sample image is the lab's instance image,
which a deployed machine boots from its disk and says so on its console.
Cleaning erases metadata only (``deploy.erase_devices`` off): writing 5 GiB
under emulation would take an hour.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path

from metalforge_lab import agent_ramdisk, instance_image, vm
from metalforge_lab.vm_nodes import MAX_MACHINES, VmNode

IMAGE_NAME = "instance.raw"
KERNEL_APPEND = "console=ttyS0 ipa-lldp-timeout=5"


def problems(nodes: int) -> list[str]:
    """Why machines cannot run here, each with what to do; empty when they can."""
    found = []
    if not 1 <= nodes <= MAX_MACHINES:
        found.append(f"--nodes must be between 1 and {MAX_MACHINES} with QEMU machines")
    if reason := vm.available():
        found.append(f"{reason} (`make system-packages`)")
    if shutil.which("dnsmasq") is None:
        found.append("dnsmasq is not installed (`make system-packages`)")
    if lacking := agent_ramdisk.missing_tools() + instance_image.missing_tools():
        found.append(f"missing Debian packages: {', '.join(lacking)} (`make system-packages`)")
    return found


def ramdisk(directory: Path) -> agent_ramdisk.AgentRamdisk:
    """The agent ramdisk the machines boot, built on first use (about 90 s)."""
    try:
        return agent_ramdisk.build(directory, kernel="cloud")
    except agent_ramdisk.RamdiskError as exc:
        raise RuntimeError(f"building the agent ramdisk failed: {exc}") from exc


def sample_image(images: Path, workdir: Path) -> str:
    """The instance image in ``images``; returns its sha256."""
    built = instance_image.build(workdir)
    images.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(built, images / IMAGE_NAME)
    return hashlib.sha256((images / IMAGE_NAME).read_bytes()).hexdigest()


def config_sections(
    state_dir: Path, bridge: str, network: str, ramdisk_dir: Path
) -> dict[str, dict[str, str | int | Sequence[str]]]:
    """What the machines need of metalforge beyond the namespace demo's settings."""
    first, last = network.rsplit(".", 1)[0] + ".100", network.rsplit(".", 1)[0] + ".200"
    return {
        "conductor": {"clean_step_priority_override": ["deploy.erase_devices:0"]},
        "conductor.netboot": {
            "image_dirs": [str(ramdisk_dir)],
            "kernel_append": KERNEL_APPEND,
        },
        "pxe_filter": {"driver": "dnsmasq", "dnsmasq_hostsdir": str(state_dir / "dhcp-hosts")},
        "dhcp": {
            "enabled": True,
            "interface": bridge,
            "range_start": first,
            "range_end": last,
            "run_as": "root",
        },
    }


def driver_fields(built: agent_ramdisk.AgentRamdisk) -> dict[str, object]:
    return {
        "boot_interface": "ipxe",
        "driver_info": {
            "deploy_kernel": str(built.kernel),
            "deploy_ramdisk": str(built.initramfs),
        },
    }


def steps(node: VmNode, image_url: str, image_sha256: str) -> list[str]:
    """The walk-through for a machine: the namespace demo's, with consoles to watch."""
    name, console = node.name, node.console
    return [
        f"  tail -f {console}   # the machine's serial console, every boot",
        "",
        "  # inspection: the machine network-boots the agent, which reports its hardware",
        f"  baremetal node inspect {name} --wait 900",
        "",
        "  # cleaning: booted again, the agent erases the disk's metadata",
        f"  baremetal node provide {name} --wait 900",
        "",
        "  # deploy: the agent writes the instance image; the machine then boots it from disk",
        f"  baremetal node set {name} \\",
        f"    --instance-info image_source={image_url} \\",
        f"    --instance-info image_checksum=sha256:{image_sha256}",
        f"  baremetal node deploy {name} --wait 900",
        f"  grep '{instance_image.MARK}' {console}",
        "",
        "  # undeploy: cleaned again, back to available",
        f"  baremetal node undeploy {name} --wait 900",
    ]
