"""What service functions need, built once by the entry point."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.orm import Session

from metalforge.conductor.work import NodeWork, P
from metalforge.config import Settings
from metalforge.coordination.hashring import ConductorDirectory
from metalforge.coordination.hashring import HashRing as HashRing
from metalforge.db import queue
from metalforge.db.engine import Database
from metalforge.drivers.hardware import DriverRegistry


class QueuedNode(Protocol):
    """What queueing work for a node reads of it: a Node, or a row of these columns."""

    @property
    def id(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def driver(self) -> str: ...
    @property
    def conductor_group(self) -> str: ...


@dataclass
class Services:
    settings: Settings
    db: Database
    drivers: DriverRegistry
    directory: ConductorDirectory
    notify: Callable[[], None] = field(default=lambda: None)
    """Wakes the conductors after work was queued (in-process or NOTIFY)."""

    def preferred_conductor(self, node_uuid: str, driver: str, group: str) -> str | None:
        return self.directory.owner(node_uuid, driver, group)

    def conductor_lookup(self) -> Callable[[QueuedNode], str | None]:
        """The conductor of each node one request shows (its ``conductor`` field).

        Each (driver, group) ring is looked up once per request, not per node
        of a page.
        """
        rings: dict[tuple[str, str], HashRing] = {}

        def owner(node: QueuedNode) -> str | None:
            key = (node.driver, node.conductor_group)
            ring = rings.get(key)
            if ring is None:
                ring = rings[key] = self.directory.ring(*key)
            return ring.owner(node.uuid)

        return owner

    def queue_for(self, session: Session, node: QueuedNode, work: NodeWork[P], payload: P) -> None:
        """Queue ``work`` for ``node`` in the caller's transaction, for its ring owner."""
        owner = self.preferred_conductor(node.uuid, node.driver, node.conductor_group)
        if work.kind == queue.PROVISION:
            queue.enqueue_provision(session, node.id, preferred_owner=owner)
        else:
            queue.enqueue(session, work.kind, node.id, work.payload(payload), preferred_owner=owner)
