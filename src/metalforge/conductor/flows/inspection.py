"""Inspection (``inspect``): boot the node into a ramdisk and process what it reports.

Two records move together. The node's provision state is Ironic's
(``inspecting``, ``inspect wait``, ``inspect failed``, back to ``manageable``);
the introspection record (``db.introspections``) follows the introspection
state machine (``inspection_states``), which both the Ironic API and the
ironic-inspector API show. Every move of the record goes through that
table, in the same transaction as the provision transition that goes with
it.

- The request (either API) applies ``start`` with its transition: the
  record is ``starting`` before the client's next poll.
- The ``inspecting`` hook takes the cluster-wide power-on turn, asks the
  inspect interface to boot the ramdisk and applies ``wait`` with the
  move to ``inspect wait``. An out-of-band interface reads the BMC instead;
  what it read is stored and queued as a report that has just come.
- The ramdisk's report is stored by the API with an ``inspection`` work
  item (``continue``); the worker that runs it processes the report and
  applies ``finish`` with the move to ``manageable``. That item, the timeout
  sweep's ``timeout`` and an operator's ``reapply`` are introspection events
  (``flows.inspection_events``).
- An abort applies ``abort`` (the spec's ``on_abort``).

This module is the flow's ``FlowSpec`` and its hooks; how the record moves
with the node, and how an inspection ends in error, is
``flows.inspection_record``, which the events share.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from metalforge import inspection_states as ins
from metalforge import states
from metalforge.conductor.bmc_retry import retried
from metalforge.conductor.flows.inspection_events import WORK_KIND, event_payload
from metalforge.conductor.flows.inspection_record import (
    db_now,
    end_in_error,
    interface,
    moved,
    record_of,
    saving,
    stop_ramdisk,
)
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.db import introspections, queue, throttle
from metalforge.db.engine import now_for
from metalforge.db.introspections import Record
from metalforge.db.models import Port, utcnow
from metalforge.drivers.base import Collected, DriverError, SimulatedReport
from metalforge.errors import bad_request

ABORTED = "Canceled by operator"


# -- the request ------------------------------------------------------------
def started(record: Record | None, node_uuid: str, now: dt.datetime, manage_boot: bool) -> Record:
    """The record once ``start`` is applied: a new inspection (a new generation),
    unless it was still starting (a repeated start of the same one)."""
    state = ins.after(record.state if record else None, ins.START)
    again = record is not None and record.state == ins.STARTING
    generation = (record.generation if record else 0) + (0 if again else 1)
    return Record(node_uuid, state, generation, manage_boot, started_at=now)


def _check_can_start(admission: Admission) -> None:
    record = introspections.load(admission.session, admission.node.uuid)
    if record is not None and not ins.allowed(record.state, ins.START):
        raise bad_request(
            f"Node {admission.node.uuid} is already being inspected "
            f"(its inspection is {record.state})"
        )


def _intent(admission: Admission) -> Intent:
    node_uuid = admission.node.uuid
    manage_boot = admission.request.manage_boot

    def write(session: Session) -> None:
        record = introspections.load(session, node_uuid)
        introspections.save(session, started(record, node_uuid, now_for(session), manage_boot))

    return Intent(
        changes={"inspection_started_at": utcnow(), "inspection_finished_at": None},
        writes=write,
    )


# -- the inspecting state ----------------------------------------------------
SHORT_TURN_WAIT = 30.0
"""Seconds of a power-on turn waited for holding the node (the power-on then lands on its
slot exactly); a longer wait lets the node go until its turn."""


def _take_power_on_turn(task: NodeTask, record: Record) -> bool:
    """Whether the node may power on now; otherwise it waits for its turn in the
    cluster-wide throttle in ``inspect wait``, unlocked (an abort reaches it), and the
    inspection's timeout counts from the turn, not from the request."""
    interval = task.settings.inspection.power_on_interval
    if interval <= 0 or record.power_on_at is not None:
        return True  # no throttle, or the turn given earlier has come
    with task.ctx.db.write() as session:
        slot = throttle.next_slot(session, throttle.POWER_ON, interval)
        wait = (slot - now_for(session)).total_seconds()
    if wait <= SHORT_TURN_WAIT:
        task.sleep(wait)
        return True
    waiting = dataclasses.replace(record, power_on_at=slot, started_at=slot)
    node_id, host = task.node.id, task.ctx.hostname

    def write(session: Session) -> None:
        introspections.save(session, waiting)
        queue.enqueue_provision(session, node_id, preferred_owner=host, not_before=slot)

    task.with_next_transition(write)
    turn = slot.isoformat(timespec="seconds")
    task.transition(states.WAIT, note=f"waiting for its power-on turn at {turn}")
    return False


