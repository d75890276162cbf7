"""How far a node's step flow has got, as one typed record in its own table.

Cleaning, deployment and servicing run a plan of steps that must survive a
crash: the plan, the index of the step reached, the steps the request asked
for, whether the ramdisk is up for cleaning and when the running step last
showed progress. They used to be loose keys of ``driver_internal_info``
(built with f-strings, cleared by hand); here they are one record, written
with the node under its reservation (``conductor.task``) or with the
transition that starts a flow (``services.provisioning``), and replaced whole
when a new flow starts, so no flow reads what an earlier one left.

The API still shows Ironic's ``clean_steps``/``clean_step_index`` (and the
deploy and service pairs) in ``driver_internal_info``: ``ironic_keys``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Any, Literal, cast

from sqlalchemy import Connection, Executable, Table, bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from metalforge.db.batches import in_batches
from metalforge.db.models import FlowProgressRow

StepKind = Literal["clean", "deploy", "service"]
"""The kinds of step plans: whose steps an interface declares (``@clean_step``...), the
flow that runs them and the agent commands' prefix (``clean.execute_clean_step``) are
the same name, declared here once."""

_TABLE = cast(Table, FlowProgressRow.__table__)

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FlowProgress:
    """The progress of the node's step flow; ``FlowProgress()`` is "no flow under way"."""

    flow: StepKind | None = None
    """The kind of steps the flow runs (servicing runs clean steps but is its own flow)."""
    plan: tuple[dict[str, Any], ...] | None = None
    """Step records in the order they run; ``None`` until the flow has planned."""
    step_index: int = 0
    """The step running or next to run."""
    requested: tuple[dict[str, Any], ...] = ()
    """The steps the request asked for, until the flow plans with them."""
    ramdisk_prepared: bool = False
    """Cleaning booted the ramdisk and the agent is up: it must be stopped at the end."""
    ramdisk_booting_since: float | None = None
    """Cleaning booted the ramdisk at this time (database clock) and waits for the agent."""
    without_ramdisk: bool = False
    """Manual cleaning of out-of-band steps only (``disable_ramdisk``): nothing boots."""
    step_started_at: float | None = None
    step_heartbeat_at: float | None = None
    """The running step last showed progress (an agent still working on it)."""
    completes_after: str | None = None
    """The plan is provisional: once this step (``deploy.deploy``, booting the agent)
    has run, it is completed, once, with the steps the agent reported
    (``StepFlow.completes``). Until then ``requested`` is kept: completion plans with it."""

    @classmethod
    def starting(
        cls,
        flow: StepKind,
        requested: Sequence[dict[str, Any]] = (),
        *,
        without_ramdisk: bool = False,
    ) -> FlowProgress:
        """The record a request leaves for a new flow: nothing of an earlier one."""
        return cls(flow=flow, requested=tuple(requested), without_ramdisk=without_ramdisk)

    def has_plan(self, flow: StepKind) -> bool:
        return self.flow == flow and self.plan is not None

    def ironic_keys(self) -> dict[str, Any]:
        """The ``driver_internal_info`` keys Ironic clients read for this progress."""
        if self.flow is None or self.plan is None:
            return {}
        return {f"{self.flow}_steps": list(self.plan), f"{self.flow}_step_index": self.step_index}


NO_FLOW = FlowProgress()

_COLUMNS = tuple(name for name in (f.name for f in fields(FlowProgress)) if name not in ("plan",))


def _from_row(row: Any) -> FlowProgress:
    return FlowProgress(
        flow=row.flow,
        plan=tuple(row.plan) if row.planned else None,
        step_index=row.step_index,
        requested=tuple(row.requested),
        ramdisk_prepared=row.ramdisk_prepared,
        ramdisk_booting_since=row.ramdisk_booting_since,
        without_ramdisk=row.without_ramdisk,
        step_started_at=row.step_started_at,
        step_heartbeat_at=row.step_heartbeat_at,
        completes_after=row.completes_after,
    )


PREFIX = "progress_"
JOINED_COLUMNS = tuple(
    column.label(f"{PREFIX}{column.key}") for column in _TABLE.columns if column.key != "node_id"
)
"""The table's columns, labelled, for a query that reads a node and its progress at once
(``from_joined``): the conductor's lock reads both in the statement it runs anyway."""


def from_joined(values: dict[str, Any]) -> FlowProgress:
    """Take the ``JOINED_COLUMNS`` out of ``values`` (a row read with an outer join)."""
    mine = {
        key.removeprefix(PREFIX): values.pop(key) for key in [*values] if key.startswith(PREFIX)
    }
    if mine.get("planned") is None:
        return NO_FLOW  # no row: the outer join left every column NULL
    return _from_row(SimpleNamespace(**mine))


def _values(progress: FlowProgress) -> dict[str, Any]:
    values = {name: getattr(progress, name) for name in _COLUMNS}
    values["requested"] = list(progress.requested)
    values["planned"] = progress.plan is not None
    values["plan"] = list(progress.plan or ())
    return values


def load(connection: Connection, node_id: int) -> FlowProgress:
    row = connection.execute(select(_TABLE).where(_TABLE.c.node_id == node_id)).one_or_none()
    return NO_FLOW if row is None else _from_row(row)


def load_many(connection: Connection, node_ids: Iterable[int]) -> dict[int, FlowProgress]:
    """The progress of each of ``node_ids`` that has a flow under way (a page of nodes).

    For views: a record this code cannot read is left out (and logged) rather
    than failing the whole page; the conductor, which must act on it, fails
    that node's work instead.
    """
    found: dict[int, FlowProgress] = {}
    for batch in in_batches(list(node_ids)):
        for row in connection.execute(select(_TABLE).where(_TABLE.c.node_id.in_(batch))):
            try:
                found[row.node_id] = _from_row(row)
            except (TypeError, ValueError):
                LOG.warning("node id %s: its flow progress cannot be read", row.node_id)
    return found


def write(connection: Connection, node_id: int, progress: FlowProgress) -> None:
    """Store ``progress`` as the node's (no row at all for ``NO_FLOW``), in one statement.

    The caller holds the node: its reservation (a conductor) or the row lock
    of the transition that starts the flow (a request), so no other writer
    races this one.
    """
    if progress == NO_FLOW:
        connection.execute(_DELETE, {"b_node": node_id})
    else:
        connection.execute(
            _upsert(connection.dialect.name), {"node_id": node_id, **_values(progress)}
        )


_DELETE = delete(_TABLE).where(_TABLE.c.node_id == bindparam("b_node"))


@functools.cache
def _upsert(dialect: str) -> Executable:
    """Insert or replace a node's row in one statement, built once per engine.

    Prebuilt like the conductor's other writes: on SQLite writes run one at
    a time, so building statements inside them costs every writer.
    """
    stmt = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_TABLE)
    replaced = {c.key: stmt.excluded[c.key] for c in _TABLE.columns if c.key != "node_id"}
    return stmt.on_conflict_do_update(index_elements=[_TABLE.c.node_id], set_=replaced)
