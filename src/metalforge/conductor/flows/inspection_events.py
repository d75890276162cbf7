"""Introspection events: the ``inspection`` work items that carry them, and what each does.

An inspection's hooks (``flows.inspection``) only start it; what happens
after the ramdisk boots arrives as work for the node's conductor, run under
the node's reservation like any node work:

- ``continue``: the ramdisk's report was stored (by the API; with fake
  hardware, the simulated ramdisk's, queued by the hook). Strict: a report delivered again
  after processing began is never processed twice and ends in ``error``.
  ``processing`` is committed before anything else happens; then the report
  becomes properties, ports and the inventory (``inspection_report`` holds
  the rules), the node is powered off and ``finish`` is applied with the move
  to ``manageable``, in one transaction with the item's acknowledgement.
- ``timeout``: queued by the timeout sweep (``inspection_sweeps``).
- ``reapply``: an operator asked for the stored report to be processed again.

Every item carries the record's ``generation``: one queued for an earlier
inspection is stale and changes nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from metalforge import inspection_states as ins
from metalforge import states
from metalforge.conductor import history, inspection_report, inspection_rules
from metalforge.conductor.flows.common import read_from_bmc
from metalforge.conductor.flows.inspection_record import (
    db_now,
    end_in_error,
    finish_ramdisk,
    moved,
    record_of,
    saving,
)
from metalforge.conductor.task import NodeTask
from metalforge.db import introspections
from metalforge.db.introspections import Record
from metalforge.db.models import Port, utcnow

WORK_KIND = "inspection"
"""Work items that apply an introspection event (``continue``, ``timeout``, ``reapply``)."""


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


def run_event(task: NodeTask, queued: InspectionEvent) -> None:
    """Apply the introspection event a work item carries (continue, timeout, reapply)."""
    name = queued.event
    record = record_of(task)
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


def ended_in_error(task: NodeTask, message: str) -> bool:
    """An event that raised, or was given up on: the record, if processing or reapplying,
    ends in ``error`` with ``message`` so the next start is not refused for ever.
    True when that also failed the node's inspection (nothing more to do)."""
    record = record_of(task)
    if record is None or record.state not in ins.ACTIVE:
        return False
    step = ins.advance(record.state, ins.FAIL)
    if step.refused or step.target is None:
        return False
    failing = task.node.provision_state in (states.INSPECTING, states.INSPECT_WAIT)
    end_in_error(task, record, ins.FAIL, message, power_off=False)
    return failing


def _continue(task: NodeTask, record: Record) -> None:
    step = ins.advance(record.state, ins.CONTINUE)
    if step.refused and record.state == ins.ERROR:
        # Already failed (aborted, timed out): keep the reason it failed for.
        task.record("inspection", f"{step.reason()}; it was not processed", history.WARNING)
        return
    if step.refused or step.target == ins.ERROR:
        # Refused, or the report again while it was processing (the worker that began
        # died): the record ends in error saying why, never processed a second time.
        end_in_error(
            task, record, ins.CONTINUE, f"Inspection failed: {step.reason()}", power_off=False
        )
        return
    processing = moved(record, ins.CONTINUE)
    # Committed before any processing: a worker that dies from here on leaves a
    # record a redelivered report finds already processing (strict: error).
    if task.node.provision_state == states.INSPECT_WAIT:
        task.with_next_transition(saving(processing))
        task.transition(states.RESUME)
    else:
        task.write_fenced(saving(processing))
    _process(task, processing, power_off=task.settings.inspection.power_off)


def _timeout(task: NodeTask, record: Record) -> None:
    if ins.advance(record.state, ins.TIMEOUT).target is None:
        return  # the inspection moved on since the sweep saw it
    limit = task.settings.inspection.timeout
    end_in_error(
        task, record, ins.TIMEOUT, f"Inspection timed out: no report within {limit:g} seconds"
    )


def _reapply(task: NodeTask, record: Record) -> None:
    step = ins.advance(record.state, ins.REAPPLY)
    if step.refused:
        end_in_error(
            task, record, ins.REAPPLY, f"Reapplying failed: {step.reason()}", power_off=False
        )
        return
    reapplying = moved(record, ins.REAPPLY, started_at=db_now(task), finished_at=None, error=None)
    task.write_fenced(saving(reapplying))
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
        end_in_error(task, record, ins.FAIL, message)
        return
    try:
        outcome = inspection_report.process(
            raw, task.node.properties, ports, task.settings.inspection
        )
    except inspection_report.ReportRejected as exc:
        end_in_error(task, record, ins.FAIL, f"Inspection failed: {exc}", power_off=power_off)
        return
    properties_before = task.node.properties
    task.node.properties = outcome.properties
    for warning in outcome.warnings:
        task.record("inspection", warning, history.WARNING)
    try:
        ruled = inspection_rules.run(task, outcome)
    except inspection_rules.RulesFailed as exc:
        task.node.properties = properties_before
        end_in_error(task, record, ins.FAIL, f"Inspection failed: {exc}", power_off=power_off)
        return
    plugin_data = ruled.subject.plugin_data if ruled is not None else outcome.plugin_data
    if power_off:
        finish_ramdisk(task, record)
    finished = moved(record, ins.FINISH, finished_at=db_now(task), error=None)
    node_id, node_uuid = task.node.id, task.node.uuid

    def write(session: Session) -> None:
        _write_ports(session, node_id, outcome, ruled)
        if ruled is not None:
            inspection_rules.write(session, node_id, ruled)
        introspections.store_processed(
            session,
            node_uuid,
            outcome.inventory,
            plugin_data,
            report=raw,
        )
        introspections.save(session, finished)

    created = ", ".join(mac for mac, _ in outcome.create_ports) or "none"
    task.record("inspection", f"inspection finished; ports created: {created}")
    if task.node.provision_state == states.INSPECTING:
        task.with_next_transition(write)
        # Some BMCs report a NIC's firmware only while the machine is on, as it is now.
        read_from_bmc(task, "firmware")
        task.transition(states.DONE, inspection_finished_at=utcnow(), last_error=None)
    else:
        task.write_fenced(write)


def _write_ports(
    session: Session,
    node_id: int,
    outcome: inspection_report.Outcome,
    ruled: inspection_rules.RuleRun | None,
) -> None:
    now = utcnow()
    for mac, pxe in outcome.create_ports:
        fields = {"pxe_enabled": pxe, **inspection_rules.new_port_fields(ruled, mac)}
        session.add(Port(address=mac, node_id=node_id, created_at=now, **fields))
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