def _turn_came(task: NodeTask) -> None:
    """inspect wait: a node waiting for its power-on turn goes on when it comes (a node
    waiting for its ramdisk's report waits for the report)."""
    record = record_of(task)
    if record is None or record.state != ins.STARTING or record.power_on_at is None:
        return
    if db_now(task) < record.power_on_at:
        return  # woken early (another item): the queued one comes at the turn
    task.transition(states.RESUME, note="its power-on turn has come")


def _port_macs(task: NodeTask) -> list[str]:
    with task.ctx.db.read() as session:
        return list(
            session.scalars(
                select(Port.address).where(Port.node_id == task.node.id).order_by(Port.id)
            )
        )


def inspect(task: NodeTask) -> None:
    """Boot the node into the inspection ramdisk (or inspect it out of band)."""
    record = record_of(task)
    state = record.state if record else None
    if state in (ins.PROCESSING, ins.REAPPLYING):
        return  # the report's work item owns the node's next move
    if record is None or state != ins.STARTING:
        # Not started through a request (a node inspecting since before records
        # existed, or a record an operator's reapply moved on): start it here.
        record = started(record, task.node.uuid, db_now(task), True)
        task.write_fenced(saving(record))
    task.node.inspection_started_at = task.node.inspection_started_at or utcnow()
    try:
        iface = interface(task)
        if iface.boots_ramdisk and not record.manage_boot:
            outcome: Literal["wait"] | Collected = "wait"  # someone else boots the ramdisk
        else:
            if iface.boots_ramdisk and not _take_power_on_turn(task, record):
                return
            outcome = retried(task, "inspect", lambda: iface.inspect_hardware(task))
    except DriverError as exc:
        end_in_error(task, record, ins.FAIL, f"Inspection failed: {exc}")
        return
    if isinstance(outcome, Collected):
        # Out of band: what the BMC knows is processed as a ramdisk's report is, by the
        # same durable work item (properties, ports, rules, stored data).
        _wait_for_report(task, record, SimulatedReport(0.0, outcome.report))
        return
    simulated = iface.simulated_report(task, _port_macs(task)) if record.manage_boot else None
    _wait_for_report(task, record, simulated)


def _wait_for_report(task: NodeTask, record: Record, report: SimulatedReport | None) -> None:
    """inspect wait until the report comes; one already known is queued to be processed
    (after the simulated ramdisk's delay)."""
    waiting = moved(record, ins.WAIT)
    node_id, node_uuid = task.node.id, task.node.uuid

    def write(session: Session) -> None:
        introspections.save(session, waiting)
        if report is not None:
            introspections.store_raw(session, node_uuid, report.report)
            queue.enqueue(
                session,
                WORK_KIND,
                node_id,
                event_payload(ins.CONTINUE, waiting),
                not_before=now_for(session) + dt.timedelta(seconds=report.delay),
            )

    task.with_next_transition(write)
    task.transition(states.WAIT)


# -- abort and failure -------------------------------------------------------
def _on_abort(task: NodeTask) -> None:
    record = record_of(task)
    if record is None or not ins.allowed(record.state, ins.ABORT):
        return
    stop_ramdisk(task, record)
    aborted = moved(record, ins.ABORT, finished_at=db_now(task), error=ABORTED)
    task.with_next_transition(saving(aborted))


def _on_fail(task: NodeTask, message: str) -> None:
    record = record_of(task)
    if record is None or record.state not in ins.ACTIVE:
        return
    failed = moved(record, ins.FAIL, finished_at=db_now(task), error=message)
    task.with_next_transition(saving(failed))


SPEC = FlowSpec(
    name="inspect",
    verbs=(Verb(states.INSPECT, since=(1, 6), checks=(_check_can_start,), intent=_intent),),
    states={
        states.INSPECTING: FlowState(hook=inspect, agent_may_look_up=True),
        states.INSPECT_WAIT: FlowState(
            hook=_turn_came,
            agent_may_look_up=True,
            power_changes_allowed=True,
            abort_since=(1, 41),
        ),
    },
    timeout_setting=None,
    on_abort=_on_abort,
    on_fail=_on_fail,
)
