"""Vendor passthru: ``/v1/{nodes,drivers}/{ident}/vendor_passthru``.

``GET .../methods`` lists what the vendor interface declares; any of the five
verbs on ``...?method=NAME`` calls it with the body as its arguments. An
asynchronous method answers 202 with no body, a synchronous one 200 with its
return value (raw bytes when the method is declared ``attach``). What the
call does, and why async methods go through the queue, is in
``services.vendor``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import NODE, actor, guard
from metalforge.api.locking import await_lock
from metalforge.api.outbound import calls_bmc
from metalforge.api.params import Query
from metalforge.api.schemas import PassthruArgs
from metalforge.api.versions import request_version
from metalforge.api.wiring import services
from metalforge.drivers.vendor import HTTP_METHODS
from metalforge.services import vendor
from metalforge.services.vendor import PassthruAnswer

router = APIRouter(tags=["vendor passthru"])


def _answer(answer: PassthruAnswer) -> Response:
    if answer.asynchronous:
        return Response(status_code=202)
    if answer.attach and isinstance(answer.value, str | bytes):
        raw = answer.value.encode() if isinstance(answer.value, str) else answer.value
        return Response(raw, media_type="application/octet-stream")
    return JSONResponse(answer.value)


def _call(request: Request, body: PassthruArgs | None) -> tuple[str, dict[str, Any]]:
    args = body.root if body is not None else {}
    return vendor.check_call(Query(request, ["method"]).get("method"), args), args


@router.get(
    "/nodes/{node_ident}/vendor_passthru/methods",
    summary="List a node's vendor methods",
    dependencies=[guard("baremetal:node:vendor_passthru", NODE)],
)
def node_methods(node_ident: str, request: Request) -> JSONResponse:
    Query(request, [])
    found = vendor.node_methods(services(request), node_ident, request_version(request))
    return JSONResponse(found)


@await_lock
@calls_bmc
def call_node_method(
    node_ident: str, request: Request, body: PassthruArgs | None = None
) -> Response:
    method, args = _call(request, body)
    svc, version = services(request), request_version(request)
    answer = vendor.call_node(
        svc, node_ident, version, method, request.method, args, actor(request)
    )
    return _answer(answer)


@router.get(
    "/drivers/{name}/vendor_passthru/methods",
    summary="List a driver's vendor methods",
    dependencies=[guard("baremetal:driver:vendor_passthru")],
)
def driver_methods(name: str, request: Request) -> JSONResponse:
    Query(request, [])
    return JSONResponse(vendor.driver_methods(services(request), name))


def call_driver_method(name: str, request: Request, body: PassthruArgs | None = None) -> Response:
    method, args = _call(request, body)
    return _answer(vendor.call_driver(services(request), name, method, request.method, args))


# One route per verb, so that each is one operation of the OpenAPI document.
for _verb in HTTP_METHODS:
    router.add_api_route(
        "/nodes/{node_ident}/vendor_passthru",
        call_node_method,
        methods=[_verb],
        name=f"call_node_method_{_verb.lower()}",
        summary="Call a node's vendor method",
        dependencies=[guard("baremetal:node:vendor_passthru", NODE)],
    )
    router.add_api_route(
        "/drivers/{name}/vendor_passthru",
        call_driver_method,
        methods=[_verb],
        name=f"call_driver_method_{_verb.lower()}",
        summary="Call a driver's vendor method",
        dependencies=[guard("baremetal:driver:vendor_passthru")],
    )
