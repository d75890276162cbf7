"""``redfish-virtual-media`` boot: the deploy ISO in the BMC's virtual CD drive.

The BMC downloads the ISO itself, from an http(s) URL it can reach: the ISO
metalforge builds from ``driver_info.deploy_kernel`` and ``deploy_ramdisk``
with the agent's kernel parameters baked in (``netboot.iso``), served from
its image cache on the agents' endpoint (or at the node's
``external_http_url``); or, as an override, the ISO ``driver_info.deploy_iso``
(Ironic's key; ``redfish_deploy_iso`` is its older name) names. The ramdisk boots from the
virtual CD; the instance boots from disk, so the CD is ejected once the
instance is ready. A node's ``network_data`` goes into the ISO (labelled
``config-2``, as Ironic's), so that the ramdisk can configure its address
on a network without DHCP. The image inserted last is kept in
``driver_internal_info.redfish_virtual_media`` so an operator can see what
the node will boot.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import sushy

from metalforge.drivers.base import (
    BootInterface,
    DriverError,
    DriverTask,
    boot_persistence,
    ramdisk_instance_iso,
    set_info,
)
from metalforge.drivers.ipxe import (
    RAMDISK_PIN,
    check_deploy_images,
    fetch_deploy_images,
    kernel_append,
    ramdisk_params,
    release_ramdisk_images,
)
from metalforge.drivers.redfish import connection, management
from metalforge.netboot.images import cache_for
from metalforge.netboot.iso import IsoError, build_iso, iso_key

_CD_TYPES = (sushy.VirtualMediaType.CD, sushy.VirtualMediaType.DVD)
_INFO_KEY = "redfish_virtual_media"


_ISO_KEYS = ("deploy_iso", "redfish_deploy_iso")
"""Where a node names a deploy ISO of its own: Ironic's key (Metal3 sets it), then the
older Redfish-only one Ironic still reads."""


def _given_iso(task: DriverTask) -> str | None:
    """The node's own deploy ISO, checked, or None when metalforge builds the ISO. An ISO
    wins over ``deploy_kernel``/``deploy_ramdisk``, as in Ironic."""
    for key in _ISO_KEYS:
        url = task.node.driver_info.get(key)
        if url is None or url == "":
            continue
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
            raise DriverError(
                f"Invalid redfish driver_info: {key} must be an http(s) URL, not {url!r}"
            )
        return url
    return None


def _served_from(task: DriverTask) -> str | None:
    """Where the BMC fetches what metalforge serves: the node's ``external_http_url`` (an
    address of this service the BMC can reach, as Ironic's key), else the service's."""
    url = task.node.driver_info.get("external_http_url")
    if url is None or url == "":
        return task.settings.netboot.http_url
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise DriverError(
            f"Invalid redfish driver_info: external_http_url must be an http(s) URL, not {url!r}"
        )
    return url.rstrip("/")


def _built_iso(task: DriverTask) -> str:
    """The URL of the node's boot ISO, built (once per kernel, ramdisk and parameters)."""
    netboot = task.settings.netboot
    served_from = _served_from(task)
    if served_from is None:
        raise DriverError(
            "Cannot build the boot ISO: conductor.netboot.http_url is unset (api.agent_host "
            "is a wildcard); set it or the node's driver_info.external_http_url, or give "
            "driver_info.deploy_iso"
        )
    images = fetch_deploy_images(task)
    params = ramdisk_params(task, mac=None)
    kernel, ramdisk = images["deploy_kernel"], images["deploy_ramdisk"]
    network_data = _network_data(task)
    key = iso_key(kernel.digest, ramdisk.digest, params, network_data)
    cache = cache_for(netboot)
    try:
        iso = cache.derived(
            key,
            lambda out: build_iso(
                kernel.path, ramdisk.path, params, out, network_data=network_data
            ),
        )
    except IsoError as exc:
        raise DriverError(str(exc)) from None
    cache.pin(task.node.uuid, RAMDISK_PIN, (kernel, ramdisk, iso))
    return f"{served_from}/boot/images/{iso.digest}"


def _network_data(task: DriverTask) -> bytes | None:
    """The node's ``network_data`` for the ISO (its static addresses, for a network without
    DHCP), or None when it has none."""
    data = task.node.network_data
    if not data:
        return None
    return json.dumps(data, indent=2, sort_keys=True).encode()


def _cd_drive(system: Any) -> Any:
    for member in system.virtual_media.get_members():
        if any(kind in _CD_TYPES for kind in member.media_types or ()):
            return member
    raise DriverError("The node's BMC has no virtual CD/DVD drive")


def _eject(drive: Any) -> None:
    if drive.inserted:
        drive.eject_media()


def _remember(task: DriverTask, image: str | None) -> None:
    set_info(task, **{_INFO_KEY: image})


