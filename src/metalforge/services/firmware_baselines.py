"""Firmware baselines: what the fleet's firmware should be, and which nodes are not there.

A baseline (``POST /v1/firmware_baselines``, metalforge's own resource) names
the version of each component (``bios``, ``bmc``) that the machines of one
vendor and model (either may be left out) should run, and the image that
gets a component there. It is checked whole before it is stored: every
component must be one a firmware interface can update, named once, with an
http(s) image URL, so a baseline can always be turned into a
``firmware.update`` step's settings (``update_settings``).

A baseline is not changed in place (delete it and create another): a rollout
or a report that names it then always means the same versions.

The drift report compares a baseline with the firmware inventory the
firmware interfaces keep (``db.firmware_components``, written at
verification and after each update), by the rules of ``firmware_drift``.
Nodes whose hardware cannot report firmware (``no-firmware``) are never
covered.
"""

from __future__ import annotations

import uuid as uuidlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge import firmware_drift
from metalforge.db.models import FirmwareBaseline, FirmwareComponent, Node
from metalforge.drivers.base import StepFailed
from metalforge.drivers.firmware import COMPONENTS, parse_settings
from metalforge.errors import RequestError, bad_request, conflict, not_found
from metalforge.firmware_drift import Drift, Recorded
from metalforge.services import lookup
from metalforge.services.bodies import FirmwareBaselineCreate
from metalforge.services.context import Services

NO_FIRMWARE = "no-firmware"
"""The firmware interface of hardware that reports no firmware: such nodes are never covered."""


def not_found_error(ident: str) -> RequestError:
    return not_found(f"Firmware baseline {ident} could not be found.")


def _where(ident: str) -> Any:
    if lookup.is_uuid(ident):
        return FirmwareBaseline.uuid == str(uuidlib.UUID(ident))
    return FirmwareBaseline.name == ident


def find_baseline(session: Session, ident: str) -> FirmwareBaseline:
    """By UUID or by name; 404 otherwise."""
    found = session.scalar(select(FirmwareBaseline).where(_where(ident)))
    if found is None:
        raise not_found_error(ident)
    return found


def listing() -> Select[Any]:
    return select(FirmwareBaseline)


def update_settings(baseline: FirmwareBaseline) -> list[dict[str, Any]]:
    """The baseline as a ``firmware.update`` step's ``settings`` (every component, in order)."""
    return [
        {"component": c["component"], "url": c["url"], "wait": c.get("wait", 0)}
        for c in baseline.components
    ]


