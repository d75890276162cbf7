"""``ipxe``: boot the agent's ramdisk through iPXE scripts metalforge serves.

The node network-boots once; its iPXE (chainloaded by the provisioning
network's DHCP, or built into its firmware) asks metalforge for its script,
which loads the deploy kernel and ramdisk of ``driver_info.deploy_kernel``
and ``deploy_ramdisk`` from metalforge with the kernel parameters the agent
needs (``netboot.ipxe``, ``services.netboot``). The instance boots from its
disk; a node that is not booting the ramdisk gets no script.

Preparing the boot fetches both images into this host's cache first, so a
missing or wrong image fails the flow at once, with the reason, instead of
the node timing out later.
"""

from __future__ import annotations

from metalforge.drivers.base import (
    BootInterface,
    DriverError,
    DriverTask,
    ManagementInterface,
    interface_of,
)
from metalforge.netboot.images import (
    CachedImage,
    ImageError,
    ImageKind,
    cache_for,
    check_source,
)

DEPLOY_IMAGES = {"deploy_kernel": ImageKind.KERNEL, "deploy_ramdisk": ImageKind.RAMDISK}
"""The ``driver_info`` keys of the agent's boot images, and what each must be."""


def deploy_sources(task: DriverTask) -> dict[str, str]:
    """``driver_info``'s deploy kernel and ramdisk sources, checked for form (``DriverError``)."""
    info = task.node.driver_info
    missing = [key for key in DEPLOY_IMAGES if not info.get(key)]
    if missing:
        raise DriverError(
            f"Cannot boot the ramdisk: driver_info is missing {', '.join(missing)} "
            "(an http(s) URL or an absolute file path each)"
        )
    sources: dict[str, str] = {}
    for key in DEPLOY_IMAGES:
        value = info[key]
        if not isinstance(value, str):
            raise DriverError(f"driver_info.{key} must be a string, not {type(value).__name__}")
        sources[key] = value
    return sources


def check_deploy_images(task: DriverTask) -> None:
    """Refuse, without fetching, deploy images that can never be had (``DriverError``)."""
    allowed = tuple(task.settings.netboot.image_dirs)
    for key, source in deploy_sources(task).items():
        try:
            check_source(source, allowed)
        except ImageError as exc:
            raise DriverError(f"driver_info.{key}: {exc}") from None


def fetch_deploy_images(task: DriverTask) -> dict[str, CachedImage]:
    """The deploy kernel and ramdisk in this host's cache, fetched unless they were."""
    cache = cache_for(task.settings.netboot)
    images: dict[str, CachedImage] = {}
    for key, source in deploy_sources(task).items():
        try:
            images[key] = cache.fetch(source, DEPLOY_IMAGES[key])
        except ImageError as exc:
            raise DriverError(f"driver_info.{key}: {exc}") from None
    return images


class IpxeBoot(BootInterface):
    """The ramdisk boots from iPXE scripts metalforge serves; the instance from disk."""

    name = "ipxe"

    def properties(self) -> dict[str, str]:
        return {
            "deploy_kernel": "The agent's kernel: an http(s) URL or a file path. Required.",
            "deploy_ramdisk": "The agent's initramfs: an http(s) URL or a file path. Required.",
        }

    def validate(self, task: DriverTask) -> None:
        check_deploy_images(task)

    def prepare_ramdisk(self, task: DriverTask) -> None:
        fetch_deploy_images(task)
        _management(task).set_boot_device(task, "pxe", persistent=False)

    def prepare_instance(self, task: DriverTask) -> None:
        _management(task).set_boot_device(task, "disk", persistent=True)

    def clean_up_instance(self, task: DriverTask) -> None:
        return None


def _management(task: DriverTask) -> ManagementInterface:
    return interface_of(task, ManagementInterface, "set a boot device")
