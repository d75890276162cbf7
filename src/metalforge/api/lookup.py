"""Finding resources by UUID or name, and the naming rules Ironic enforces."""

from __future__ import annotations

import re
import uuid as uuidlib

from sqlalchemy import select
from sqlalchemy.orm import Session

from metalforge.api.errors import ApiError, bad_request, not_found
from metalforge.api.versions import Version
from metalforge.db.models import Node

_NAME = re.compile(r"^[A-Za-z0-9\-._~]{1,255}$")
RESERVED_NODE_NAMES = frozenset(
    {"maintenance", "management", "states", "vendor_passthru", "detail", "validate"}
)


def is_uuid(value: str) -> bool:
    try:
        uuidlib.UUID(value)
    except ValueError:
        return False
    return len(value) in (32, 36)


def check_uuid(value: str, what: str = "UUID") -> str:
    if not is_uuid(value):
        raise bad_request(f"Expected a UUID for {what} but received {value}.")
    return str(uuidlib.UUID(value))


def check_name(name: str, *, reserved: frozenset[str] = frozenset()) -> None:
    """Logical names: 1-255 of ``[A-Za-z0-9-._~]``, not UUID-like, not reserved."""
    if not _NAME.match(name) or is_uuid(name):
        raise bad_request(f"Expected a logical name but received {name}.")
    if name in reserved:
        raise bad_request(f"Cannot use reserved name {name}.")


def node_not_found(ident: str) -> ApiError:
    return not_found(f"Node {ident} could not be found.")


def find_node(session: Session, ident: str, version: Version, *, for_update: bool = False) -> Node:
    """The node named by UUID or (from 1.5) name; 404 otherwise."""
    if is_uuid(ident):
        query = select(Node).where(Node.uuid == str(uuidlib.UUID(ident)))
    elif version >= (1, 5):
        query = select(Node).where(Node.name == ident)
    else:
        raise node_not_found(ident)
    node = session.scalar(query)
    if node is None:
        raise node_not_found(ident)
    return node
