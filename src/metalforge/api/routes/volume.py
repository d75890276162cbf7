"""``/v1/volume`` (>= 1.32): a node's volume connectors and targets, for booting from volumes.

The root and the two collections, and the same lists under a node
(``/v1/nodes/{node}/volume/...``). Below 1.32 none of it exists: 404 for
every method, as Ironic. Bodies are checked for shape here;
``services.volume`` applies patches against its policy and the rules (the
node's power state, uniqueness) and fences the node write;
``api.volume_view`` renders and lists.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Request, Response
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import (
    BODY,
    LIST,
    NODE,
    NODE_LIST,
    VOLUME_CONNECTOR,
    VOLUME_TARGET,
    guard,
    node_access,
    policy_caller,
)
from metalforge.api.locking import wait_for_lock
from metalforge.api.params import Query, fields
from metalforge.api.schemas import PatchOperation, operations
from metalforge.api.versions import request_version
from metalforge.api.volume_view import (
    CONNECTORS,
    SINCE,
    TARGETS,
    Collection,
    list_records,
    record_view,
    shows_properties,
    volume_links,
)
from metalforge.api.wiring import base_url, services
from metalforge.errors import not_found
from metalforge.services import volume as volume_service
from metalforge.services.bodies import VolumeConnectorCreate, VolumeTargetCreate
from metalforge.services.volume import Record, Spec


def _gate(request: Request) -> None:
    """Below 1.32 there is no volume resource at all: 404, before any other check."""
    if request_version(request) < SINCE:
        raise not_found("The resource could not be found.")


router = APIRouter(tags=["volume"], dependencies=[Depends(_gate)])

# -- the root ---------------------------------------------------------------


@router.get(
    "/volume",
    summary="Links to the volume collections",
    dependencies=[guard("baremetal:volume:get")],
)
@router.get("/volume/", include_in_schema=False, dependencies=[guard("baremetal:volume:get")])
def volume_root(request: Request) -> JSONResponse:
    return JSONResponse(volume_links(base_url(request)))


@router.get(
    "/nodes/{node_ident}/volume",
    summary="Links to a node's volume collections",
    dependencies=[guard("baremetal:volume:get", NODE)],
)
def node_volume(node_ident: str, request: Request) -> JSONResponse:
    node_access(request)  # a missing node is 404 (its guard may not have read it)
    return JSONResponse(volume_links(base_url(request), node_ident))


# -- lists --------------------------------------------------------------------


def _listed(request: Request, coll: Collection, **how: Any) -> JSONResponse:
    return JSONResponse(list_records(request, coll, **how))


@router.get(
    "/volume/connectors",
    summary="List volume connectors",
    dependencies=[guard("baremetal:volume:list_all", LIST)],
)
def list_connectors(request: Request) -> JSONResponse:
    return _listed(request, CONNECTORS)


@router.get(
    "/volume/connectors/detail",
    summary="List volume connectors with every field",
    dependencies=[guard("baremetal:volume:list_all", LIST)],
)
def list_connectors_detail(request: Request) -> JSONResponse:
    return _listed(request, CONNECTORS, detail_path=True)


@router.get(
    "/volume/targets",
    summary="List volume targets",
    dependencies=[guard("baremetal:volume:list_all", LIST)],
)
def list_targets(request: Request) -> JSONResponse:
    return _listed(request, TARGETS)


@router.get(
    "/volume/targets/detail",
    summary="List volume targets with every field",
    dependencies=[guard("baremetal:volume:list_all", LIST)],
)
def list_targets_detail(request: Request) -> JSONResponse:
    return _listed(request, TARGETS, detail_path=True)


@router.get(
    "/nodes/{node_ident}/volume/connectors",
    summary="List a node's volume connectors",
    dependencies=[guard("baremetal:volume:list_all", NODE_LIST)],
)
def list_node_connectors(node_ident: str, request: Request) -> JSONResponse:
    return _listed(request, CONNECTORS, node_ident=node_ident)


@router.get(
    "/nodes/{node_ident}/volume/targets",
    summary="List a node's volume targets",
    dependencies=[guard("baremetal:volume:list_all", NODE_LIST)],
)
def list_node_targets(node_ident: str, request: Request) -> JSONResponse:
    return _listed(request, TARGETS, node_ident=node_ident)


# -- show ---------------------------------------------------------------------


def _show(request: Request, coll: Collection, ident: str) -> JSONResponse:
    svc = services(request)
    wanted = fields(Query(request, ("fields",)), coll.fields)
    with svc.db.read() as session:
        record = volume_service.find(session, coll.kind, ident)
        view = record_view(record, base_url(request), wanted, properties=shows_properties(request))
    return JSONResponse(view)


@router.get(
    "/volume/connectors/{connector_uuid}",
    summary="Show a volume connector",
    dependencies=[guard("baremetal:volume:get", VOLUME_CONNECTOR)],
)
def show_connector(connector_uuid: str, request: Request) -> JSONResponse:
    return _show(request, CONNECTORS, connector_uuid)


@router.get(
    "/volume/targets/{target_uuid}",
    summary="Show a volume target",
    dependencies=[guard("baremetal:volume:get", VOLUME_TARGET)],
)
def show_target(target_uuid: str, request: Request) -> JSONResponse:
    return _show(request, TARGETS, target_uuid)


# -- create -------------------------------------------------------------------


def _created(request: Request, spec: Spec) -> JSONResponse:
    record = volume_service.create(services(request), spec, caller=policy_caller(request))
    base = base_url(request)
    view = record_view(record, base)
    return JSONResponse(view, status_code=201, headers={"Location": view["links"][0]["href"]})


@router.post(
    "/volume/connectors",
    status_code=201,
    summary="Create a volume connector",
    dependencies=[guard("baremetal:volume:create", BODY)],
)
@wait_for_lock
def create_connector(request: Request, body: VolumeConnectorCreate) -> JSONResponse:
    return _created(request, volume_service.spec_from(body))


@router.post(
    "/volume/targets",
    status_code=201,
    summary="Create a volume target",
    dependencies=[guard("baremetal:volume:create", BODY)],
)
@wait_for_lock
def create_target(request: Request, body: VolumeTargetCreate) -> JSONResponse:
    return _created(request, volume_service.spec_from(body))


# -- update -------------------------------------------------------------------


def _patched(
    request: Request, coll: Collection, ident: str, patch: list[PatchOperation]
) -> JSONResponse:
    record: Record = volume_service.patch(
        services(request),
        coll.kind,
        ident,
        request_version(request),
        operations(patch),
        caller=policy_caller(request),
    )
    view = record_view(record, base_url(request), properties=shows_properties(request))
    return JSONResponse(view)


@router.patch(
    "/volume/connectors/{connector_uuid}",
    summary="Update a volume connector with a JSON patch",
    dependencies=[guard("baremetal:volume:update", VOLUME_CONNECTOR)],
)
@wait_for_lock
def patch_connector(
    connector_uuid: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    return _patched(request, CONNECTORS, connector_uuid, patch)


@router.patch(
    "/volume/targets/{target_uuid}",
    summary="Update a volume target with a JSON patch",
    dependencies=[guard("baremetal:volume:update", VOLUME_TARGET)],
)
@wait_for_lock
def patch_target(
    target_uuid: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    return _patched(request, TARGETS, target_uuid, patch)


# -- delete -------------------------------------------------------------------


@router.delete(
    "/volume/connectors/{connector_uuid}",
    status_code=204,
    summary="Delete a volume connector",
    dependencies=[guard("baremetal:volume:delete", VOLUME_CONNECTOR)],
)
@wait_for_lock
def delete_connector(connector_uuid: str, request: Request) -> Response:
    volume_service.remove(services(request), volume_service.CONNECTORS, connector_uuid)
    return Response(status_code=204)


@router.delete(
    "/volume/targets/{target_uuid}",
    status_code=204,
    summary="Delete a volume target",
    dependencies=[guard("baremetal:volume:delete", VOLUME_TARGET)],
)
@wait_for_lock
def delete_target(target_uuid: str, request: Request) -> Response:
    volume_service.remove(services(request), volume_service.TARGETS, target_uuid)
    return Response(status_code=204)
