"""A node's introspection record, moved in step with the node under its reservation.

The record (``db.introspections``) follows its own state machine
(``inspection_states``), and every move of it is written in the same
transaction as the node's write that goes with it: with the next provision
transition (``task.with_next_transition``) or at once, fenced
(``task.write_fenced``). The inspection flow's hooks (``flows.inspection``)
and the introspection events its work items carry
(``flows.inspection_events``) move it the same ways, and end it the same way
when something fails: the ramdisk stopped, the record in ``error`` and, if
the node is still inspecting, the node in ``inspect failed``, in one write.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from metalforge import inspection_states as ins
from metalforge import states
from metalforge.conductor import history
from metalforge.conductor.flows.common import fail
from metalforge.conductor.task import NodeTask
from metalforge.db import introspections
from metalforge.db.introspections import Record
from metalforge.drivers.base import DriverError, InspectInterface


def record_of(task: NodeTask) -> Record | None:
    """The node's introspection record as committed now."""
    with task.ctx.db.read() as session:
        return introspections.load(session, task.node.uuid)


def interface(task: NodeTask) -> InspectInterface:
    return task.ctx.drivers.interface_of(task.node, InspectInterface, "inspect")


def moved(record: Record, event: str, **changes: Any) -> Record:
    """``record`` once ``event`` is applied, as the table says (it must allow it)."""
    return record.moved(ins.after(record.state, event), **changes)


def saving(record: Record) -> Callable[[Session], None]:
    return lambda session: introspections.save(session, record)


def db_now(task: NodeTask) -> dt.datetime:
    """Now on the database's clock (``db.clock``), the one every host's times compare on."""
    return task.ctx.db.now()


def stop_ramdisk(task: NodeTask, record: Record) -> None:
    """Stop the ramdisk the inspection booted, if it booted one (an out-of-band
    inspection powered nothing on); a failure is recorded, not raised."""
    _end_ramdisk(task, record, lambda iface: iface.stop_inspection(task))


def finish_ramdisk(task: NodeTask, record: Record) -> None:
    """The inspection succeeded: stop its ramdisk, or leave the agent running for the
    next flow (fast track); a failure is recorded, not raised."""
    _end_ramdisk(task, record, lambda iface: iface.end_inspection(task))


def _end_ramdisk(task: NodeTask, record: Record, end: Callable[[InspectInterface], None]) -> None:
    if not record.manage_boot:
        return
    try:
        iface = interface(task)
        if iface.boots_ramdisk:
            end(iface)
    except DriverError as exc:
        task.record("inspection", f"Could not power the node off: {exc}", history.WARNING)


def end_in_error(
    task: NodeTask, record: Record, event: str, message: str, *, power_off: bool = True
) -> None:
    """``event`` failed the inspection (or was refused): the record to where the table
    sends it (``error``) and, if the node is still inspecting, the node to
    ``inspect failed``, in one write."""
    if power_off:
        stop_ramdisk(task, record)
    target = ins.advance(record.state, event).target
    assert target is not None, f"{event} is stale here and ends nothing"
    failed = record.moved(target, finished_at=db_now(task), error=message)
    if task.node.provision_state in (states.INSPECTING, states.INSPECT_WAIT):
        task.with_next_transition(saving(failed))
        fail(task, message)
    else:
        task.record("inspection", message, history.ERROR)
        task.write_fenced(saving(failed))
