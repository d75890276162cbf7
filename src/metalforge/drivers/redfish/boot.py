"""``redfish-virtual-media`` boot: the deploy ISO in the BMC's virtual CD drive.

The BMC downloads the ISO itself, from ``driver_info.redfish_deploy_iso``
(an http(s) URL it can reach). The ramdisk boots from the virtual CD; the
instance boots from disk, so the CD is ejected once the instance is ready.
The image inserted last is kept in ``driver_internal_info.redfish_virtual_media``
so an operator can see what the node will boot.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import sushy

from metalforge.drivers.base import BootInterface, DriverError, DriverTask
from metalforge.drivers.redfish import connection, management

_CD_TYPES = (sushy.VirtualMediaType.CD, sushy.VirtualMediaType.DVD)
_INFO_KEY = "redfish_virtual_media"


def _deploy_iso(task: DriverTask) -> str:
    url = task.node.driver_info.get("redfish_deploy_iso")
    if not url:
        raise DriverError("Invalid redfish driver_info: missing driver_info: redfish_deploy_iso")
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise DriverError(
            f"Invalid redfish driver_info: redfish_deploy_iso must be an http(s) URL, not {url!r}"
        )
    return url


def _cd_drive(system: Any) -> Any:
    for member in system.virtual_media.get_members():
        if any(kind in _CD_TYPES for kind in member.media_types or ()):
            return member
    raise DriverError("The node's BMC has no virtual CD/DVD drive")


def _eject(drive: Any) -> None:
    if drive.inserted:
        drive.eject_media()


def _remember(task: DriverTask, image: str | None) -> None:
    info = dict(task.node.driver_internal_info)
    if image is None:
        info.pop(_INFO_KEY, None)
    else:
        info[_INFO_KEY] = image
    task.node.driver_internal_info = info


class RedfishVirtualMediaBoot(BootInterface):
    """Boot the agent ramdisk from an ISO the BMC serves as a virtual CD."""

    name = "redfish-virtual-media"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)
        _deploy_iso(task)

    def properties(self) -> dict[str, str]:
        return {
            **connection.PROPERTIES,
            "redfish_deploy_iso": (
                "http(s) URL of the deploy ramdisk ISO; the BMC downloads it. Required."
            ),
        }

    def prepare_ramdisk(self, task: DriverTask) -> None:
        image = _deploy_iso(task)
        with connection.system(task, f"insert virtual media {image}") as system:
            drive = _cd_drive(system)
            _eject(drive)
            drive.insert_media(image, inserted=True, write_protected=True)
            management.set_boot_device(system, "cdrom", persistent=False)
        _remember(task, image)

    def prepare_instance(self, task: DriverTask) -> None:
        with connection.system(task, "eject virtual media and boot from disk") as system:
            _eject(_cd_drive(system))
            management.set_boot_device(system, "disk", persistent=True)
        _remember(task, None)

    def clean_up_instance(self, task: DriverTask) -> None:
        with connection.system(task, "eject virtual media") as system:
            _eject(_cd_drive(system))
        _remember(task, None)
