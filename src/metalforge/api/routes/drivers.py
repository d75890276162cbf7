"""``/v1/drivers``: the hardware types live conductors can drive."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import guard
from metalforge.api.links import links, sub_links
from metalforge.api.params import Query
from metalforge.api.versions import Version
from metalforge.api.wiring import ApiServices, base_url, services
from metalforge.db.models import INTERFACES
from metalforge.drivers.hardware import HardwareType
from metalforge.errors import bad_request, not_found
from metalforge.services import raid

router = APIRouter(tags=["drivers"])

INTERFACE_VERSIONS: dict[str, Version] = {
    "firmware": (1, 86),
    "rescue": (1, 38),
    "storage": (1, 33),
}


def _hosts(svc: ApiServices, name: str) -> list[str]:
    return sorted(host for host, _group, drivers in svc.directory.live() if name in drivers)


def driver_view(
    svc: ApiServices, hw: HardwareType, version: Version, base: str, detail: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": hw.name, "hosts": _hosts(svc, hw.name)}
    if version >= (1, 30):
        body["type"] = "dynamic"
    if detail and version >= (1, 30):
        for family in sorted(INTERFACES):
            since = INTERFACE_VERSIONS.get(family)
            if since is not None and version < since:
                continue
            body[f"default_{family}_interface"] = hw.default(family).name
            body[f"enabled_{family}_interfaces"] = hw.names(family)
    body["links"] = links(base, "drivers", hw.name)
    if version >= (1, 14):
        body["properties"] = sub_links(base, "drivers", hw.name, "properties")
    return body


@router.get("/drivers", summary="List drivers", dependencies=[guard("baremetal:driver:get")])
@router.get("/drivers/", include_in_schema=False, dependencies=[guard("baremetal:driver:get")])
def list_drivers(request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["type", "detail", "fields"])
    kind = query.get("type")
    if kind is not None and kind not in ("classic", "dynamic"):
        raise bad_request(f"Invalid driver type {kind!r}; valid types are classic and dynamic")
    detail = bool(query.bool("detail", (1, 30)))
    base = base_url(request)
    live = {name for _h, _g, drivers in svc.directory.live() for name in drivers}
    items = (
        []
        if kind == "classic"
        else [
            driver_view(svc, hw, query.version, base, detail)
            for name, hw in sorted(svc.drivers.types.items())
            if name in live
        ]
    )
    return JSONResponse({"drivers": items})


@router.get(
    "/drivers/{name}", summary="Show a driver", dependencies=[guard("baremetal:driver:get")]
)
def show_driver(name: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["fields"])
    hw = svc.drivers.types.get(name)
    if hw is None:
        raise not_found(f"Could not find the following driver(s) or hardware type(s): {name}.")
    return JSONResponse(driver_view(svc, hw, query.version, base_url(request), True))


@router.get(
    "/drivers/{name}/properties",
    summary="driver_info keys the driver reads",
    dependencies=[guard("baremetal:driver:get_properties")],
)
def driver_properties(name: str, request: Request) -> JSONResponse:
    svc = services(request)
    Query(request, [])
    hw = svc.drivers.types.get(name)
    if hw is None:
        raise not_found(f"Could not find the following driver(s) or hardware type(s): {name}.")
    props: dict[str, str] = {}
    for family in INTERFACES:
        for impl in hw.supported[family]:
            props.update(impl().properties())
    return JSONResponse(props)


@router.get(
    "/drivers/{name}/raid/logical_disk_properties",
    summary="What a logical disk of a target RAID configuration may hold (1.12)",
    dependencies=[guard("baremetal:driver:get_raid_logical_disk_properties")],
)
def logical_disk_properties(name: str, request: Request) -> JSONResponse:
    query = Query(request, [])
    return JSONResponse(raid.logical_disk_properties(services(request), name, query.version))
