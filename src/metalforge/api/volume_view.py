"""How volume connectors and targets are shown and listed (``/v1/volume/...``, >= 1.32).

Shared by the two collections and by their lists under a node
(``/v1/nodes/{node}/volume/...``). A target's ``properties`` may hold the
connection details of a storage network (iSCSI CHAP secrets among them):
as Ironic, they are replaced by a notice for a caller without
``baremetal:volume:view_target_properties``, and secret-looking keys are
masked for everyone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Request
from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from metalforge.api import listing
from metalforge.api.auth.access import allows, project_scope, visible_node
from metalforge.api.links import links
from metalforge.api.params import Page, Query, fields, page
from metalforge.api.versions import Version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import Node, VolumeConnector, VolumeTarget
from metalforge.errors import bad_request
from metalforge.redaction import mask_secrets
from metalforge.services import lookup, volume
from metalforge.services.volume import Record

SINCE: Version = (1, 32)

REDACTED = {
    "redacted_contents": "** Value redacted: Requires permission "
    "baremetal:volume:view_target_properties access. Permission denied. **"
}
"""What a caller without ``view_target_properties`` sees of a target's properties (Ironic's)."""


@dataclass(frozen=True)
class Collection:
    """One of the two collections: its name, fields, default list view and sort keys."""

    kind: volume.Kind
    name: str
    fields: dict[str, Version]
    default: tuple[str, ...]
    sortable: frozenset[str]


CONNECTORS = Collection(
    volume.CONNECTORS,
    "connectors",
    dict.fromkeys(
        ("uuid", "node_uuid", "type", "connector_id", "extra", "created_at", "updated_at", "links"),
        SINCE,
    ),
    ("uuid", "node_uuid", "type", "connector_id"),
    frozenset({"id", "uuid", "node_id", "type", "connector_id", "created_at", "updated_at"}),
)
TARGETS = Collection(
    volume.TARGETS,
    "targets",
    dict.fromkeys(
        (
            "uuid",
            "node_uuid",
            "volume_type",
            "boot_index",
            "volume_id",
            "properties",
            "extra",
            "created_at",
            "updated_at",
            "links",
        ),
        SINCE,
    ),
    ("uuid", "node_uuid", "volume_type", "boot_index", "volume_id"),
    frozenset(
        {"id", "uuid", "node_id", "volume_type", "boot_index", "volume_id"}
        | {"created_at", "updated_at"}
    ),
)


def collection_of(record: Record) -> Collection:
    return CONNECTORS if isinstance(record, VolumeConnector) else TARGETS


def shows_properties(request: Request) -> bool:
    """Whether the caller sees targets' properties (else the notice); Ironic asks it of no node."""
    return allows(request, "baremetal:volume:view_target_properties")


def record_view(
    record: Record, base: str, wanted: list[str] | None = None, *, properties: bool = True
) -> dict[str, Any]:
    """Ironic's record: the ``wanted`` fields (all by default) and always ``links``."""
    coll = collection_of(record)
    names = wanted if wanted is not None else [n for n in coll.fields if n != "links"]
    body: dict[str, Any] = {}
    for name in names:
        if name == "links":
            continue
        if name == "node_uuid":
            body[name] = record.node.uuid
        elif name in ("created_at", "updated_at"):
            value = getattr(record, name)
            body[name] = value.isoformat() if value else None
        elif name == "properties" and isinstance(record, VolumeTarget):
            body[name] = mask_secrets(record.properties) if properties else dict(REDACTED)
        else:
            body[name] = getattr(record, name)
    body["links"] = links(base, f"volume/{coll.name}", record.uuid)
    return body


def volume_links(base: str, node_ident: str | None = None) -> dict[str, Any]:
    """``GET /v1/volume`` or ``/v1/nodes/{node}/volume``: links to the root and its collections."""
    where = f"nodes/{node_ident}/volume" if node_ident is not None else "volume"
    return {
        "links": [
            {"href": f"{base}/v1/{where}/", "rel": "self"},
            {"href": f"{base}/{where}/", "rel": "bookmark"},
        ],
        **{
            name: [
                {"href": f"{base}/v1/{where}/{name}", "rel": "self"},
                {"href": f"{base}/{where}/{name}", "rel": "bookmark"},
            ]
            for name in ("connectors", "targets")
        },
    }


def list_records(
    request: Request, coll: Collection, *, detail_path: bool = False, node_ident: str | None = None
) -> dict[str, Any]:
    """A page of the collection, of one node when the path names one (its guard checked it)."""
    svc = services(request)
    allowed = ["node", "limit", "marker", "sort_key", "sort_dir"]
    if not detail_path:
        allowed += ["fields", "detail"]
    query = Query(request, allowed)
    pg = page(query, svc.settings.api.max_limit, sortable=coll.sortable)
    if pg.marker is not None and not lookup.is_uuid(pg.marker):
        raise bad_request(f"Expected UUID for marker: {pg.marker}")
    wanted = fields(query, coll.fields) if not detail_path else None
    detail = listing.detail_or_fields(query, wanted, detail_path=detail_path, since=None)
    if wanted is None and not detail:
        wanted = list(coll.default)
    base = base_url(request)
    properties = shows_properties(request)
    with svc.db.read() as session:
        stmt = _query(request, session, coll, query, pg, node_ident)
        found: list[Record] = list(session.scalars(stmt))
        items = [record_view(r, base, wanted, properties=properties) for r in found]
    path = f"volume/{coll.name}"
    if node_ident is not None:
        path = f"nodes/{node_ident}/{path}"
    elif detail_path:
        path += "/detail"
    last = found[-1].uuid if found else None
    return {coll.name: items, **listing.next_link(base, path, query, pg, len(found), last)}


def _query(
    request: Request,
    session: Session,
    coll: Collection,
    query: Query,
    pg: Page,
    node_ident: str | None,
) -> Select[Any]:
    """The page's query: the node, the caller's project, the marker."""
    model = coll.kind.model
    project = project_scope(request)
    stmt = select(model)
    ident = node_ident if node_ident is not None else query.get("node")
    if ident is not None:
        # A node the caller may not see is answered as a missing one.
        node = visible_node(request, session, ident, query.version)
        if node is None:
            raise lookup.node_not_found(ident)
        stmt = stmt.where(model.node_id == node.id)
    scope = _project_scope(model, project)
    if scope is not None:
        stmt = scope(stmt)
    return listing.paged(stmt, session, model, pg, scope)


def _project_scope(
    model: type[VolumeConnector] | type[VolumeTarget], project: str | None
) -> listing.Scope | None:
    """A project sees the records of the nodes it owns or leases (a hidden marker is missing)."""
    if project is None:
        return None
    return lambda q: q.join(Node, Node.id == model.node_id).where(lookup.held_by(project))
