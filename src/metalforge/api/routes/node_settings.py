"""A node's console (``states/console``), boot mode and secure boot (``states/...``, 1.76).

Each change is answered 202 and carried out by a conductor, as in Ironic;
``services.node_settings`` checks and queues it. The console is read at
``/v1/nodes/{node}/states/console`` and, as Ironic's router also serves it,
at ``/v1/nodes/states/console/{node}`` (the path tempest's client reads).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import NODE, actor, guard
from metalforge.api.locking import wait_for_lock
from metalforge.api.schemas import BootModeRequest, ConsoleRequest, SecureBootRequest
from metalforge.api.versions import Version, fmt, request_version
from metalforge.api.wiring import base_url, services
from metalforge.errors import not_found
from metalforge.services import node_settings

router = APIRouter(tags=["node states"])

BOOT_MODE_SINCE: Version = (1, 76)


def _gate_boot_settings(request: Request) -> None:
    """Ironic checks the rule first, then answers 404 below 1.76 with this message
    (before it looks at the body)."""
    if request_version(request) < BOOT_MODE_SINCE:
        raise not_found(
            f"This endpoint is supported starting with the API version {fmt(BOOT_MODE_SINCE)}"
        )


def _console_view(node_ident: str, request: Request) -> JSONResponse:
    info = node_settings.console_info(services(request), node_ident, request_version(request))
    return JSONResponse({"console_enabled": info is not None, "console_info": info})


@router.get(
    "/nodes/{node_ident}/states/console",
    summary="Show the console's state and connection information",
    dependencies=[guard("baremetal:node:get_console", NODE)],
)
def get_console(node_ident: str, request: Request) -> JSONResponse:
    return _console_view(node_ident, request)


@router.get(
    "/nodes/states/console/{node_ident}",
    summary="Show the console's state (the path Ironic's router also serves)",
    dependencies=[guard("baremetal:node:get_console", NODE)],
)
def get_console_by_suffix(node_ident: str, request: Request) -> JSONResponse:
    return _console_view(node_ident, request)


@router.put(
    "/nodes/{node_ident}/states/console",
    status_code=202,
    summary="Start or stop the console",
    dependencies=[guard("baremetal:node:set_console_state", NODE)],
)
@wait_for_lock
def set_console_state(node_ident: str, request: Request, body: ConsoleRequest) -> Response:
    svc = services(request)
    version = request_version(request)
    node_settings.request_console(svc, node_ident, version, body.enabled, actor(request))
    location = f"{base_url(request)}/v1/nodes/{node_ident}/states/console"
    return Response(status_code=202, headers={"Location": location})


def _accepted(request: Request, node_uuid: str) -> Response:
    location = f"{base_url(request)}/v1/nodes/{node_uuid}/states"
    return Response(status_code=202, headers={"Location": location})


@router.put(
    "/nodes/{node_ident}/states/boot_mode",
    status_code=202,
    summary="Change the boot mode (uefi or bios)",
    dependencies=[guard("baremetal:node:set_boot_mode", NODE), Depends(_gate_boot_settings)],
)
@wait_for_lock
def set_boot_mode(node_ident: str, request: Request, body: BootModeRequest) -> Response:
    version = request_version(request)
    svc = services(request)
    uuid = node_settings.request_boot_mode(svc, node_ident, version, body.target, actor(request))
    return _accepted(request, uuid)


@router.put(
    "/nodes/{node_ident}/states/secure_boot",
    status_code=202,
    summary="Turn secure boot on or off",
    dependencies=[
        guard("baremetal:node:set_secure_boot", NODE),
        Depends(_gate_boot_settings),
    ],
)
@wait_for_lock
def set_secure_boot(node_ident: str, request: Request, body: SecureBootRequest) -> Response:
    version = request_version(request)
    svc = services(request)
    uuid = node_settings.request_secure_boot(svc, node_ident, version, body.target, actor(request))
    return _accepted(request, uuid)
