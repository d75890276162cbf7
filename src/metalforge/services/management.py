"""The boot device, read and set through the node's management interface.

As in Ironic these calls are synchronous: the answer says what the BMC did.
Setting the boot device takes the node's reservation for the length of the
BMC call, so it cannot interleave with a conductor's flow on the node (a
deploy setting its own boot device); a node that a conductor holds answers
409 (``NodeLocked``, after the API's usual short wait). The reservation is
taken as ``api@<conductor.hostname> until <deadline>`` (``fencing.api_hold``),
a holder that is no conductor: should the API process die mid-call, the next
conductor that needs the node takes the reservation at once, and a request
takes it once its deadline (``api.call_hold_seconds``) has passed, so the
node is never stuck. A conductor that takes the node while the call runs
wins; the fencing epoch then turns this request into a 409. Two boot-device
requests on one node: the second is refused while the first's hold stands,
except in the moment between its check and its taking of the reservation
(taking, like a conductor's, passes over any holder that is no live
conductor); then the first call ends in 409, fenced, and the second's
device stands. Reads take no
reservation (Ironic takes only a shared lock for them). A BMC failure
answers 400 with the driver's message, which names the BMC and the reason.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from metalforge.conductor.context import ConductorContext
from metalforge.conductor.reservations import acquire
from metalforge.conductor.task import LockLost, NodeGone
from metalforge.db.models import Node
from metalforge.drivers.base import (
    BOOT_DEVICES,
    DriverError,
    DriverTask,
    ManagementInterface,
    NotOffered,
    ReadOnlyTask,
    Unsupported,
)
from metalforge.errors import RequestError, bad_request, conflict
from metalforge.services import fencing, lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version


@dataclass(frozen=True)
class BootDevice:
    device: str | None
    persistent: bool | None


def interface_of(svc: Services, node: Node) -> ManagementInterface:
    try:
        return svc.drivers.interface_of(node, ManagementInterface, "manage the node")
    except NotOffered as exc:
        raise bad_request(
            f"Node {node.uuid} has no management interface ({exc.implementation})"
        ) from None


def load_node(svc: Services, ident: str, version: Version) -> Node:
    with svc.db.read() as session:
        return lookup.load_node(session, ident, version)


def _driver_failure(node: Node, doing: str, exc: DriverError) -> RequestError:
    return bad_request(f"Failed to {doing} for node {node.uuid}: {exc}")


def _supported(iface: ManagementInterface, task: DriverTask) -> list[str]:
    iface.validate(task)
    return [d for d in iface.supported_boot_devices(task) if d in BOOT_DEVICES]


def boot_device(svc: Services, ident: str, version: Version) -> BootDevice:
    """What the BMC says the node boots from next."""
    node = load_node(svc, ident, version)
    iface = interface_of(svc, node)
    task = ReadOnlyTask(node)
    try:
        iface.validate(task)
        found = iface.get_boot_device(task)
    except DriverError as exc:
        raise _driver_failure(node, "read the boot device", exc) from None
    return BootDevice(found.get("boot_device"), found.get("persistent"))


def supported_boot_devices(svc: Services, ident: str, version: Version) -> list[str]:
    node = load_node(svc, ident, version)
    iface = interface_of(svc, node)
    try:
        return _supported(iface, ReadOnlyTask(node))
    except DriverError as exc:
        raise _driver_failure(node, "list the boot devices", exc) from None


@contextmanager
def held(
    svc: Services, ident: str, version: Version, purpose: str, doing: str
) -> Iterator[tuple[DriverTask, ManagementInterface]]:
    """The node under an API hold (see the module's docstring) and its management interface.

    ``doing`` completes "... while <doing>" in the 409 a conductor's takeover
    causes. A ``DriverError`` inside becomes a 400: Ironic's own message for
    an action the interface lacks, else one naming the node and ``purpose``.
    """
    with svc.db.write() as session:
        node = lookup.load_node(session, ident, version)
        fencing.check_unlocked(session, node)
    conductor = svc.settings.conductor
    until = svc.db.now() + dt.timedelta(seconds=svc.settings.api.call_hold_seconds)
    holder = fencing.api_hold(conductor.hostname, until)
    ctx = ConductorContext(hostname=holder, db=svc.db, drivers=svc.drivers, settings=conductor)
    try:
        with acquire(ctx, node.id, purpose) as task:
            iface = interface_of(svc, task.node)
            try:
                iface.validate(task)
                yield task, iface
            except Unsupported as exc:
                raise bad_request(str(exc)) from None
            except DriverError as exc:
                raise _driver_failure(node, purpose, exc) from None
    except LockLost:
        raise conflict(
            f"Node {node.uuid} was taken over by a conductor while {doing}; "
            "check the node and retry"
        ) from None
    except NodeGone:
        raise lookup.node_not_found(ident) from None


def set_boot_device(
    svc: Services, ident: str, version: Version, device: str, persistent: bool
) -> None:
    """Set the boot device under the node's reservation (see the module's docstring)."""
    if device not in BOOT_DEVICES:
        raise bad_request(
            f"Invalid boot device {device!r}; valid devices are {', '.join(BOOT_DEVICES)}"
        )
    doing = "its boot device was being set"
    with held(svc, ident, version, f"set the boot device to {device}", doing) as (task, iface):
        supported = _supported(iface, task)
        if device not in supported:
            raise bad_request(
                f"Boot device {device!r} is not supported by node {task.node.uuid}; "
                f"supported: {', '.join(supported) or 'none'}"
            )
        iface.set_boot_device(task, device, persistent)
        how = "persistent" if persistent else "next boot only"
        task.record("management", f"boot device set to {device} ({how})")


def inject_nmi(svc: Services, ident: str, version: Version, actor: str | None) -> None:
    """Send the node a non-maskable interrupt now (synchronous, as in Ironic)."""
    with held(svc, ident, version, "inject NMI", "an NMI was being injected") as (task, iface):
        iface.inject_nmi(task)
        task.record("management", f"NMI injected by {actor or 'the API'}")
