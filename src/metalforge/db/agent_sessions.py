"""The ramdisk agent's session with metalforge: token, address, heartbeats.

Three parties write it, never under the same lock: the conductor that boots
the ramdisk (``begin``: a new session, older tokens and addresses void), the
API's lookup (``issue_token``: once per session) and the API's heartbeat
(``record_heartbeat``). Each write is one conditional statement, so two
lookups racing each other cannot both receive the token.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, insert, or_, select, update
from sqlalchemy.orm import Session

from metalforge.db.models import AgentSession, utcnow

_TABLE = cast(Table, AgentSession.__table__)


@dataclass(frozen=True, slots=True)
class AgentSessionInfo:
    """What the conductor needs to talk to the agent."""

    node_id: int
    booted_at: dt.datetime | None
    token: str | None
    agent_url: str | None
    agent_version: str | None
    verify_ca: str | None
    last_heartbeat_at: dt.datetime | None
    kept_since: dt.datetime | None = None
    """A flow ended and kept the agent running for the next one, at this time."""

    @property
    def heard_since_boot(self) -> bool:
        """The agent of the current ramdisk boot has heartbeated and given its address."""
        if self.last_heartbeat_at is None or self.agent_url is None:
            return False
        return self.booted_at is None or self.last_heartbeat_at >= self.booted_at


def get(session: Session, node_id: int) -> AgentSessionInfo | None:
    row = session.execute(select(_TABLE).where(_TABLE.c.node_id == node_id)).one_or_none()
    if row is None:
        return None
    return AgentSessionInfo(
        node_id=row.node_id,
        booted_at=_aware(row.booted_at),
        token=row.token,
        agent_url=row.agent_url,
        agent_version=row.agent_version,
        verify_ca=row.verify_ca,
        last_heartbeat_at=_aware(row.last_heartbeat_at),
        kept_since=_aware(row.kept_since),
    )


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    # Core reads go through the column type too, but keep the contract explicit.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


_CLEARED = {
    "token": None,
    "token_issued_at": None,
    "agent_url": None,
    "agent_version": None,
    "verify_ca": None,
    "last_heartbeat_at": None,
    "agent_status": None,
    "agent_status_message": None,
    "kept_since": None,
}


def begin(session: Session, node_id: int) -> None:
    """Start a new session: the ramdisk is (re)booting, or the agent was stopped.

    The next agent must look up again and gets a fresh token; the previous
    agent's token and address stop working at once.
    """
    values = {**_CLEARED, "booted_at": utcnow()}
    result = session.connection().execute(
        update(_TABLE).where(_TABLE.c.node_id == node_id).values(**values)
    )
    if result.rowcount == 0:
        session.execute(insert(_TABLE).values(node_id=node_id, **values))


def end(session: Session, node_id: int) -> None:
    """The agent is gone, or must be shut out: forget its token and address."""
    session.connection().execute(
        update(_TABLE).where(_TABLE.c.node_id == node_id).values(**{**_CLEARED, "booted_at": None})
    )


@dataclass(frozen=True)
class IdleCheck:
    """An ``agent_idle`` work item's payload: the keep it checks (``kept_since``, ISO 8601).

    The item powers the node off only if the agent is still kept from that
    time: a flow that used it since kept it again (or ended it), and that
    keep queued its own check. No clocks are compared.
    """

    kept_since: str


def keep(session: Session, node_id: int) -> dt.datetime | None:
    """The flow that used the agent ended and leaves it running for the next (fast
    track).

    The token, address and heartbeats stay valid: the agent goes on
    heartbeating, and the next flow talks to it without a reboot. The mark
    stays while that flow uses the agent; its end keeps it again (a new
    time) or ends the session. Returns the time it is kept from (``None``: no
    running agent's session to keep).
    """
    kept_since = utcnow()
    result = session.connection().execute(
        update(_TABLE)
        .where(_TABLE.c.node_id == node_id, _TABLE.c.booted_at.is_not(None))
        .values(kept_since=kept_since)
    )
    return kept_since if result.rowcount == 1 else None


def is_kept(session: Session, node_id: int) -> bool:
    """Whether a flow left the node's agent running for the next one."""
    kept = session.execute(
        select(_TABLE.c.node_id).where(
            _TABLE.c.node_id == node_id, _TABLE.c.kept_since.is_not(None)
        )
    ).one_or_none()
    return kept is not None


class NoRamdiskBooted(LookupError):
    """No conductor booted a ramdisk on the node: nothing may look it up."""


def issue_token(session: Session, node_id: int) -> str | None:
    """The session's token if this call is the first to ask for it, else ``None``.

    Ironic's rule: the token is handed out once per agent boot; later lookups
    see it masked, so a second party on the provisioning network cannot
    obtain it by looking the node up again. Only a session a conductor began
    (it booted the ramdisk) hands one out: raises ``NoRamdiskBooted`` otherwise.
    """
    token = secrets.token_urlsafe(32)
    result = session.connection().execute(
        update(_TABLE)
        .where(
            _TABLE.c.node_id == node_id,
            _TABLE.c.token.is_(None),
            _TABLE.c.booted_at.is_not(None),
        )
        .values(token=token, token_issued_at=utcnow())
    )
    if result.rowcount == 1:
        return token
    check_booted(session, node_id)
    return None


def check_booted(session: Session, node_id: int) -> None:
    """Raise ``NoRamdiskBooted`` unless a conductor began an agent session on the node.

    A lookup below microversion 1.62 uses this instead of ``issue_token``:
    such a client cannot receive the token, and taking it would leave the
    real agent (which asks with 1.62 or later) without one.
    """
    booted = session.execute(
        select(_TABLE.c.node_id).where(_TABLE.c.node_id == node_id, _TABLE.c.booted_at.is_not(None))
    ).one_or_none()
    if booted is None:
        raise NoRamdiskBooted(node_id)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    callback_url: str
    agent_version: str | None
    verify_ca: str | None
    status: str | None
    status_message: str | None


class HeartbeatRefused(ValueError):
    """The heartbeat does not belong to the node's current agent; the message says why."""


def record_heartbeat(session: Session, node_id: int, token: str, beat: Heartbeat) -> None:
    """Check the agent's token and pinned address, then record the heartbeat.

    One conditional ``UPDATE`` checks and writes: two heartbeats racing with
    different addresses cannot both pin theirs, and one racing a new boot
    (``begin``) finds its token gone.
    """
    table = _TABLE
    values: dict[str, object] = {
        "agent_url": beat.callback_url,
        "last_heartbeat_at": utcnow(),
        "agent_version": beat.agent_version,
        "agent_status": beat.status,
        "agent_status_message": beat.status_message,
    }
    conditions = [
        table.c.node_id == node_id,
        table.c.token == token,
        or_(table.c.agent_url.is_(None), table.c.agent_url == beat.callback_url),
    ]
    if beat.verify_ca is not None:
        values["verify_ca"] = beat.verify_ca
        conditions.append(or_(table.c.verify_ca.is_(None), table.c.verify_ca == beat.verify_ca))
    result = session.connection().execute(update(table).where(*conditions).values(**values))
    if result.rowcount == 1:
        return
    current = get(session, node_id)
    if current is None or current.token is None or not secrets.compare_digest(current.token, token):
        raise HeartbeatRefused("Invalid or missing agent token received.")
    if current.agent_url is not None and current.agent_url != beat.callback_url:
        raise HeartbeatRefused(
            f"Agent callback URL {beat.callback_url} does not match the one the agent "
            f"of this boot gave first ({current.agent_url})."
        )
    raise HeartbeatRefused(
        "The agent's TLS certificate changed within one boot; refusing the heartbeat."
    )
