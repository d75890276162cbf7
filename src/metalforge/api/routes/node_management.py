"""Node management: boot device, NMI (>=1.29) and indicators (``/v1/nodes/{id}/management``).

Synchronous, as in Ironic; what it means to act while a conductor may hold
the node is in ``services.management``. Each route that calls the BMC runs
on the outbound pool (``api.outbound``), never on a request thread. Indicators are named
``<id>@<component>`` and, as in Ironic, served at every microversion.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from metalforge.api.auth.access import NODE, actor, guard
from metalforge.api.links import sub_links
from metalforge.api.locking import await_lock
from metalforge.api.outbound import calls_bmc
from metalforge.api.schemas import IndicatorStateRequest
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import base_url, services
from metalforge.services import indicators, lookup, management
from metalforge.services.bodies import Body

router = APIRouter(tags=["node management"])


class BootDeviceRequest(Body):
    boot_device: str = Field(min_length=1, max_length=64)
    persistent: bool = False


@router.get(
    "/nodes/{node_ident}/management/boot_device",
    summary="Show the boot device",
    dependencies=[guard("baremetal:node:get_boot_device", NODE)],
)
@calls_bmc
def get_boot_device(node_ident: str, request: Request) -> JSONResponse:
    found = management.boot_device(services(request), node_ident, request_version(request))
    return JSONResponse({"boot_device": found.device, "persistent": found.persistent})


@router.get(
    "/nodes/{node_ident}/management/boot_device/supported",
    summary="List the boot devices a node supports",
    dependencies=[guard("baremetal:node:get_boot_device", NODE)],
)
@calls_bmc
def get_supported_boot_devices(node_ident: str, request: Request) -> JSONResponse:
    svc, version = services(request), request_version(request)
    supported = management.supported_boot_devices(svc, node_ident, version)
    return JSONResponse({"supported_boot_devices": supported})


@router.put(
    "/nodes/{node_ident}/management/boot_device",
    status_code=204,
    summary="Set the boot device",
    dependencies=[guard("baremetal:node:set_boot_device", NODE)],
)
@await_lock
@calls_bmc
def set_boot_device(node_ident: str, request: Request, body: BootDeviceRequest) -> Response:
    svc, version = services(request), request_version(request)
    management.set_boot_device(svc, node_ident, version, body.boot_device, body.persistent)
    return Response(status_code=204)


NMI_SINCE: Version = (1, 29)


def _gate_nmi(request: Request) -> None:
    """Below 1.29 Ironic answers 404 before it checks the rule."""
    if request_version(request) < NMI_SINCE:
        raise lookup.not_found_path()


@router.put(
    "/nodes/{node_ident}/management/inject_nmi",
    status_code=204,
    summary="Inject a non-maskable interrupt",
    dependencies=[Depends(_gate_nmi), guard("baremetal:node:inject_nmi", NODE)],
)
@await_lock
@calls_bmc
def inject_nmi(node_ident: str, request: Request) -> Response:
    svc, version = services(request), request_version(request)
    management.inject_nmi(svc, node_ident, version, actor(request))
    return Response(status_code=204)


@router.get(
    "/nodes/{node_ident}/management/indicators",
    summary="List the node's indicators",
    dependencies=[guard("baremetal:node:get_indicator_state", NODE)],
)
@calls_bmc
def list_indicators(node_ident: str, request: Request) -> JSONResponse:
    found = indicators.list_indicators(services(request), node_ident, request_version(request))
    return JSONResponse(
        {
            "indicators": [
                {
                    "name": item.name,
                    "component": item.component,
                    "readonly": item.readonly,
                    "states": item.states,
                    "links": sub_links(
                        base_url(request),
                        "nodes",
                        node_ident,
                        f"management/indicators/{item.name}",
                    ),
                }
                for item in found
            ]
        }
    )


@router.get(
    "/nodes/{node_ident}/management/indicators/{indicator}",
    summary="Show an indicator's state",
    dependencies=[guard("baremetal:node:get_indicator_state", NODE)],
)
@calls_bmc
def get_indicator(node_ident: str, indicator: str, request: Request) -> JSONResponse:
    svc, version = services(request), request_version(request)
    return JSONResponse({"state": indicators.indicator_state(svc, node_ident, version, indicator)})


@router.put(
    "/nodes/{node_ident}/management/indicators/{indicator}",
    status_code=204,
    summary="Set an indicator's state",
    dependencies=[guard("baremetal:node:set_indicator_state", NODE)],
)
@await_lock
@calls_bmc
def set_indicator(
    node_ident: str, indicator: str, request: Request, body: IndicatorStateRequest
) -> Response:
    svc, version = services(request), request_version(request)
    indicators.set_indicator_state(svc, node_ident, version, indicator, body.state)
    return Response(status_code=204)