class RedfishVirtualMediaBoot(BootInterface):
    """Boot the agent ramdisk from an ISO the BMC serves as a virtual CD."""

    name = "redfish-virtual-media"
    boots_ramdisk_instances = True

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)
        if _given_iso(task) is None:
            check_deploy_images(task)
            kernel_append(task)
            _served_from(task)

    def properties(self) -> dict[str, str]:
        return {
            **connection.PROPERTIES,
            "deploy_kernel": (
                "The agent's kernel (http(s) URL or file path); metalforge builds the boot ISO "
                "from it and deploy_ramdisk. Required unless deploy_iso is given."
            ),
            "deploy_ramdisk": "The agent's initramfs (an http(s) URL or a file path).",
            "deploy_iso": (
                "http(s) URL of a deploy ramdisk ISO of your own, used instead of the one "
                "metalforge builds (and instead of deploy_kernel and deploy_ramdisk); the "
                "BMC downloads it. Optional."
            ),
            "redfish_deploy_iso": "The older name of deploy_iso. Optional.",
            "external_http_url": (
                "Base URL of this service as the BMC reaches it, for the ISO metalforge "
                "builds, when it differs from conductor.netboot.http_url. Optional."
            ),
            "force_persistent_boot_device": (
                "Always: every boot device set by a flow is persistent; Never: one-time; "
                "Default: as the flow chooses. Optional."
            ),
        }

    def prepare_ramdisk(self, task: DriverTask) -> None:
        image = _given_iso(task) or _built_iso(task)
        with connection.system(task, f"insert virtual media {image}") as system:
            drive = _cd_drive(system)
            _eject(drive)
            drive.insert_media(image, inserted=True, write_protected=True)
            self.boot_from_cd(system, persistent=boot_persistence(task, False))
        _remember(task, image)

    def boot_from_cd(self, system: Any, *, persistent: bool) -> None:
        """Make the virtual CD the system's boot device (a BMC that cannot be told so in
        standard Redfish overrides this)."""
        management.set_boot_device(system, "cdrom", persistent=persistent)

    def clean_up_ramdisk(self, task: DriverTask) -> None:
        if _INFO_KEY not in task.node.driver_internal_info:
            return  # nothing of ours is inserted: no call to the BMC
        with connection.system(task, "eject virtual media") as system:
            _eject(_cd_drive(system))
        _remember(task, None)
        release_ramdisk_images(task)

    def prepare_instance(self, task: DriverTask) -> None:
        with connection.system(task, "eject virtual media and boot from disk") as system:
            _eject(_cd_drive(system))
            management.set_boot_device(system, "disk", persistent=boot_persistence(task, True))
        _remember(task, None)
        release_ramdisk_images(task)

    def prepare_ramdisk_instance(self, task: DriverTask) -> None:
        """The instance's ISO in the virtual CD, booted every time (it is the instance)."""
        image = ramdisk_instance_iso(task)
        with connection.system(task, f"insert the instance's ISO {image}") as system:
            drive = _cd_drive(system)
            _eject(drive)
            drive.insert_media(image, inserted=True, write_protected=True)
            self.boot_from_cd(system, persistent=boot_persistence(task, True))
        _remember(task, image)
        release_ramdisk_images(task)

    def clean_up_instance(self, task: DriverTask) -> None:
        with connection.system(task, "eject virtual media") as system:
            _eject(_cd_drive(system))
        _remember(task, None)
        release_ramdisk_images(task)


class RedfishHttpsBoot(RedfishVirtualMediaBoot):
    """``redfish-https``: the same ISO, booted by the firmware's UEFI HTTP boot.

    The BMC is told the ISO's URL as the system's ``HttpBootUri`` with the
    ``UefiHttp`` boot target (once for the agent's ramdisk, every time for a
    ramdisk instance), so nothing is inserted: the firmware downloads the ISO
    itself. The BMC must list ``UefiHttp`` among its boot targets (most need
    UEFI boot mode). As in Ironic, nothing is undone on the BMC when the
    ramdisk stops: the next boot device set replaces the override.
    """

    name = "redfish-https"

    def prepare_ramdisk(self, task: DriverTask) -> None:
        image = _given_iso(task) or _built_iso(task)
        with connection.system(task, f"set UEFI HTTP boot of {image}") as system:
            management.set_http_boot(system, image, persistent=boot_persistence(task, False))
        _remember(task, image)

    def clean_up_ramdisk(self, task: DriverTask) -> None:
        _remember(task, None)
        release_ramdisk_images(task)

    def prepare_instance(self, task: DriverTask) -> None:
        with connection.system(task, "boot from disk") as system:
            management.set_boot_device(system, "disk", persistent=boot_persistence(task, True))
        _remember(task, None)
        release_ramdisk_images(task)

    def prepare_ramdisk_instance(self, task: DriverTask) -> None:
        image = ramdisk_instance_iso(task)
        with connection.system(task, f"set UEFI HTTP boot of {image}") as system:
            management.set_http_boot(system, image, persistent=boot_persistence(task, True))
        _remember(task, image)
        release_ramdisk_images(task)

    def clean_up_instance(self, task: DriverTask) -> None:
        _remember(task, None)
        release_ramdisk_images(task)
