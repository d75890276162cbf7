"""Point a node's next boot at the network: PXE, or the firmware's UEFI HTTP boot.

The ``http`` boot interfaces ask for UEFI HTTP boot (Redfish ``UefiHttp``).
Not every BMC can be told so (IPMI has no such device, and many Redfish
services do not list it), while the firmware behind it may still try HTTP
boot among its network options; so a BMC that does not offer ``uefihttp``
gets ``pxe`` instead, and the event history says so.
"""

from __future__ import annotations

from metalforge.drivers.base import (
    DriverTask,
    ManagementInterface,
    boot_persistence,
    interface_of,
)

UEFI_HTTP = "uefihttp"
PXE = "pxe"


def management(task: DriverTask) -> ManagementInterface:
    """The node's management interface, which sets boot devices."""
    return interface_of(task, ManagementInterface, "set a boot device")


def boot_from_network(task: DriverTask, *, http: bool) -> None:
    """The next boot (once) goes to the network; through UEFI HTTP boot when ``http``
    and the BMC offers it."""
    iface = management(task)
    device = PXE
    if http:
        if UEFI_HTTP in iface.supported_boot_devices(task):
            device = UEFI_HTTP
        else:
            task.record(
                "boot",
                "the BMC offers no UEFI HTTP boot device; booting from the network (pxe), "
                "where the firmware may still choose HTTP boot",
            )
    iface.set_boot_device(task, device, persistent=boot_persistence(task, False))


def boot_from_disk(task: DriverTask) -> None:
    """Every later boot goes to the disk (the deployed instance), unless the node's
    ``force_persistent_boot_device`` says ``Never``."""
    management(task).set_boot_device(task, "disk", persistent=boot_persistence(task, True))
