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
  move to ``inspect wait``. Out-of-band interfaces finish at once.
- The ramdisk's report is stored by the API with an ``inspection`` work
  item (``continue``); the worker that runs it applies ``continue`` (strict:
  a report delivered again after processing began is never processed twice
  and ends in ``error``), commits ``processing`` before it does anything,
  writes properties, ports and the inventory, powers the node off and
  applies ``finish`` with the move to ``manageable``, in one transaction
  with the item's acknowledgement.
- The timeout sweep queues ``timeout``; an abort applies ``abort``; a reapply
  processes the stored report again.
Work items carry the record's ``generation``: one queued for an earlier
inspection is stale and changes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from metalforge import inspection_states as ins
from metalforge import states
from metalforge.conductor import history, inspection_report
from metalforge.conductor.flows.common import fail
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.db import introspections, queue, throttle
from metalforge.db.engine import now_for
from metalforge.db.introspections import Record
from metalforge.db.models import Port, utcnow
from metalforge.drivers.base import DriverError, InspectInterface
from metalforge.errors import bad_request

WORK_KIND = "inspection"
"""Work items that apply an introspection event (``continue``, ``timeout``, ``reapply``)."""
ABORTED = "Canceled by operator"


@dataclass(frozen=True)
class InspectionEvent:
    """An ``inspection`` work item's payload: the event, for the inspection it was
    queued for (its record's generation)."""

    event: str
    generation: int


def event(name: str, record: Record) -> InspectionEvent:
    return InspectionEvent(name, record.generation)


def event_payload(name: str, record: Record) -> dict[str, Any]:
    """The stored form of ``event`` (for items queued with a key or a delay)."""
    return dataclasses.asdict(event(name, record))


def timeout_key(record: Record) -> str:
    """One timeout item per inspection, however many sweeps see it late."""
    return f"inspection-timeout:{record.node_uuid}:{record.generation}"


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


# -- helpers -----------------------------------------------------------------
def _record(task: NodeTask) -> Record | None:
    with task.ctx.db.read() as session:
        return introspections.load(session, task.node.uuid)


def _interface(task: NodeTask) -> InspectInterface:
    return task.ctx.drivers.interface_of(task.node, InspectInterface, "inspect")


def _moved(record: Record, event: str, **changes: Any) -> Record:
    """``record`` once ``event`` is applied, as the table says (it must allow it)."""
    return record.moved(ins.after(record.state, event), **changes)


def _saving(record: Record) -> Callable[[Session], None]:
    return lambda session: introspections.save(session, record)


def _now(task: NodeTask) -> dt.datetime:
    return task.ctx.db.now()


def _power_off(task: NodeTask, record: Record) -> None:
    """Stop the ramdisk the inspection booted, if it booted one (an out-of-band
    inspection powered nothing on); a failure is recorded, not raised."""
    if not record.manage_boot:
        return
    try:
        iface = _interface(task)
        if iface.boots_ramdisk:
            iface.stop_inspection(task)
    except DriverError as exc:
        task.record("inspection", f"Could not power the node off: {exc}", history.WARNING)


def _end_in_error(
    task: NodeTask, record: Record, event: str, message: str, *, power_off: bool = True
) -> None:
    """``event`` failed the inspection (or was refused): the record to where the table
    sends it (``error``) and, if the node is still inspecting, the node to
    ``inspect failed``, in one write."""
    if power_off:
        _power_off(task, record)
    target = ins.advance(record.state, event).target
    assert target is not None, f"{event} is stale here and ends nothing"
    failed = record.moved(target, finished_at=_now(task), error=message)
    if task.node.provision_state in (states.INSPECTING, states.INSPECT_WAIT):
        task.with_next_transition(_saving(failed))
        fail(task, message)
    else:
        task.record("inspection", message, history.ERROR)
        task.write_fenced(_saving(failed))


def _take_power_on_turn(task: NodeTask) -> None:
    """Wait for this power-on's turn in the cluster-wide throttle (interruptible)."""
    interval = task.settings.inspection.power_on_interval
    if interval <= 0:
        return
    with task.ctx.db.write() as session:
        slot = throttle.next_slot(session, throttle.POWER_ON, interval)
        wait = (slot - now_for(session)).total_seconds()
    task.sleep(wait)


def _port_macs(task: NodeTask) -> list[str]:
    with task.ctx.db.read() as session:
        return list(
            session.scalars(
                select(Port.address).where(Port.node_id == task.node.id).order_by(Port.id)
            )
        )


