"""``/v1/chassis``: named groups of nodes (a rack, an enclosure).

A chassis has a UUID, a description and ``extra``; nodes name it in
``chassis_uuid`` and are listed under it (``/v1/chassis/{uuid}/nodes``,
served with the other node lists in ``routes.nodes``). The rules -- a
node's chassis must exist, a chassis with nodes cannot be deleted -- are
``services.chassis``'s.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import select

from metalforge.api import listing
from metalforge.api.auth.access import guard
from metalforge.api.links import links, sub_links
from metalforge.api.params import Query, fields, page
from metalforge.api.schemas import PatchOperation, operations
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import Chassis
from metalforge.services import chassis as chassis_service
from metalforge.services.bodies import ChassisCreate
from metalforge.services.chassis import ChassisSpec

router = APIRouter(tags=["chassis"])

CHASSIS_FIELDS: dict[str, Version] = dict.fromkeys(
    ("uuid", "description", "extra", "created_at", "updated_at", "links", "nodes"), (1, 1)
)
LIST_DEFAULT = ("uuid", "description")
SORTABLE = {"id", "uuid", "description", "created_at", "updated_at"}


def chassis_view(chassis: Chassis, base: str, wanted: list[str] | None = None) -> dict[str, Any]:
    """Ironic's chassis; ``nodes`` is a list holding the links list, as Ironic renders it."""
    names = wanted if wanted is not None else list(CHASSIS_FIELDS)
    body: dict[str, Any] = {}
    for name in names:
        if name == "links":
            body[name] = links(base, "chassis", chassis.uuid)
        elif name == "nodes":
            body[name] = [sub_links(base, "chassis", chassis.uuid, "nodes")]
        elif name in ("created_at", "updated_at"):
            value = getattr(chassis, name)
            body[name] = value.isoformat() if value else None
        else:
            body[name] = getattr(chassis, name)
    if wanted is not None:
        body["links"] = links(base, "chassis", chassis.uuid)
    return body


def _list(request: Request, *, detail_path: bool) -> dict[str, Any]:
    svc = services(request)
    allowed = ["limit", "marker", "sort_key", "sort_dir"]
    if not detail_path:
        allowed += ["fields", "detail"]
    query = Query(request, allowed)
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE, forbidden_keys={"extra"})
    wanted = fields(query, CHASSIS_FIELDS) if not detail_path else None
    detail = listing.detail_or_fields(query, wanted, detail_path=detail_path, since=None)
    if wanted is None and not detail:
        wanted = list(LIST_DEFAULT)
    base = base_url(request)
    with svc.db.read() as session:
        found = list(session.scalars(listing.paged(select(Chassis), session, Chassis, pg)))
        items = [chassis_view(c, base, wanted) for c in found]
    last = found[-1].uuid if found else None
    path = "chassis/detail" if detail_path else "chassis"
    return {"chassis": items, **listing.next_link(base, path, query, pg, len(found), last)}


@router.get("/chassis", summary="List chassis", dependencies=[guard("baremetal:chassis:get")])
@router.get("/chassis/", include_in_schema=False, dependencies=[guard("baremetal:chassis:get")])
def list_chassis(request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=False))


@router.get(
    "/chassis/detail",
    summary="List chassis with every field",
    dependencies=[guard("baremetal:chassis:get")],
)
def list_chassis_detail(request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=True))


@router.get(
    "/chassis/{chassis_uuid}",
    summary="Show a chassis",
    dependencies=[guard("baremetal:chassis:get")],
)
def show_chassis(chassis_uuid: str, request: Request) -> JSONResponse:
    svc = services(request)
    wanted = fields(Query(request, ("fields",)), CHASSIS_FIELDS)
    with svc.db.read() as session:
        chassis = chassis_service.find_chassis(session, chassis_uuid)
        return JSONResponse(chassis_view(chassis, base_url(request), wanted))


@router.post(
    "/chassis",
    status_code=201,
    summary="Create a chassis",
    dependencies=[guard("baremetal:chassis:create")],
)
def create_chassis(request: Request, body: ChassisCreate) -> JSONResponse:
    spec = ChassisSpec(body.description, body.extra or {}, body.uuid)
    chassis = chassis_service.create_chassis(services(request), spec)
    base = base_url(request)
    return JSONResponse(
        chassis_view(chassis, base),
        status_code=201,
        headers={"Location": f"{base}/v1/chassis/{chassis.uuid}"},
    )


@router.patch(
    "/chassis/{chassis_uuid}",
    summary="Update a chassis with a JSON patch",
    dependencies=[guard("baremetal:chassis:update")],
)
def patch_chassis(
    chassis_uuid: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    chassis = chassis_service.patch_chassis(
        services(request), chassis_uuid, request_version(request), operations(patch)
    )
    return JSONResponse(chassis_view(chassis, base_url(request)))


@router.delete(
    "/chassis/{chassis_uuid}",
    status_code=204,
    summary="Delete a chassis",
    dependencies=[guard("baremetal:chassis:delete")],
)
def delete_chassis(chassis_uuid: str, request: Request) -> Response:
    chassis_service.delete_chassis(services(request), chassis_uuid)
    return Response(status_code=204)
