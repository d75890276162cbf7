"""``/v1/shards`` (>=1.82): how many nodes each shard holds.

Shards split a fleet among API consumers (each Nova compute service
watches one); an operator sets a node's ``shard`` and lists nodes and ports
by it. Nodes without a shard are counted under the name ``"None"``, as
Ironic counts them. The list is never paged: it is as long as the number of
shards, and its counts change as nodes move.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import func, select

from metalforge.api.auth.access import guard
from metalforge.api.params import Query
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import services
from metalforge.db.models import Node
from metalforge.errors import not_found

router = APIRouter(tags=["shards"])

SINCE: Version = (1, 82)


@router.get(
    "/shards",
    summary="List shards and their node counts",
    dependencies=[guard("baremetal:shards:get")],
)
def list_shards(request: Request) -> JSONResponse:
    if request_version(request) < SINCE:
        raise not_found("The API version does not allow shards")
    Query(request, ())
    with services(request).db.read() as session:
        counts = session.execute(select(func.count(Node.id), Node.shard).group_by(Node.shard)).all()
    ordered = sorted(counts, key=lambda row: row[0], reverse=True)
    return JSONResponse({"shards": [{"name": str(shard), "count": n} for n, shard in ordered]})