# -- the inspecting state ----------------------------------------------------
def inspect(task: NodeTask) -> None:
    """Boot the node into the inspection ramdisk (or inspect it out of band)."""
    record = _record(task)
    state = record.state if record else None
    if state in (ins.PROCESSING, ins.REAPPLYING):
        return  # the report's work item owns the node's next move
    if record is None or state != ins.STARTING:
        # Not started through a request (a node inspecting since before records
        # existed, or a record an operator's reapply moved on): start it here.
        record = started(record, task.node.uuid, _now(task), True)
        task.write_fenced(_saving(record))
    task.node.inspection_started_at = task.node.inspection_started_at or utcnow()
    try:
        iface = _interface(task)
        if iface.boots_ramdisk and not record.manage_boot:
            outcome = "wait"  # someone else boots the ramdisk
        else:
            if iface.boots_ramdisk:
                _take_power_on_turn(task)
            outcome = iface.inspect_hardware(task)
    except DriverError as exc:
        _end_in_error(task, record, ins.FAIL, f"Inspection failed: {exc}")
        return
    if outcome == "wait":
        _wait_for_report(task, iface, record)
        return
    # Out of band: the interface was its own ramdisk, and its report is processed.
    reported = _moved(_moved(record, ins.WAIT), ins.CONTINUE)
    done = _moved(reported, ins.FINISH, finished_at=_now(task))
    task.with_next_transition(_saving(done))
    task.transition(states.DONE, inspection_finished_at=utcnow(), last_error=None)


def _wait_for_report(task: NodeTask, iface: InspectInterface, record: Record) -> None:
    waiting = _moved(record, ins.WAIT)
    simulated = iface.simulated_report(task, _port_macs(task)) if record.manage_boot else None
    node_id, node_uuid = task.node.id, task.node.uuid

    def write(session: Session) -> None:
        introspections.save(session, waiting)
        if simulated is not None:
            introspections.store_raw(session, node_uuid, simulated.report)
            queue.enqueue(
                session,
                WORK_KIND,
                node_id,
                event_payload(ins.CONTINUE, waiting),
                not_before=now_for(session) + dt.timedelta(seconds=simulated.delay),
            )

    task.with_next_transition(write)
    task.transition(states.WAIT)


# -- events ------------------------------------------------------------------
def run_event(task: NodeTask, queued: InspectionEvent) -> None:
    """Apply the introspection event a work item carries (continue, timeout, reapply)."""
    name = queued.event
    record = _record(task)
    if record is None or queued.generation != record.generation:
        task.record("inspection", f"a {name} for an earlier inspection was dropped")
        return
    if name == ins.CONTINUE:
        _continue(task, record)
    elif name == ins.TIMEOUT:
        _timeout(task, record)
    elif name == ins.REAPPLY:
        _reapply(task, record)
    else:
        raise ValueError(f"unknown introspection event {name!r}")


def _continue(task: NodeTask, record: Record) -> None:
    step = ins.advance(record.state, ins.CONTINUE)
    if step.refused and record.state == ins.ERROR:
        # Already failed (aborted, timed out): keep the reason it failed for.
        task.record("inspection", f"{step.reason()}; it was not processed", history.WARNING)
        return
    if step.refused or step.target == ins.ERROR:
        # Refused, or the report again while it was processing (the worker that began
        # died): the record ends in error saying why, never processed a second time.
        _end_in_error(
            task, record, ins.CONTINUE, f"Inspection failed: {step.reason()}", power_off=False
        )
        return
    processing = _moved(record, ins.CONTINUE)
    # Committed before any processing: a worker that dies from here on leaves a
    # record a redelivered report finds already processing (strict: error).
    if task.node.provision_state == states.INSPECT_WAIT:
        task.with_next_transition(_saving(processing))
        task.transition(states.RESUME)
    else:
        task.write_fenced(_saving(processing))
    _process(task, processing, power_off=task.settings.inspection.power_off)


def _timeout(task: NodeTask, record: Record) -> None:
    if ins.advance(record.state, ins.TIMEOUT).target is None:
        return  # the inspection moved on since the sweep saw it
    limit = task.settings.inspection.timeout
    _end_in_error(
        task, record, ins.TIMEOUT, f"Inspection timed out: no report within {limit:g} seconds"
    )


