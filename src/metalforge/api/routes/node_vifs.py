"""``/v1/nodes/{node}/vifs`` (>=1.28): the tenant network ports a node's ports carry.

Routes parse and authorize; ``services.vifs`` chooses the port or port group
and records the VIF there, fenced like a port write.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import NODE, guard
from metalforge.api.locking import wait_for_lock
from metalforge.api.schemas import VifAttach
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import services
from metalforge.errors import RequestError, bad_request, not_acceptable
from metalforge.services import lookup, vifs

router = APIRouter(tags=["nodes"])

SINCE: Version = (1, 28)
TARGETED_SINCE: Version = (1, 67)
"""From here a VIF may name the port or port group it goes to."""


def _gate(request: Request) -> Version:
    version = request_version(request)
    if version < SINCE:
        raise lookup.not_found_path()
    return version


def _checked_ident(value: str) -> str:
    """A VIF is named by a UUID or a logical name, as Ironic checks it."""
    if not lookup.is_uuid(value):
        try:
            lookup.check_name(value)
        except RequestError:
            raise bad_request(f"Expected a logical name or UUID but received {value}.") from None
    return value


@router.get(
    "/nodes/{node_ident}/vifs",
    summary="List the VIFs attached to a node",
    dependencies=[guard("baremetal:node:vif:list", NODE)],
)
def list_vifs(node_ident: str, request: Request) -> JSONResponse:
    version = _gate(request)
    attached = vifs.list_vifs(services(request), node_ident, version)
    return JSONResponse({"vifs": [{"id": vif} for vif in attached]})


@router.post(
    "/nodes/{node_ident}/vifs",
    status_code=204,
    summary="Attach a VIF to a free port or port group of the node",
    dependencies=[guard("baremetal:node:vif:attach", NODE)],
)
@wait_for_lock
def attach_vif(node_ident: str, request: Request, body: VifAttach) -> Response:
    version = _gate(request)
    targeted = body.port_uuid is not None or body.portgroup_uuid is not None
    if targeted and version < TARGETED_SINCE:
        raise not_acceptable("port_uuid and portgroup_uuid need API version 1.67 or later")
    if body.port_uuid is not None and body.portgroup_uuid is not None:
        raise bad_request("Cannot specify both port_uuid and portgroup_uuid")
    wanted = vifs.VifRequest(_checked_ident(body.id), body.port_uuid, body.portgroup_uuid)
    vifs.attach_vif(services(request), node_ident, version, wanted)
    return Response(status_code=204)


@router.delete(
    "/nodes/{node_ident}/vifs/{vif_id}",
    status_code=204,
    summary="Detach a VIF from the node",
    dependencies=[guard("baremetal:node:vif:detach", NODE)],
)
@wait_for_lock
def detach_vif(node_ident: str, vif_id: str, request: Request) -> Response:
    version = _gate(request)
    vifs.detach_vif(services(request), node_ident, version, _checked_ident(vif_id))
    return Response(status_code=204)
