"""``/v1/nodes/{id}/traits`` (API 1.37)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from metalforge.api.auth.access import guard
from metalforge.api.locking import wait_for_lock
from metalforge.api.routes.node_states import locked
from metalforge.api.schemas import TraitsReplace
from metalforge.api.services import services
from metalforge.api.validation import check_trait
from metalforge.api.versions import Version, request_version
from metalforge.conductor import history
from metalforge.db.models import Node, NodeTrait, utcnow
from metalforge.errors import bad_request, not_found
from metalforge.services import lookup

router = APIRouter(tags=["node traits"])

MIN_VERSION: Version = (1, 37)
MAX_TRAITS = 50


def _node(session: Session, request: Request, ident: str, *, writing: bool) -> Node:
    version = request_version(request)
    if version < MIN_VERSION:
        raise not_found("The resource could not be found.")
    node = lookup.find_node(session, ident, version)
    if writing and node.reservation is not None:
        raise locked(node)
    return node


def _touch(session: Session, node: Node, text: str) -> None:
    session.execute(
        update(Node)
        .where(Node.id == node.id)
        .values(updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    history.record(
        session,
        node.id,
        "traits",
        text,
        state=node.provision_state,
        target=node.target_provision_state,
    )


@router.get(
    "/nodes/{node_ident}/traits",
    summary="List a node's traits",
    dependencies=[guard("baremetal:node:traits:list", "node")],
)
def list_traits(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    with svc.db.read() as session:
        node = _node(session, request, node_ident, writing=False)
        return JSONResponse({"traits": sorted(t.trait for t in node.traits)})


@router.put(
    "/nodes/{node_ident}/traits",
    status_code=204,
    summary="Replace a node's traits",
    dependencies=[guard("baremetal:node:traits:set", "node")],
)
@wait_for_lock
def replace_traits(node_ident: str, request: Request, body: TraitsReplace) -> Response:
    svc = services(request)
    wanted = sorted({check_trait(t) for t in body.traits})
    with svc.db.write() as session:
        node = _node(session, request, node_ident, writing=True)
        session.execute(delete(NodeTrait).where(NodeTrait.node_id == node.id))
        session.add_all(NodeTrait(node_id=node.id, trait=t) for t in wanted)
        _touch(session, node, f"traits set to {', '.join(wanted) or 'none'}")
    return Response(status_code=204)


@router.put(
    "/nodes/{node_ident}/traits/{trait}",
    status_code=204,
    summary="Add one trait",
    dependencies=[guard("baremetal:node:traits:set", "node")],
)
async def add_trait(node_ident: str, trait: str, request: Request) -> Response:
    if (await request.body()).strip():
        raise bad_request("No body is accepted when adding a single trait")
    return await run_in_threadpool(_add_trait, node_ident, trait, request=request)


@wait_for_lock
def _add_trait(node_ident: str, trait: str, request: Request) -> Response:
    svc = services(request)
    check_trait(trait)
    with svc.db.write() as session:
        node = _node(session, request, node_ident, writing=True)
        existing = set(session.scalars(select(NodeTrait.trait).where(NodeTrait.node_id == node.id)))
        if trait not in existing:
            if len(existing) >= MAX_TRAITS:
                raise bad_request(
                    f"Could not add trait {trait} to node {node.uuid}: a node "
                    f"may have at most {MAX_TRAITS} traits"
                )
            session.add(NodeTrait(node_id=node.id, trait=trait))
            _touch(session, node, f"trait {trait} added")
    return Response(status_code=204)


@router.delete(
    "/nodes/{node_ident}/traits",
    status_code=204,
    summary="Remove every trait",
    dependencies=[guard("baremetal:node:traits:delete", "node")],
)
@wait_for_lock
def remove_traits(node_ident: str, request: Request) -> Response:
    svc = services(request)
    with svc.db.write() as session:
        node = _node(session, request, node_ident, writing=True)
        session.execute(delete(NodeTrait).where(NodeTrait.node_id == node.id))
        _touch(session, node, "all traits removed")
    return Response(status_code=204)


@router.delete(
    "/nodes/{node_ident}/traits/{trait}",
    status_code=204,
    summary="Remove a trait",
    dependencies=[guard("baremetal:node:traits:delete", "node")],
)
@wait_for_lock
def remove_trait(node_ident: str, trait: str, request: Request) -> Response:
    svc = services(request)
    with svc.db.write() as session:
        node = _node(session, request, node_ident, writing=True)
        result = session.execute(
            delete(NodeTrait).where(NodeTrait.node_id == node.id, NodeTrait.trait == trait)
        )
        if result.rowcount == 0:  # type: ignore[attr-defined]
            raise not_found(f"Node {node.uuid} doesn't have a trait '{trait}'")
        _touch(session, node, f"trait {trait} removed")
    return Response(status_code=204)
