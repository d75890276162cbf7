"""Finding resources by UUID or name, and the naming rules Ironic enforces."""

from __future__ import annotations

import functools
import re
import uuid as uuidlib
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import ColumnElement, Connection, Row, Select, bindparam, or_, select
from sqlalchemy.orm import Session

from metalforge.db import flow_progress
from metalforge.db.batches import in_batches
from metalforge.db.models import Allocation, Node, NodeTrait, Port, Portgroup, node_from_row
from metalforge.errors import RequestError, bad_request, not_found
from metalforge.services.microversion import Version

_NAME = re.compile(r"^[A-Za-z0-9\-._~]{1,255}$")
RESERVED_NODE_NAMES = frozenset(
    {"maintenance", "management", "states", "vendor_passthru", "detail", "validate"}
)


def node_for_update(session: Session, node_id: int) -> Node:
    """Node ``node_id`` re-read under its row lock, so writes to one node's ports, groups
    and volume records take turns (PostgreSQL) instead of failing each other's epoch."""
    return session.scalars(
        select(Node)
        .where(Node.id == node_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()


def is_uuid(value: str) -> bool:
    try:
        uuidlib.UUID(value)
    except ValueError:
        return False
    return len(value) in (32, 36)


def check_uuid(value: str, what: str = "uuid") -> str:
    """``value`` as a canonical UUID; 400 in Ironic's words for the field ``what``."""
    if not is_uuid(value):
        raise bad_request(f"Expected UUID for {what}: {value}")
    return str(uuidlib.UUID(value))


def check_name(
    name: str, *, reserved: frozenset[str] = frozenset(), refusal: str | None = None
) -> None:
    """Logical names: 1-255 of ``[A-Za-z0-9-._~]``, not UUID-like, not reserved.
    ``refusal``: Ironic's text for the resource, with ``{name}`` where the name goes."""
    if not _NAME.match(name) or is_uuid(name):
        text = refusal or "Expected a logical name but received {name}."
        raise bad_request(text.format(name=name))
    if name in reserved:
        raise bad_request(f"Cannot use reserved name {name}.")


def node_not_found(ident: str) -> RequestError:
    return not_found(f"Node {ident} could not be found.")


def held_by(project: str) -> ColumnElement[bool]:
    """Nodes ``project`` owns or leases: what a project sees (Ironic's ``project`` filter)."""
    return or_(Node.owner == project, Node.lessee == project)


def port_not_found(ident: str) -> RequestError:
    return not_found(f"Port {ident} could not be found.")


def port_where(ident: str, version: Version) -> ColumnElement[bool]:
    """The port named by UUID or (from 1.88) a logical name; 400 for anything else
    (a MAC address, a malformed UUID), as Ironic answers."""
    if is_uuid(ident):
        return Port.uuid == str(uuidlib.UUID(ident))
    if version >= (1, 88) and _NAME.match(ident):
        return Port.name == ident
    raise bad_request(f"Expected a logical name or UUID but received {ident}.")


def portgroup_not_found(ident: str) -> RequestError:
    return not_found(f"Portgroup {ident} could not be found.")


def portgroup_where(ident: str) -> ColumnElement[bool]:
    """The port group named by UUID or by name."""
    if is_uuid(ident):
        return Portgroup.uuid == str(uuidlib.UUID(ident))
    return Portgroup.name == ident


def not_found_path() -> RequestError:
    """A path this microversion does not serve: 404, as for any unknown path."""
    return not_found("The resource could not be found.")


def allocation_not_found(ident: str) -> RequestError:
    return not_found(f"Allocation {ident} could not be found.")


def allocation_where(ident: str) -> ColumnElement[bool]:
    """The allocation named by UUID or by name."""
    if is_uuid(ident):
        return Allocation.uuid == str(uuidlib.UUID(ident))
    return Allocation.name == ident


JSON_SUFFIX_DROPPED: ContextVar[bool] = ContextVar("json_suffix_dropped", default=False)
"""Whether this request's path lost a ``.json`` suffix (microversion 1.90 or older; the
API's version middleware sets it)."""

P = ParamSpec("P")
T = TypeVar("T")


def json_suffix_fallback(
    find: Callable[Concatenate[Any, str, P], T],
) -> Callable[Concatenate[Any, str, P], T]:
    """``find`` by ``ident``, then, when that is a 404 and the path lost a ``.json``
    suffix, by ``ident`` with the suffix: the resource may be named ``x.json``. Ironic
    looks the same way up to 1.90."""

    @functools.wraps(find)
    def finding(db: Any, ident: str, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return find(db, ident, *args, **kwargs)
        except RequestError as exc:
            if exc.status != 404 or not JSON_SUFFIX_DROPPED.get():
                raise
        return find(db, f"{ident}.json", *args, **kwargs)

    return finding


@json_suffix_fallback
def find_node(session: Session, ident: str, version: Version, *, for_update: bool = False) -> Node:
    """The node named by UUID or (from 1.5) name; 404 otherwise.

    ``for_update``: under a row lock (PostgreSQL; SQLite's writers take turns
    anyway), for a read-modify-write: two PATCHes of one node then apply one
    after the other, each to what the other wrote.
    """
    if is_uuid(ident):
        query = select(Node).where(Node.uuid == str(uuidlib.UUID(ident)))
    elif version >= (1, 5):
        query = select(Node).where(Node.name == ident)
    else:
        raise node_not_found(ident)
    if for_update:
        query = query.with_for_update()
    node = session.scalar(query)
    if node is None:
        raise node_not_found(ident)
    return node


def find_node_or_none(
    session: Session, ident: str, version: Version, *, for_update: bool = False
) -> Node | None:
    """``find_node``, with ``None`` for a node that does not exist (a node named in a
    body or a filter). Only the 404 is none: any other refusal keeps its own answer."""
    try:
        return find_node(session, ident, version, for_update=for_update)
    except RequestError as exc:
        if exc.status == 404:
            return None
        raise


@functools.lru_cache(maxsize=256)
def _row_query(columns: tuple[str, ...], by_name: bool) -> Select[Any]:
    table = Node.__table__
    key = table.c.name if by_name else table.c.uuid
    return select(*(table.c[name] for name in columns)).where(key == bindparam("b_ident"))


@json_suffix_fallback
def find_node_row(
    db: Session | Connection, ident: str, version: Version, columns: Sequence[str]
) -> Row[Any]:
    """Only ``columns`` of the node named by UUID or (from 1.5) name; 404 otherwise.

    A statement built once per column set, and no ORM object: a client polling
    a node's state reads three columns, not seventy.
    """
    if is_uuid(ident):
        query, value = _row_query(tuple(columns), False), str(uuidlib.UUID(ident))
    elif version >= (1, 5):
        query, value = _row_query(tuple(columns), True), ident
    else:
        raise node_not_found(ident)
    connection = db.connection() if isinstance(db, Session) else db
    row = connection.execute(query, {"b_ident": value}).first()
    if row is None:
        raise node_not_found(ident)
    return row


NODE_COLUMNS = tuple(c.key for c in Node.__table__.columns)


def load_node(session: Session, ident: str, version: Version) -> Node:
    """``find_node`` read with one Core statement into a transient ``Node``.

    For routes that read the node and write with Core statements (a provision
    request): the ORM's identity map and attribute loading cost more than the
    transaction's writes, and on SQLite the transaction holds the write lock.
    The object is not in the session: changing it writes nothing.
    """
    return node_from_row(dict(find_node_row(session, ident, version, NODE_COLUMNS)._mapping))


def step_keys(connection: Connection, node_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Ironic's step keys (``clean_steps``, ``clean_step_index``...) of nodes with a plan.

    Node views add them to ``driver_internal_info``, where Ironic clients
    read them; metalforge keeps them in the node's flow progress.
    """
    found = flow_progress.load_many(connection, node_ids)
    return {node_id: keys for node_id, p in found.items() if (keys := p.ironic_keys())}


_NODE_TRAITS = (
    select(NodeTrait.__table__.c.trait)
    .where(NodeTrait.__table__.c.node_id == bindparam("b_node"))
    .order_by(NodeTrait.__table__.c.trait)
)


def node_traits(connection: Connection, node_id: int) -> list[str]:
    """One node's traits, sorted (a prebuilt statement: showing a node is a hot path)."""
    return list(connection.scalars(_NODE_TRAITS, {"b_node": node_id}))


def traits_of(connection: Connection, node_ids: Sequence[int]) -> dict[int, list[str]]:
    """The traits of ``node_ids``, sorted, read in a few queries for a whole page."""
    found: dict[int, list[str]] = {node_id: [] for node_id in node_ids}
    for batch in in_batches(node_ids):
        rows = connection.execute(
            select(NodeTrait.node_id, NodeTrait.trait)
            .where(NodeTrait.node_id.in_(batch))
            .order_by(NodeTrait.node_id, NodeTrait.trait)
        )
        for node_id, trait in rows:
            found[node_id].append(trait)
    return found


def port_owners(session: Session, macs: Sequence[str]) -> set[int]:
    """The ids of the nodes whose ports have these MACs (several: the MACs do not tell
    one machine; none: no node has them)."""
    if not macs:
        return set()
    return set(session.scalars(select(Port.node_id).where(Port.address.in_(macs))))


def node_by_macs(session: Session, macs: Sequence[str]) -> Node | None:
    """The one node whose ports have these MACs; ``None`` when no node has them or they
    belong to several (then they do not tell which machine is asking)."""
    node_ids = port_owners(session, macs)
    if len(node_ids) != 1:
        return None
    table = Node.__table__
    row = session.execute(select(table).where(table.c.id == node_ids.pop())).one_or_none()
    return None if row is None else node_from_row(dict(row._mapping))