def _reapply(task: NodeTask, record: Record) -> None:
    step = ins.advance(record.state, ins.REAPPLY)
    if step.refused:
        _end_in_error(
            task, record, ins.REAPPLY, f"Reapplying failed: {step.reason()}", power_off=False
        )
        return
    reapplying = _moved(record, ins.REAPPLY, started_at=_now(task), finished_at=None, error=None)
    task.write_fenced(_saving(reapplying))
    _process(task, reapplying, power_off=False)


def _known_ports(
    session: Session, node_id: int, macs: list[str]
) -> list[inspection_report.KnownPort]:
    rows = session.execute(
        select(Port.address, Port.pxe_enabled, Port.node_id).where(
            (Port.node_id == node_id) | Port.address.in_(macs)
        )
    ).all()
    return [inspection_report.KnownPort(a, p, n == node_id) for a, p, n in rows]


def _process(task: NodeTask, record: Record, *, power_off: bool) -> None:
    """Turn the stored report into properties and ports, then ``finish``."""
    with task.ctx.db.read() as session:
        data = introspections.load_data(session, task.node.uuid)
        raw = data.raw if data is not None else None
        macs = inspection_report.macs_of(raw) if raw is not None else []
        ports = _known_ports(session, task.node.id, macs)
    if raw is None:
        message = "Inspection failed: the ramdisk's report is no longer stored"
        _end_in_error(task, record, ins.FAIL, message)
        return
    try:
        outcome = inspection_report.process(
            raw, task.node.properties, ports, task.settings.inspection
        )
    except inspection_report.ReportRejected as exc:
        _end_in_error(task, record, ins.FAIL, f"Inspection failed: {exc}", power_off=power_off)
        return
    task.node.properties = outcome.properties
    for warning in outcome.warnings:
        task.record("inspection", warning, history.WARNING)
    if power_off:
        _power_off(task, record)
    finished = _moved(record, ins.FINISH, finished_at=_now(task), error=None)
    node_id, node_uuid = task.node.id, task.node.uuid

    def write(session: Session) -> None:
        _write_ports(session, node_id, outcome)
        introspections.store_processed(
            session,
            node_uuid,
            outcome.inventory,
            outcome.plugin_data,
            report=raw,
        )
        introspections.save(session, finished)

    created = ", ".join(mac for mac, _ in outcome.create_ports) or "none"
    task.record("inspection", f"inspection finished; ports created: {created}")
    if task.node.provision_state == states.INSPECTING:
        task.with_next_transition(write)
        task.transition(states.DONE, inspection_finished_at=utcnow(), last_error=None)
    else:
        task.write_fenced(write)


def _write_ports(session: Session, node_id: int, outcome: inspection_report.Outcome) -> None:
    now = utcnow()
    for mac, pxe in outcome.create_ports:
        session.add(
            Port(
                uuid=str(uuidlib.uuid4()),
                address=mac,
                node_id=node_id,
                pxe_enabled=pxe,
                created_at=now,
            )
        )
    for mac, pxe in outcome.set_pxe.items():
        session.execute(
            update(Port)
            .where(Port.node_id == node_id, Port.address == mac)
            .values(pxe_enabled=pxe, updated_at=now)
        )
    if outcome.delete_ports:
        session.execute(
            delete(Port).where(Port.node_id == node_id, Port.address.in_(outcome.delete_ports))
        )
    session.flush()


# -- abort and failure -------------------------------------------------------
def _on_abort(task: NodeTask) -> None:
    record = _record(task)
    if record is None or not ins.allowed(record.state, ins.ABORT):
        return
    _power_off(task, record)
    aborted = _moved(record, ins.ABORT, finished_at=_now(task), error=ABORTED)
    task.with_next_transition(_saving(aborted))


def _on_fail(task: NodeTask, message: str) -> None:
    record = _record(task)
    if record is None or record.state not in ins.ACTIVE:
        return
    failed = _moved(record, ins.FAIL, finished_at=_now(task), error=message)
    task.with_next_transition(_saving(failed))


SPEC = FlowSpec(
    name="inspect",
    verbs=(Verb(states.INSPECT, since=(1, 6), checks=(_check_can_start,), intent=_intent),),
    states={
        states.INSPECTING: FlowState(hook=inspect, agent_may_look_up=True),
        states.INSPECT_WAIT: FlowState(
            agent_may_look_up=True, power_changes_allowed=True, abort_since=(1, 41)
        ),
    },
    timeout_setting=None,
    on_abort=_on_abort,
    on_fail=_on_fail,
)
