"""``/v1/nodes/{id}/bios`` (API 1.40): a node's BIOS settings as its BMC last reported them.

The BIOS interface stores them when the node is verified and after each
BIOS step; the registry's rules for each setting (type, allowed values,
bounds, read-only) are shown from 1.74, as ``detail`` and ``fields`` are.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import NODE, guard
from metalforge.api.gates import absent_before
from metalforge.api.links import links
from metalforge.api.params import Query, fields
from metalforge.api.versions import Version
from metalforge.api.wiring import base_url, services
from metalforge.db.bios_settings import Stored
from metalforge.errors import bad_request
from metalforge.services import bios

router = APIRouter(tags=["node bios"])

SINCE: Version = (1, 40)
REGISTRY_SINCE: Version = (1, 74)
"""The registry's fields, ``detail`` and ``fields``."""
VALUE_FIELDS = ("name", "value")
REGISTRY_FIELDS = (
    "attribute_type",
    "allowable_values",
    "lower_bound",
    "max_length",
    "min_length",
    "read_only",
    "reset_required",
    "unique",
    "upper_bound",
)
BIOS_FIELDS: dict[str, Version] = {
    **dict.fromkeys(("created_at", "updated_at", "links", *VALUE_FIELDS), SINCE),
    **dict.fromkeys(REGISTRY_FIELDS, REGISTRY_SINCE),
}
_GATE = absent_before(SINCE, "The API version does not allow BIOS settings")
_GUARD = guard("baremetal:node:bios:get", NODE)


def setting_view(
    stored: Stored, base: str, node_ident: str, names: tuple[str, ...] | list[str]
) -> dict[str, Any]:
    """``created_at``, ``updated_at`` and ``links`` always, as Ironic shows them."""
    setting = stored.setting
    body: dict[str, Any] = {
        "created_at": stored.created_at.isoformat(),
        "updated_at": stored.updated_at.isoformat() if stored.updated_at else None,
    }
    for name in names:
        if name in ("created_at", "updated_at", "links"):
            continue
        value = getattr(setting, name)
        body[name] = list(value) if isinstance(value, tuple) else value
    body["links"] = links(base, f"nodes/{node_ident}/bios", setting.name)
    return body


@router.get(
    "/nodes/{node_ident}/bios",
    summary="List a node's BIOS settings",
    dependencies=[_GATE, _GUARD],
)
def list_bios(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ("fields", "detail"))
    query.get("fields", REGISTRY_SINCE)  # 406 below 1.74
    wanted = fields(query, BIOS_FIELDS)
    detail = query.bool("detail", REGISTRY_SINCE)
    if wanted is not None and detail:
        raise bad_request("Can not specify ?detail=True and fields in the same request.")
    names: list[str] | tuple[str, ...] = wanted or VALUE_FIELDS
    if detail:
        names = (*VALUE_FIELDS, *REGISTRY_FIELDS)
    base = base_url(request)
    found = bios.settings_of(svc, node_ident, query.version)
    return JSONResponse({"bios": [setting_view(s, base, node_ident, names) for s in found]})


@router.get(
    "/nodes/{node_ident}/bios/{setting_name}",
    summary="Show one BIOS setting",
    dependencies=[_GATE, _GUARD],
)
def show_bios(node_ident: str, setting_name: str, request: Request) -> JSONResponse:
    query = Query(request, ())
    node_uuid, stored = bios.setting_of(services(request), node_ident, query.version, setting_name)
    with_registry = query.version >= REGISTRY_SINCE
    names = (*VALUE_FIELDS, *REGISTRY_FIELDS) if with_registry else VALUE_FIELDS
    view = setting_view(stored, base_url(request), node_uuid, names)
    return JSONResponse({setting_name: view})
