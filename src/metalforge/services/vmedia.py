"""Virtual media an operator attaches to a node by hand (API 1.89, listed from 1.93).

As Ironic's, attaching and detaching answer 204 once the request is
checked and queued for the node's conductor, which fetches the image and
calls the BMC under the node's reservation (``conductor.virtual_media``); a
failure is left in ``last_error`` and the node's history, and a node a
conductor holds answers 409. Listing is a read of the BMC, answered at once.

The image reaches the BMC one of two ways (``image_download_source``):
``http``, the BMC downloads the URL itself; ``local`` (Ironic's default),
the conductor fetches it into its image cache (checked against the size
limit, the download's deadline and minimum rate, and that it is an image of
the drive's kind) and hands the BMC metalforge's own URL, so a BMC on the
management network needs no route to where the image lives. Only http(s)
URLs are taken.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from metalforge.conductor.virtual_media import ATTACH, EJECT, AttachMedia, EjectMedia
from metalforge.conductor.work import NodeWork, P
from metalforge.drivers.base import VMEDIA_DEVICES, DriverError, ReadOnlyTask, VirtualMedia
from metalforge.errors import bad_request
from metalforge.services import fencing, lookup, management
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


def _check_source(svc: Services, image_url: str, source: str) -> None:
    if source not in DOWNLOAD_SOURCES:
        raise bad_request(
            f"Unsupported image_download_source {source!r}; "
            f"use one of {', '.join(DOWNLOAD_SOURCES)}"
        )
    parts = urlsplit(image_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad_request(f"Unsupported or missing URL scheme in {image_url!r}: use http(s)")
    if source == "local" and svc.settings.conductor.netboot.http_url is None:
        raise bad_request(
            "image_download_source local needs conductor.netboot.http_url (the address the "
            "BMC downloads metalforge's copy from); set it, or use image_download_source http"
        )


def _queue(
    svc: Services,
    ident: str,
    version: Version,
    work: NodeWork[P],
    payload: P,
    note: str,
    actor: str | None,
) -> None:
    """Check the node can take the request and queue it for its conductor, at once."""
    with svc.db.write() as session:
        node = lookup.find_node(session, ident, version)
        fencing.check_unlocked(session, node)
        iface = management.interface_of(svc, node)
        try:
            iface.validate(ReadOnlyTask(node))
        except DriverError as exc:
            raise bad_request(str(exc)) from None
        fencing.update_node(session, node, {"last_error": None}, race=fencing.REQUEST_RACED)
        svc.queue_for(session, node, work, payload)
        fencing.record(session, node, "management", note, actor)
    svc.notify()


def attach(
    svc: Services,
    ident: str,
    version: Version,
    device_type: str,
    image_url: str,
    download_source: str,
    actor: str | None,
) -> None:
    """Queue inserting the image into the node's ``device_type`` drive."""
    check_device_types([device_type])
    _check_source(svc, image_url, download_source)
    request = AttachMedia(device_type, image_url, download_source, actor)
    _queue(svc, ident, version, ATTACH, request, f"virtual {device_type} attach requested", actor)


def detach(
    svc: Services, ident: str, version: Version, device_types: Sequence[str], actor: str | None
) -> None:
    """Queue ejecting the drives of ``device_types`` (every drive when none is named)."""
    check_device_types(device_types)
    which = ", ".join(device_types) or "every drive"
    note = f"virtual media eject ({which}) requested"
    _queue(svc, ident, version, EJECT, EjectMedia(tuple(device_types), actor), note, actor)


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
