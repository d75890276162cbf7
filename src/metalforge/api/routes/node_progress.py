"""``/v1/nodes/{id}/progress``: how far the node's flow has got and the time it has left.

A metalforge addition (Ironic shows only the plan and the index, in
``driver_internal_info``): the steps with their status, the running step's
elapsed time, and estimates from the same steps' recent runs on the same
hardware type. Readable by whoever may read the node.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from metalforge.api.auth.access import NODE, guard
from metalforge.api.versions import request_version
from metalforge.api.wiring import read_only, services
from metalforge.services.progress import node_progress

router = APIRouter(tags=["nodes"])


@router.get(
    "/nodes/{node_ident}/progress",
    summary="Show how far the node's flow has got, with estimates of time left",
    dependencies=[guard("baremetal:node:get", NODE)],
)
async def show_progress(node_ident: str, request: Request) -> dict[str, Any]:
    svc = services(request)
    progress = await read_only(svc, node_progress, svc, node_ident, request_version(request))
    return progress.to_json()
