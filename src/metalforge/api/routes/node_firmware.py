"""``/v1/nodes/{id}/firmware`` (API 1.86): the versions a node's firmware components run.

Per component: the version first seen, the one it runs, and the last one
metalforge flashed (``firmware.update``); ``vendor``, ``model`` and
``serial_number`` from 1.114.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import NODE, guard
from metalforge.api.gates import absent_before
from metalforge.api.params import Query, fields
from metalforge.api.versions import Version
from metalforge.api.wiring import services
from metalforge.db.firmware_components import Stored
from metalforge.errors import bad_request
from metalforge.services import bios

router = APIRouter(tags=["node firmware"])

SINCE: Version = (1, 86)
IDENTITY_SINCE: Version = (1, 114)
VERSION_FIELDS = ("component", "initial_version", "current_version", "last_version_flashed")
IDENTITY_FIELDS = ("vendor", "model", "serial_number")
FIRMWARE_FIELDS: dict[str, Version] = {
    **dict.fromkeys(("created_at", "updated_at", *VERSION_FIELDS), SINCE),
    **dict.fromkeys(IDENTITY_FIELDS, IDENTITY_SINCE),
}


def component_view(stored: Stored, names: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``created_at`` and ``updated_at`` always, as Ironic shows them."""
    body: dict[str, Any] = {
        "created_at": stored.created_at.isoformat(),
        "updated_at": stored.updated_at.isoformat() if stored.updated_at else None,
    }
    for name in names:
        if name not in ("created_at", "updated_at"):
            body[name] = getattr(stored, name)
    return body


@router.get(
    "/nodes/{node_ident}/firmware",
    summary="List a node's firmware components",
    dependencies=[
        absent_before(SINCE, "The API version does not allow node firmware"),
        guard("baremetal:node:firmware:get", NODE),
    ],
)
def list_firmware(node_ident: str, request: Request) -> JSONResponse:
    query = Query(request, ("fields", "detail"))
    wanted = fields(query, FIRMWARE_FIELDS)
    detail = query.bool("detail")
    if wanted is not None and detail:
        raise bad_request("Can not specify ?detail=True and fields in the same request.")
    default = VERSION_FIELDS + (IDENTITY_FIELDS if query.version >= IDENTITY_SINCE else ())
    names = wanted or default
    found = bios.firmware_of(services(request), node_ident, query.version)
    return JSONResponse({"firmware": [component_view(c, names) for c in found]})
