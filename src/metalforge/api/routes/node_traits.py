"""``/v1/nodes/{id}/traits`` (API 1.37).

The routes check the request (version, trait names, no body for a single
trait) and call ``metalforge.services.traits``, which fences the node write
and records who asked.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import NODE, actor, guard
from metalforge.api.locking import wait_for_lock
from metalforge.api.schemas import TraitsReplace
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import services
from metalforge.errors import RequestError, bad_request, not_acceptable, not_found
from metalforge.services import traits
from metalforge.services.values import check_trait

router = APIRouter(tags=["node traits"])

MIN_VERSION: Version = (1, 37)


def _version(request: Request) -> Version:
    """The request's version; below 1.37 traits are refused as Ironic refuses them, by
    verb: a read is not acceptable (406), an addition not allowed (405), a removal finds
    nothing to remove (404)."""
    version = request_version(request)
    if version < MIN_VERSION:
        if request.method == "GET":
            raise not_acceptable("Traits are not available at this API version; use 1.37")
        if request.method == "DELETE":
            raise not_found("The resource could not be found.")
        raise RequestError(405, "Traits cannot be changed at this API version; use 1.37")
    return version


@router.get(
    "/nodes/{node_ident}/traits",
    summary="List a node's traits",
    dependencies=[guard("baremetal:node:traits:list", NODE)],
)
def list_traits(node_ident: str, request: Request) -> JSONResponse:
    found = traits.list_traits(services(request), node_ident, _version(request))
    return JSONResponse({"traits": found})


@router.put(
    "/nodes/{node_ident}/traits",
    status_code=204,
    summary="Replace a node's traits",
    dependencies=[guard("baremetal:node:traits:set", NODE)],
)
@wait_for_lock
def replace_traits(node_ident: str, request: Request, body: TraitsReplace) -> Response:
    wanted = [check_trait(t) for t in body.traits]
    version = _version(request)
    traits.set_traits(services(request), node_ident, version, wanted, actor=actor(request))
    return Response(status_code=204)


@router.put(
    "/nodes/{node_ident}/traits/{trait}",
    status_code=204,
    summary="Add one trait",
    dependencies=[guard("baremetal:node:traits:set", NODE)],
)
async def add_trait(node_ident: str, trait: str, request: Request) -> Response:
    raw = (await request.body()).strip()
    # Clients send nothing, or an empty object (tempest's client does); Ironic takes both.
    if raw and raw not in (b"{}", b"null"):
        raise bad_request("No body is accepted when adding a single trait")
    return await _add_trait(node_ident, trait, request=request)


@wait_for_lock
def _add_trait(node_ident: str, trait: str, request: Request) -> Response:
    check_trait(trait)
    version = _version(request)
    traits.add_trait(services(request), node_ident, version, trait, actor=actor(request))
    return Response(status_code=204)


@router.delete(
    "/nodes/{node_ident}/traits",
    status_code=204,
    summary="Remove every trait",
    dependencies=[guard("baremetal:node:traits:delete", NODE)],
)
@wait_for_lock
def remove_traits(node_ident: str, request: Request) -> Response:
    version = _version(request)
    traits.remove_traits(services(request), node_ident, version, actor=actor(request))
    return Response(status_code=204)


@router.delete(
    "/nodes/{node_ident}/traits/{trait}",
    status_code=204,
    summary="Remove a trait",
    dependencies=[guard("baremetal:node:traits:delete", NODE)],
)
@wait_for_lock
def remove_trait(node_ident: str, trait: str, request: Request) -> Response:
    version = _version(request)
    traits.remove_trait(services(request), node_ident, version, trait, actor=actor(request))
    return Response(status_code=204)
