"""Version discovery: ``GET /`` and ``GET /v1``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from metalforge.api.auth.access import guard
from metalforge.api.versions import MAX_VERSION, MIN_VERSION, Version, fmt
from metalforge.api.wiring import base_url

router = APIRouter(tags=["discovery"])

INTRODUCED: dict[str, Version] = {
    "lookup": (1, 22),
    "heartbeat": (1, 22),
    "portgroups": (1, 23),
    "volume": (1, 32),
    "conductors": (1, 49),
    "allocations": (1, 52),
    "events": (1, 54),
    "deploy_templates": (1, 55),
    "shards": (1, 82),
    "continue_inspection": (1, 84),
    "runbooks": (1, 92),
    "inspection_rules": (1, 96),
}
"""The microversion from which ``/v1`` offers each collection that came after 1.1, as
Ironic's does; the others are offered from 1.1. A collection is listed here or answers
at 1.1, which a test checks for every collection served."""


def collections(mounted: Iterable[tuple[str, APIRouter]]) -> dict[str, Version]:
    """The collections ``/v1`` offers, each with its first version: every first path
    segment the routers serve under ``/v1`` (given with the prefix each is mounted at), so
    a new resource is announced when it is served."""
    found: dict[str, Version] = {}
    for prefix, each in mounted:
        for route in each.routes:
            path = prefix + route.path if isinstance(route, APIRoute) else ""
            if path.startswith("/v1/"):
                name = path.split("/")[2]
                found[name] = INTRODUCED.get(name, MIN_VERSION)
    return found


def version_object(base: str) -> dict[str, Any]:
    return {
        "id": "v1",
        "links": [{"href": f"{base}/v1/", "rel": "self"}],
        "status": "CURRENT",
        "min_version": fmt(MIN_VERSION),
        "version": fmt(MAX_VERSION),
    }


@router.get("/", summary="Versions of the API")
@router.head("/", include_in_schema=False)
def root(request: Request) -> JSONResponse:
    base = base_url(request)
    version = version_object(base)
    return JSONResponse(
        {
            "name": "metalforge",
            "description": "Bare-metal provisioning with an Ironic-compatible API.",
            "default_version": version,
            "versions": [version],
        }
    )


@router.get("/v1", summary="The v1 API and its collections")
@router.get("/v1/", include_in_schema=False)
@router.head("/v1", include_in_schema=False)
@router.head("/v1/", include_in_schema=False)
def v1(request: Request) -> JSONResponse:
    base = base_url(request)
    version = request.state.version
    body: dict[str, Any] = {
        "id": "v1",
        "links": [
            {"href": f"{base}/v1/", "rel": "self"},
            {
                "href": "https://docs.openstack.org/ironic/latest/contributor/webapi.html",
                "rel": "describedby",
                "type": "text/html",
            },
        ],
        "media_types": {
            "base": "application/json",
            "type": "application/vnd.openstack.ironic.v1+json",
        },
        "version": version_object(base),
    }
    for name, since in request.app.state.collections.items():
        if version >= since:
            body[name] = [
                {"href": f"{base}/v1/{name}/", "rel": "self"},
                {"href": f"{base}/{name}/", "rel": "bookmark"},
            ]
    return JSONResponse(body)


@router.get("/openapi.json", include_in_schema=False, dependencies=[guard("baremetal:node:list")])
def openapi(request: Request) -> JSONResponse:
    """The API's schema, for callers who may read the API's resources (a reader at least):
    it lists every route and field, which is no business of a caller with no role."""
    return JSONResponse(request.app.openapi())
