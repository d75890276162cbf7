"""``/v1/runbooks`` (>=1.92): named clean and service steps, owned by a project or public.

``services.runbooks`` holds the rules (names, owners, who may use a runbook
on which node); here are the paths, their microversions and the views. A
runbook's ``traits`` (>=1.112) change only through ``/v1/runbooks/{id}/traits``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from metalforge.api import listing
from metalforge.api.auth import access
from metalforge.api.auth.access import (
    LIST,
    RUNBOOK,
    RUNBOOK_OR_PUBLIC,
    guard,
    identity_of,
    policy_caller,
    project_scope,
)
from metalforge.api.gates import absent_before, refused_before
from metalforge.api.links import links
from metalforge.api.params import Query, fields, page
from metalforge.api.schemas import PatchOperation, TraitsReplace, operations
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import Runbook
from metalforge.errors import bad_request
from metalforge.redaction import mask_document
from metalforge.services import runbooks
from metalforge.services.bodies import RunbookCreate

router = APIRouter(tags=["runbooks"])

SINCE: Version = runbooks.SINCE
TRAITS_SINCE: Version = runbooks.TRAITS_SINCE
RUNBOOK_FIELDS: dict[str, Version] = {
    **dict.fromkeys(
        (
            "uuid",
            "name",
            "steps",
            "extra",
            "public",
            "owner",
            "disable_ramdisk",
            "created_at",
            "updated_at",
            "links",
        ),
        SINCE,
    ),
    "description": TRAITS_SINCE,
    "traits": TRAITS_SINCE,
}
LIST_DEFAULT = ("uuid", "name")
SORTABLE = {"id", "uuid", "name", "owner", "public", "created_at", "updated_at"}
_RUNBOOK = "runbooks/{runbook_ident}"


_READ = absent_before(SINCE, "The API version does not allow runbooks")
_WRITE = refused_before(SINCE, "The API version does not allow runbooks")
_TRAITS = absent_before(TRAITS_SINCE, "The API version does not allow runbook traits")


def runbook_view(
    runbook: Runbook, version: Version, base: str, wanted: list[str] | None = None
) -> dict[str, Any]:
    """The JSON object; step arguments under secret keys are masked."""
    names = wanted or [n for n, since in RUNBOOK_FIELDS.items() if since <= version]
    body: dict[str, Any] = {}
    for name in names:
        if name == "links":
            continue
        if name == "steps":
            body[name] = [
                {
                    "interface": s.interface,
                    "step": s.step,
                    "args": mask_document(s.args),
                    "order": s.order,
                }
                for s in runbook.steps
            ]
        elif name == "traits":
            body[name] = runbooks.trait_names(runbook)
        elif name in ("created_at", "updated_at"):
            value = getattr(runbook, name)
            body[name] = value.isoformat() if value else None
        else:
            body[name] = getattr(runbook, name)
    body["links"] = links(base, "runbooks", runbook.uuid)
    return body


@router.get(
    "/runbooks",
    summary="List runbooks",
    dependencies=[_READ, guard("baremetal:runbook:list_all", LIST)],
)
@router.get(
    "/runbooks/",
    include_in_schema=False,
    dependencies=[_READ, guard("baremetal:runbook:list_all", LIST)],
)
def list_runbooks(request: Request) -> JSONResponse:
    """A project's caller sees its project's runbooks and the public ones."""
    svc = services(request)
    query = Query(request, ("fields", "detail", "limit", "marker", "sort_key", "sort_dir"))
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE)
    wanted = fields(query, RUNBOOK_FIELDS)
    detail = listing.detail_or_fields(query, wanted, since=None)
    if wanted is None and not detail:
        wanted = list(LIST_DEFAULT)
    base = base_url(request)
    with svc.db.read() as session:
        stmt = listing.paged(runbooks.listing(project_scope(request)), session, Runbook, pg)
        found = list(session.scalars(stmt))
        items = [runbook_view(r, query.version, base, wanted) for r in found]
    last = found[-1].uuid if found else None
    page_link = listing.next_link(base, "runbooks", query, pg, len(found), last)
    return JSONResponse({"runbooks": items, **page_link})


@router.get(
    f"/{_RUNBOOK}",
    summary="Show a runbook",
    dependencies=[
        _READ,
        guard("baremetal:runbook:get", RUNBOOK_OR_PUBLIC),
    ],
)
def show_runbook(runbook_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ("fields",))
    wanted = fields(query, RUNBOOK_FIELDS)
    with svc.db.read() as session:
        runbook = runbooks.find_runbook(session, runbook_ident)
        return JSONResponse(runbook_view(runbook, query.version, base_url(request), wanted))


@router.post(
    "/runbooks",
    status_code=201,
    summary="Create a runbook",
    dependencies=[_WRITE, guard("baremetal:runbook:create")],
)
def create_runbook(request: Request, body: RunbookCreate) -> JSONResponse:
    """A project's caller creates runbooks for its project only, never public ones."""
    version = request_version(request)
    if body.description is not None and version < TRAITS_SINCE:
        raise bad_request("description is not available before API version 1.112")
    identity = identity_of(request)
    creator = runbooks.Creator(system=identity.system_scoped, project=identity.project_id)
    runbook = runbooks.create_runbook(services(request), runbooks.spec_from(body), version, creator)
    base = base_url(request)
    view = runbook_view(runbook, version, base)
    for shown, given in zip(view["steps"], body.steps, strict=True):
        shown["order"] = given.order  # a digit string is echoed as given, as Ironic does
    return JSONResponse(
        view, status_code=201, headers={"Location": f"{base}/v1/runbooks/{runbook.uuid}"}
    )


