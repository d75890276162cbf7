"""Node management: boot device (``/v1/nodes/{id}/management/boot_device``).

As in Ironic these calls are synchronous: the answer says what the BMC did.
Setting the boot device takes the node's reservation for the length of the
BMC call, so it cannot interleave with a conductor's flow on the node (a
deploy setting its own boot device); a node that a conductor holds answers
409 after the usual short wait. The reservation is taken as
``api@<conductor.hostname>``, a holder that is no conductor: should the API
process die mid-call, the next conductor (or request) that needs the node
takes the reservation at once, and the node is never stuck. A conductor that
takes it while the call runs wins; the fencing epoch then turns this request
into a 409. Reads take no reservation (Ironic takes only a shared lock for
them).

A BMC failure answers 400 with the driver's message, which names the BMC
and the reason.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from metalforge.api.auth.access import guard
from metalforge.api.locking import wait_for_lock
from metalforge.api.schemas import Body
from metalforge.api.services import ApiServices, services
from metalforge.api.versions import request_version
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.task import LockLost, NodeGone, acquire
from metalforge.db.models import Node
from metalforge.drivers.base import (
    BOOT_DEVICES,
    DriverError,
    DriverTask,
    ManagementInterface,
    ReadOnlyTask,
)
from metalforge.drivers.hardware import UnknownDriver
from metalforge.errors import NodeLocked, RequestError, bad_request, conflict
from metalforge.services import lookup

router = APIRouter(tags=["node management"])


class BootDeviceRequest(Body):
    boot_device: str = Field(min_length=1, max_length=64)
    persistent: bool = False


def _management(svc: ApiServices, node: Node) -> ManagementInterface:
    try:
        iface = svc.drivers.interface(node, "management")
    except UnknownDriver as exc:
        raise bad_request(str(exc)) from None
    if not isinstance(iface, ManagementInterface):
        raise bad_request(f"Node {node.uuid} has no management interface ({iface.name})")
    return iface


def _load(svc: ApiServices, request: Request, node_ident: str) -> Node:
    with svc.db.read() as session:
        return lookup.load_node(session, node_ident, request_version(request))


def _driver_failure(node: Node, doing: str, exc: DriverError) -> RequestError:
    return bad_request(f"Failed to {doing} for node {node.uuid}: {exc}")


def _supported(iface: ManagementInterface, task: DriverTask) -> list[str]:
    iface.validate(task)
    return [d for d in iface.supported_boot_devices(task) if d in BOOT_DEVICES]


@router.get(
    "/nodes/{node_ident}/management/boot_device",
    summary="Show the boot device",
    dependencies=[guard("baremetal:node:get_boot_device", "node")],
)
def get_boot_device(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    node = _load(svc, request, node_ident)
    iface = _management(svc, node)
    task = ReadOnlyTask(node)
    try:
        iface.validate(task)
        found = iface.get_boot_device(task)
    except DriverError as exc:
        raise _driver_failure(node, "read the boot device", exc) from None
    return JSONResponse(
        {"boot_device": found.get("boot_device"), "persistent": found.get("persistent")}
    )


@router.get(
    "/nodes/{node_ident}/management/boot_device/supported",
    summary="List the boot devices a node supports",
    dependencies=[guard("baremetal:node:get_boot_device", "node")],
)
def get_supported_boot_devices(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    node = _load(svc, request, node_ident)
    iface = _management(svc, node)
    try:
        supported = _supported(iface, ReadOnlyTask(node))
    except DriverError as exc:
        raise _driver_failure(node, "list the boot devices", exc) from None
    return JSONResponse({"supported_boot_devices": supported})


@router.put(
    "/nodes/{node_ident}/management/boot_device",
    status_code=204,
    summary="Set the boot device",
    dependencies=[guard("baremetal:node:set_boot_device", "node")],
)
@wait_for_lock
def set_boot_device(node_ident: str, request: Request, body: BootDeviceRequest) -> Response:
    svc = services(request)
    device = body.boot_device
    if device not in BOOT_DEVICES:
        raise bad_request(
            f"Invalid boot device {device!r}; valid devices are {', '.join(BOOT_DEVICES)}"
        )
    node = _load(svc, request, node_ident)
    if node.reservation is not None:
        raise NodeLocked(node.uuid, node.reservation)
    conductor = svc.settings.conductor
    ctx = ConductorContext(
        hostname=f"api@{conductor.hostname}", db=svc.db, drivers=svc.drivers, settings=conductor
    )
    try:
        with acquire(ctx, node.id, "set boot device") as task:
            iface = _management(svc, task.node)
            try:
                supported = _supported(iface, task)
                if device not in supported:
                    raise bad_request(
                        f"Boot device {device!r} is not supported by node {node.uuid}; "
                        f"supported: {', '.join(supported) or 'none'}"
                    )
                iface.set_boot_device(task, device, body.persistent)
            except DriverError as exc:
                raise _driver_failure(node, f"set the boot device to {device}", exc) from None
            how = "persistent" if body.persistent else "next boot only"
            task.record("management", f"boot device set to {device} ({how})")
    except NodeLocked as exc:
        raise NodeLocked(node.uuid, exc.holder) from None
    except LockLost:
        raise conflict(
            f"Node {node.uuid} was taken over by a conductor while its boot device was being "
            "set; check the boot device and retry"
        ) from None
    except NodeGone:
        raise lookup.node_not_found(node_ident) from None
    return Response(status_code=204)
