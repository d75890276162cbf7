"""``pxe``: boot the ramdisk from the network, the instance from its disk.

Only the node's side is done here: the next boot goes to the network for the
ramdisk and to the disk for the instance, through the management interface.
Serving the agent ramdisk (DHCP, TFTP or HTTP boot) is the provisioning
network's job, as it is for Ironic's deployments with an external PXE
service; the inspection service's DHCP filter decides who may boot it.
"""

from __future__ import annotations

from metalforge.drivers.base import (
    BootInterface,
    DriverTask,
    ManagementInterface,
    interface_of,
)


def _management(task: DriverTask) -> ManagementInterface:
    return interface_of(task, ManagementInterface, "set a boot device")


class PxeBoot(BootInterface):
    """The ramdisk boots over the network once; the instance boots from disk."""

    name = "pxe"

    def validate(self, task: DriverTask) -> None:
        return None

    def prepare_ramdisk(self, task: DriverTask) -> None:
        _management(task).set_boot_device(task, "pxe", persistent=False)

    def prepare_instance(self, task: DriverTask) -> None:
        _management(task).set_boot_device(task, "disk", persistent=True)

    def clean_up_instance(self, task: DriverTask) -> None:
        return None
