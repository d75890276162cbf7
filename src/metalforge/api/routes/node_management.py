"""Node management: boot device (``/v1/nodes/{id}/management/boot_device``).

Synchronous, as in Ironic; what it means to set the boot device while a
conductor may hold the node is in ``services.management``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from metalforge.api.auth.access import guard
from metalforge.api.locking import wait_for_lock
from metalforge.api.schemas import Body
from metalforge.api.services import services
from metalforge.api.versions import request_version
from metalforge.services import management

router = APIRouter(tags=["node management"])


class BootDeviceRequest(Body):
    boot_device: str = Field(min_length=1, max_length=64)
    persistent: bool = False


@router.get(
    "/nodes/{node_ident}/management/boot_device",
    summary="Show the boot device",
    dependencies=[guard("baremetal:node:get_boot_device", "node")],
)
def get_boot_device(node_ident: str, request: Request) -> JSONResponse:
    found = management.boot_device(services(request), node_ident, request_version(request))
    return JSONResponse({"boot_device": found.device, "persistent": found.persistent})


@router.get(
    "/nodes/{node_ident}/management/boot_device/supported",
    summary="List the boot devices a node supports",
    dependencies=[guard("baremetal:node:get_boot_device", "node")],
)
def get_supported_boot_devices(node_ident: str, request: Request) -> JSONResponse:
    svc, version = services(request), request_version(request)
    supported = management.supported_boot_devices(svc, node_ident, version)
    return JSONResponse({"supported_boot_devices": supported})


@router.put(
    "/nodes/{node_ident}/management/boot_device",
    status_code=204,
    summary="Set the boot device",
    dependencies=[guard("baremetal:node:set_boot_device", "node")],
)
@wait_for_lock
def set_boot_device(node_ident: str, request: Request, body: BootDeviceRequest) -> Response:
    svc, version = services(request), request_version(request)
    management.set_boot_device(svc, node_ident, version, body.boot_device, body.persistent)
    return Response(status_code=204)