def _check(body: FirmwareBaselineCreate) -> None:
    """What the body's types cannot say: updatable components, each once, usable URLs."""
    names = [c.component for c in body.components]
    unknown = sorted({n for n in names if n not in COMPONENTS})
    if unknown:
        raise bad_request(
            f"Invalid firmware baseline: no firmware interface can update component(s) "
            f"{', '.join(unknown)} (updatable: {', '.join(COMPONENTS)})"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise bad_request(f"Invalid firmware baseline: component(s) {', '.join(twice)} named twice")
    try:
        parse_settings([{"component": c.component, "url": c.url} for c in body.components])
    except StepFailed as exc:
        raise bad_request(f"Invalid firmware baseline: {exc}") from None
    lookup.check_name(body.name)


def _taken(name: str) -> RequestError:
    return conflict(f"A firmware baseline with name {name} already exists.")


def create_baseline(svc: Services, body: FirmwareBaselineCreate) -> FirmwareBaseline:
    """Store a new baseline: 400 for a rule broken, 409 for a name or UUID in use."""
    _check(body)
    baseline_uuid = lookup.check_uuid(body.uuid) if body.uuid else str(uuidlib.uuid4())
    try:
        with svc.db.write() as session:
            if session.scalar(
                select(FirmwareBaseline.id).where(FirmwareBaseline.name == body.name)
            ):
                raise _taken(body.name)
            if session.scalar(
                select(FirmwareBaseline.id).where(FirmwareBaseline.uuid == baseline_uuid)
            ):
                raise conflict(f"A firmware baseline with UUID {baseline_uuid} already exists.")
            baseline = FirmwareBaseline(
                uuid=baseline_uuid,
                name=body.name,
                description=body.description,
                vendor=body.vendor,
                model=body.model,
                components=[c.model_dump() for c in body.components],
            )
            session.add(baseline)
            session.flush()
    except IntegrityError:  # a concurrent create won the race for the name or UUID
        raise _taken(body.name) from None
    return baseline


def delete_baseline(svc: Services, ident: str) -> None:
    with svc.db.write() as session:
        session.delete(find_baseline(session, ident))


# -- drift ------------------------------------------------------------------


@dataclass(frozen=True)
class NodeDrift:
    """One covered node that is not at the baseline, and how."""

    node_uuid: str
    node_name: str | None
    provision_state: str
    components: list[Drift]


@dataclass(frozen=True)
class DriftReport:
    baseline: FirmwareBaseline
    covered: frozenset[str]
    """The UUIDs of the nodes the baseline is for (at the baseline or not)."""
    nodes: list[NodeDrift]


@dataclass(frozen=True)
class _Candidate:
    uuid: str
    name: str | None
    provision_state: str
    recorded: dict[str, Recorded]


def _candidates(session: Session) -> list[_Candidate]:
    """Every node that can report firmware, with what its BMC last reported."""
    nodes = session.execute(
        select(Node.id, Node.uuid, Node.name, Node.provision_state)
        .where(or_(Node.firmware_interface.is_(None), Node.firmware_interface != NO_FIRMWARE))
        .order_by(Node.id)
    ).all()
    recorded: dict[int, dict[str, Recorded]] = defaultdict(dict)
    for row in session.execute(
        select(
            FirmwareComponent.node_id,
            FirmwareComponent.component,
            FirmwareComponent.current_version,
            FirmwareComponent.vendor,
            FirmwareComponent.model,
        )
    ):
        recorded[row.node_id][row.component] = Recorded(
            row.component, row.current_version, row.vendor, row.model
        )
    return [_Candidate(n.uuid, n.name, n.provision_state, recorded.get(n.id, {})) for n in nodes]


def _expected(baseline: FirmwareBaseline) -> dict[str, str]:
    return {c["component"]: c["version"] for c in baseline.components}


def _report(baseline: FirmwareBaseline, candidates: Sequence[_Candidate]) -> DriftReport:
    expected = _expected(baseline)
    covered: set[str] = set()
    drifted = []
    for node in candidates:
        if not firmware_drift.covers(baseline.vendor, baseline.model, node.recorded.values()):
            continue
        covered.add(node.uuid)
        found = firmware_drift.drift(expected, node.recorded)
        if found:
            drifted.append(NodeDrift(node.uuid, node.name, node.provision_state, found))
    return DriftReport(baseline, frozenset(covered), drifted)


def drift_report(svc: Services, ident: str) -> DriftReport:
    """The nodes a baseline covers that do not run its versions (404 for no such baseline)."""
    with svc.db.read() as session:
        report = drift_report_in(session, ident)
        session.expunge(report.baseline)
        return report


def drift_report_in(session: Session, ident: str) -> DriftReport:
    """``drift_report`` in the caller's transaction (a rollout's selector and updates)."""
    return _report(find_baseline(session, ident), _candidates(session))


def drift_counts(session: Session) -> dict[tuple[str, str, str], int]:
    """Drifted nodes per (baseline name, component, status), for ``GET /metrics``: one read
    of the nodes and their components, however many baselines."""
    baselines = list(session.scalars(select(FirmwareBaseline).order_by(FirmwareBaseline.id)))
    if not baselines:
        return {}
    candidates = _candidates(session)
    counts: dict[tuple[str, str, str], int] = {}
    for baseline in baselines:
        report = _report(baseline, candidates)
        tallied = firmware_drift.tally([n.components for n in report.nodes])
        for component in _expected(baseline):
            for status in firmware_drift.STATUSES:
                counts[(baseline.name, component, status)] = tallied.get((component, status), 0)
    return counts
