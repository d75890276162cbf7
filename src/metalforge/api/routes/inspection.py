"""Ironic's inspection routes: the ramdisk's report and a node's inventory.

``POST /v1/continue_inspection`` is what ironic-python-agent's inspection
collector calls (public, like lookup and heartbeat: the ramdisk has no
credentials). It answers at API 1.1, which the agent sends by sending no
version, with ``{"uuid": ...}`` (the form ironic-inspector answered), and
from 1.84 with the node and the agent's configuration, like a lookup;
versions between are refused as Ironic refuses them.
``GET /v1/nodes/{id}/inventory`` (1.81) returns what the last inspection
collected. What they do is in ``services.inspection``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import NODE, guard
from metalforge.api.routes.agent import lookup_body
from metalforge.api.schemas import REPORT_BODY, report_body, storable_report
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import services
from metalforge.errors import bad_request, not_found
from metalforge.services import inspection

agent_router = APIRouter(tags=["ramdisk agent"])
router = APIRouter(tags=["node inventory"])

CONTINUE_SINCE: Version = (1, 84)
"""From this version the callback may name its node and answers like a lookup."""
INVENTORY_SINCE: Version = (1, 81)


@agent_router.post(
    "/v1/continue_inspection",
    status_code=202,
    summary="The inspection ramdisk reports the hardware it found",
    openapi_extra=REPORT_BODY,
)
def continue_inspection(
    request: Request, node_uuid: str | None = None, report: Any = Depends(report_body)
) -> JSONResponse:
    version = request_version(request)
    if (1, 1) < version < CONTINUE_SINCE:
        raise not_found(f"API version {CONTINUE_SINCE[0]}.{CONTINUE_SINCE[1]} or newer is required")
    if node_uuid is not None and version < CONTINUE_SINCE:
        raise bad_request("node_uuid needs API version 1.84 or newer")
    node = inspection.continue_inspection(services(request), storable_report(report), node_uuid)
    if version < CONTINUE_SINCE:
        return JSONResponse({"uuid": node.uuid}, status_code=202)
    return JSONResponse(lookup_body(request, node, None, version), status_code=202)


@router.get(
    "/nodes/{node_ident}/inventory",
    summary="What the node's last inspection collected",
    dependencies=[guard("baremetal:node:inventory:get", NODE)],
)
def node_inventory(node_ident: str, request: Request) -> JSONResponse:
    version = request_version(request)
    if version < INVENTORY_SINCE:
        raise not_found("The resource could not be found.")
    return JSONResponse(inspection.inventory(services(request), node_ident, version))