@router.patch(
    f"/{_RUNBOOK}",
    summary="Update a runbook with a JSON patch",
    dependencies=[_WRITE, guard("baremetal:runbook:update", access.RUNBOOK_FIELDS)],
)
def patch_runbook(
    runbook_ident: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    """``/owner`` and ``/public`` need their own rules; anything else needs ``update``."""
    version = request_version(request)
    runbook = runbooks.patch_runbook(
        services(request), runbook_ident, version, operations(patch), policy_caller(request)
    )
    return JSONResponse(runbook_view(runbook, version, base_url(request)))


@router.delete(
    f"/{_RUNBOOK}",
    status_code=204,
    summary="Delete a runbook",
    dependencies=[_WRITE, guard("baremetal:runbook:delete", RUNBOOK)],
)
def delete_runbook(runbook_ident: str, request: Request) -> Response:
    runbooks.delete_runbook(services(request), runbook_ident)
    return Response(status_code=204)


# -- traits (>=1.112) -------------------------------------------------------------


@router.get(
    f"/{_RUNBOOK}/traits",
    summary="List a runbook's traits",
    dependencies=[_TRAITS, guard("baremetal:runbook:get", RUNBOOK)],
)
def list_traits(runbook_ident: str, request: Request) -> JSONResponse:
    with services(request).db.read() as session:
        runbook = runbooks.find_runbook(session, runbook_ident)
        return JSONResponse({"traits": runbooks.trait_names(runbook)})


@router.put(
    f"/{_RUNBOOK}/traits",
    status_code=204,
    summary="Replace a runbook's traits",
    dependencies=[_TRAITS, guard("baremetal:runbook:update", RUNBOOK)],
)
def set_traits(runbook_ident: str, request: Request, body: TraitsReplace) -> Response:
    runbooks.set_traits(services(request), runbook_ident, body.traits)
    return Response(status_code=204)


@router.put(
    f"/{_RUNBOOK}/traits/{{trait}}",
    status_code=204,
    summary="Add a trait to a runbook",
    dependencies=[_TRAITS, guard("baremetal:runbook:update", RUNBOOK)],
)
async def add_trait(runbook_ident: str, trait: str, request: Request) -> Response:
    raw = (await request.body()).strip()
    # Clients send nothing, or an empty object (tempest's client does); Ironic takes both.
    if raw and raw not in (b"{}", b"null"):
        raise bad_request("No body should be provided when adding a trait")
    uuid = await run_in_threadpool(runbooks.add_trait, services(request), runbook_ident, trait)
    location = f"{base_url(request)}/v1/runbooks/{uuid}/traits/{trait}"
    return Response(status_code=204, headers={"Location": location})


@router.delete(
    f"/{_RUNBOOK}/traits",
    status_code=204,
    summary="Remove every trait of a runbook",
    dependencies=[_TRAITS, guard("baremetal:runbook:update", RUNBOOK)],
)
def remove_traits(runbook_ident: str, request: Request) -> Response:
    runbooks.remove_traits(services(request), runbook_ident, None)
    return Response(status_code=204)


@router.delete(
    f"/{_RUNBOOK}/traits/{{trait}}",
    status_code=204,
    summary="Remove a trait from a runbook",
    dependencies=[_TRAITS, guard("baremetal:runbook:update", RUNBOOK)],
)
def remove_trait(runbook_ident: str, trait: str, request: Request) -> Response:
    runbooks.remove_traits(services(request), runbook_ident, trait)
    return Response(status_code=204)
