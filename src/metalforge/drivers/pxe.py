"""``pxe`` and ``http``: boot the ramdisk from the network, the instance from its disk.

Only the node's side is done here: the next boot goes to the network for the
ramdisk (``http`` asks for the firmware's UEFI HTTP boot) and to the disk for
the instance, through the management interface. Serving the agent ramdisk
(DHCP, TFTP or HTTP boot) is the provisioning network's job, as it is for
Ironic's deployments with an external PXE service; the inspection service's
DHCP filter decides who may boot it. ``ipxe`` is the interface whose scripts
and images metalforge serves itself.
"""

from __future__ import annotations

from typing import ClassVar

from metalforge.drivers.base import BootInterface, DriverTask
from metalforge.drivers.network_boot import boot_from_disk, boot_from_network


class PxeBoot(BootInterface):
    """The ramdisk boots over the network once; the instance boots from disk."""

    name = "pxe"
    http_boot: ClassVar[bool] = False
    """Ask the BMC for UEFI HTTP boot rather than PXE."""

    def validate(self, task: DriverTask) -> None:
        return None

    def prepare_ramdisk(self, task: DriverTask) -> None:
        boot_from_network(task, http=self.http_boot)

    def prepare_instance(self, task: DriverTask) -> None:
        boot_from_disk(task)

    def clean_up_instance(self, task: DriverTask) -> None:
        return None


class HttpBoot(PxeBoot):
    """``pxe`` through the firmware's UEFI HTTP boot (Ironic's ``http``)."""

    name = "http"
    http_boot = True
