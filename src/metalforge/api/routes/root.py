"""Version discovery: ``GET /`` and ``GET /v1``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import guard
from metalforge.api.versions import MAX_VERSION, MIN_VERSION, Version, fmt
from metalforge.api.wiring import base_url

router = APIRouter(tags=["discovery"])

COLLECTIONS: dict[str, Version] = {
    "chassis": (1, 1),
    "nodes": (1, 1),
    "ports": (1, 1),
    "drivers": (1, 1),
    "portgroups": (1, 24),
    "volume": (1, 32),
    "conductors": (1, 49),
    "allocations": (1, 52),
    "deploy_templates": (1, 55),
    "shards": (1, 82),
    "runbooks": (1, 92),
    "inspection_rules": (1, 96),
}
"""Collections this service serves, and the version that introduced each."""


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
    for name, since in COLLECTIONS.items():
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
