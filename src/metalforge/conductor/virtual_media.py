"""Virtual media an operator attaches or ejects by hand, run by the node's conductor.

Ironic's API answers these 204 once the request is checked and its
conductor has the node, and does the work in a spawned worker: fetching
the image (with ``image_download_source`` ``local``) and the BMC calls
happen after the answer, and a failure is left in ``last_error`` and the
node's history. metalforge queues a work item instead of spawning, so the
image fetch and the BMC calls happen in a conductor worker under the node's
reservation, within ``conductor.work_deadlines.virtual_media``, the image
download within its own deadline and minimum rate
(``netboot.image_fetch_*``) and each BMC call within the guard's
``call_deadline``. Nothing a tenant's image server or BMC does can hold an
API thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from metalforge.conductor import history
from metalforge.conductor.task import NodeTask
from metalforge.conductor.work import NodeWork
from metalforge.config import WorkDeadlines
from metalforge.drivers.base import (
    VMEDIA_DEVICES,
    DriverError,
    ManagementInterface,
    Unsupported,
    optional_interface_of,
)
from metalforge.netboot.images import ImageError, ImageKind, cache_for

EVENT_TYPE = "management"


@dataclass(frozen=True)
class AttachMedia:
    """An accepted request to insert ``image_url`` into the node's ``device_type`` drive."""

    device_type: str
    image_url: str
    download_source: str
    """``http``: the BMC downloads ``image_url``; ``local``: it downloads metalforge's copy."""
    actor: str | None = None


@dataclass(frozen=True)
class EjectMedia:
    """An accepted request to eject the drives of ``device_types`` (all when empty)."""

    device_types: tuple[str, ...] = ()
    actor: str | None = None


def fail(task: NodeTask, message: str) -> None:
    """A virtual media request fails alone: ``last_error`` and history, never the flow."""
    task.node.last_error = message
    task.record(EVENT_TYPE, message, history.ERROR)


def _management(task: NodeTask) -> ManagementInterface:
    iface = optional_interface_of(task, ManagementInterface)
    if iface is None:
        raise Unsupported(task.node.driver, "management")
    iface.validate(task)
    return iface


def _pin(device: str) -> str:
    return f"virtual {device}"


def served_url(task: NodeTask, request: AttachMedia) -> str:
    """The URL the BMC is given: the image's own, or metalforge's checked copy of it, which
    the image cache keeps while it stays attached."""
    if request.download_source == "http":
        return request.image_url
    netboot = task.settings.netboot
    cache = cache_for(netboot)
    image = cache.fetch(request.image_url, ImageKind.for_device(request.device_type))
    cache.pin(task.node.uuid, _pin(request.device_type), (image,))
    return f"{netboot.http_url}/boot/images/{image.digest}"


def _release(task: NodeTask, devices: tuple[str, ...]) -> None:
    """The ejected drives' copies are no longer kept for the node."""
    try:
        cache = cache_for(task.settings.netboot)
    except ImageError:
        return  # no cache: nothing was kept
    for device in devices or VMEDIA_DEVICES:
        cache.unpin(task.node.uuid, _pin(device))


def run_attach(task: NodeTask, request: AttachMedia) -> None:
    device = request.device_type
    try:
        iface = _management(task)
        iface.attach_virtual_media(task, device, served_url(task, request))
    except (DriverError, ImageError) as exc:
        fail(task, f"Could not attach device {device} to node {task.node.uuid}: {exc}")
        return
    task.record(EVENT_TYPE, f"virtual {device} attached by {request.actor or 'the API'}")


def run_eject(task: NodeTask, request: EjectMedia) -> None:
    which = ", ".join(request.device_types) or "every drive"
    try:
        _management(task).detach_virtual_media(task, list(request.device_types))
    except DriverError as exc:
        fail(task, f"Could not detach device(s) {which} from node {task.node.uuid}: {exc}")
        return
    _release(task, request.device_types)
    task.record(EVENT_TYPE, f"virtual media ejected ({which}) by {request.actor or 'the API'}")


def _deadline(deadlines: WorkDeadlines) -> float:
    return deadlines.virtual_media


ATTACH: NodeWork[AttachMedia] = NodeWork("vmedia_attach", AttachMedia, run_attach, fail, _deadline)
EJECT: NodeWork[EjectMedia] = NodeWork("vmedia_eject", EjectMedia, run_eject, fail, _deadline)
