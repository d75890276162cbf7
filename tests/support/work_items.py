"""Work items written past the queue's API, as an older or buggier writer might have left them."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select, text

from metalforge.db.engine import Database
from metalforge.db.models import WorkItem, utcnow

_INSERT = text(
    "INSERT INTO work_items (kind, node_id, payload, state, attempts, failures, rerun, "
    "not_before, created_at) VALUES (:kind, :node, :payload, 'pending', 0, :failures, :rerun, "
    ":now, :now)"
)


def insert_raw_item(
    db: Database, kind: str, node_id: int | None, payload: str, *, failures: int = 0
) -> int:
    """A pending, due item whose payload column holds ``payload`` verbatim; its id."""
    with db.write() as session:
        session.execute(
            _INSERT,
            {
                "kind": kind,
                "node": node_id,
                "payload": payload,
                "failures": failures,
                "rerun": False,
                "now": utcnow() - dt.timedelta(seconds=1),
            },
        )
        item_id = session.scalar(select(WorkItem.id).order_by(WorkItem.id.desc()).limit(1))
    assert item_id is not None
    return item_id
