"""Virtual media an operator attaches to a node by hand (API 1.89, listed from 1.93).

As Ironic's, these are synchronous calls to the BMC under the node's
reservation (``management.held``): a node a conductor holds answers 409,
and a BMC that fails answers 400 with its reason.

The image reaches the BMC one of two ways (``image_download_source``):
``http``, the BMC downloads the URL itself; ``local`` (Ironic's default),
metalforge fetches it into its image cache (checked against the size limit,
once per URL) and hands the BMC its own URL, so a BMC on the management
network needs no route to where the image lives. Only http(s) URLs are
taken; an image named by a path must be in one of ``netboot.image_dirs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from metalforge.drivers.base import VMEDIA_DEVICES, DriverError, ReadOnlyTask, VirtualMedia
from metalforge.errors import bad_request
from metalforge.netboot.images import ImageError, ImageKind, cache_for
from metalforge.services import management
from metalforge.services.context import Services
from metalforge.services.microversion import Version

DOWNLOAD_SOURCES = ("http", "local")
"""How the BMC gets the image; Ironic's ``swift`` needs an object store metalforge has not."""


def check_device_types(device_types: Sequence[str]) -> None:
    invalid = [d for d in device_types if d not in VMEDIA_DEVICES]
    if invalid:
        raise bad_request(
            f"Invalid device type(s) {', '.join(invalid)} (valid are {', '.join(VMEDIA_DEVICES)})"
        )


def _served_url(svc: Services, image_url: str, source: str) -> str:
    """The URL the BMC is given: the image's own, or metalforge's copy of it."""
    if urlsplit(image_url).scheme not in ("http", "https"):
        raise bad_request(f"Unsupported or missing URL scheme in {image_url!r}: use http(s)")
    if source == "http":
        return image_url
    netboot = svc.settings.conductor.netboot
    if netboot.http_url is None:
        raise bad_request(
            "image_download_source local needs conductor.netboot.http_url (the address the "
            "BMC downloads metalforge's copy from); set it, or use image_download_source http"
        )
    try:
        image = cache_for(netboot).fetch(image_url, ImageKind.MEDIA)
    except ImageError as exc:
        raise bad_request(f"Cannot attach virtual media: {exc}") from None
    return f"{netboot.http_url}/boot/images/{image.digest}"


def attach(
    svc: Services,
    ident: str,
    version: Version,
    device_type: str,
    image_url: str,
    download_source: str,
    actor: str | None,
) -> None:
    """Insert the image into the node's ``device_type`` drive, replacing what it held."""
    check_device_types([device_type])
    if download_source not in DOWNLOAD_SOURCES:
        raise bad_request(
            f"Unsupported image_download_source {download_source!r}; "
            f"use one of {', '.join(DOWNLOAD_SOURCES)}"
        )
    served = _served_url(svc, image_url, download_source)
    doing = "virtual media was being attached"
    with management.held(svc, ident, version, f"attach virtual media {device_type}", doing) as (
        task,
        iface,
    ):
        iface.attach_virtual_media(task, device_type, served)
        task.record("management", f"virtual {device_type} attached by {actor or 'the API'}")


def detach(
    svc: Services, ident: str, version: Version, device_types: Sequence[str], actor: str | None
) -> None:
    """Eject the drives of ``device_types`` (every drive when none is named)."""
    check_device_types(device_types)
    doing = "virtual media was being detached"
    with management.held(svc, ident, version, "detach virtual media", doing) as (task, iface):
        iface.detach_virtual_media(task, device_types)
        which = ", ".join(device_types) or "every drive"
        task.record("management", f"virtual media ejected ({which}) by {actor or 'the API'}")


def listed(svc: Services, ident: str, version: Version) -> list[VirtualMedia]:
    """What the BMC's drives hold now (a read: no reservation)."""
    node = management.load_node(svc, ident, version)
    iface = management.interface_of(svc, node)
    task = ReadOnlyTask(node)
    try:
        iface.validate(task)
        return iface.get_virtual_media(task)
    except DriverError as exc:
        raise bad_request(f"Failed to list the virtual media of node {node.uuid}: {exc}") from None
