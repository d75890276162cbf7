"""Node history: every transition, every error, every step, in the node's own log."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from metalforge.db.models import NodeHistory

INFO = "INFO"
WARNING = "WARNING"
ERROR = "ERROR"


def record(
    session: Session,
    node_id: int,
    event_type: str,
    event: str,
    *,
    severity: str = INFO,
    conductor: str | None = None,
    user: str | None = None,
    state: str | None = None,
    target: str | None = None,
    duration: float | None = None,
) -> None:
    """Add one history entry in the caller's transaction."""
    session.add(
        NodeHistory(
            uuid=str(uuid.uuid4()),
            node_id=node_id,
            event_type=event_type,
            event=event,
            severity=severity,
            conductor=conductor,
            user=user,
            state=state,
            target_provision_state=target,
            duration_seconds=duration,
        )
    )
