"""``/v1/nodes/{id}/vmedia``: attach (1.89), detach (1.89) and list (1.93) virtual media.

Attaching and detaching are queued for the node's conductor and answered
204, as Ironic's; listing reads the BMC on the outbound pool
(``api.outbound``). ``services.vmedia`` says how the image reaches the BMC.
"""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import NODE, actor, guard
from metalforge.api.gates import absent_before
from metalforge.api.locking import wait_for_lock
from metalforge.api.outbound import calls_bmc
from metalforge.api.params import Query
from metalforge.api.schemas import VmediaAttachRequest
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import services
from metalforge.services import vmedia

router = APIRouter(tags=["node virtual media"])

SINCE: Version = (1, 89)
LIST_SINCE: Version = (1, 93)
_PATH = "/nodes/{node_ident}/vmedia"
_GATE = absent_before(SINCE, "The API version does not allow virtual media actions")
_LIST_GATE = absent_before(LIST_SINCE, "The API version does not allow listing virtual media")


@router.post(
    _PATH,
    status_code=204,
    summary="Attach virtual media",
    dependencies=[_GATE, guard("baremetal:node:vmedia:attach", NODE)],
)
@wait_for_lock
def attach(node_ident: str, request: Request, body: VmediaAttachRequest) -> Response:
    vmedia.attach(
        services(request),
        node_ident,
        request_version(request),
        body.device_type,
        body.image_url,
        body.image_download_source,
        actor(request),
    )
    return Response(status_code=204)


@router.delete(
    _PATH,
    status_code=204,
    summary="Detach virtual media",
    dependencies=[_GATE, guard("baremetal:node:vmedia:detach", NODE)],
)
@wait_for_lock
def detach(node_ident: str, request: Request) -> Response:
    query = Query(request, ("device_types",))
    raw = query.get("device_types") or ""
    device_types = [d.strip() for d in raw.split(",") if d.strip()]
    vmedia.detach(services(request), node_ident, query.version, device_types, actor(request))
    return Response(status_code=204)


@router.get(
    _PATH,
    summary="List virtual media",
    dependencies=[_LIST_GATE, guard("baremetal:node:vmedia:get", NODE)],
)
@calls_bmc
def list_vmedia(node_ident: str, request: Request) -> JSONResponse:
    """A JSON list, as Ironic answers: one object per drive."""
    found = vmedia.listed(services(request), node_ident, request_version(request))
    return JSONResponse([{**asdict(d), "media_types": list(d.media_types)} for d in found])
