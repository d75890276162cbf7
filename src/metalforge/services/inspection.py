"""Inspection requests: the ramdisk's report, and reading what inspection collected.

The report is checked, its node found and the report stored together with
the ``continue`` work item that processes it, in one transaction: a report
the API accepted is never lost, whichever process dies next. Only a node
whose inspection waits for a report is found; any other lookup is the same
404, so the (unauthenticated) caller learns nothing about other nodes.

A report must come from the machine the inspection booted: it names every
MAC of the node's PXE-enabled ports (what that machine's ramdisk sees on its
NICs). Knowing one MAC of a node, or its UUID, is not enough to rewrite its
properties and ports. A report refused so is answered like any other
lookup that finds nothing, but the node's history and ``last_error`` say
why, so an inspection that then times out is not taken for a silent one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from metalforge import inspection_states as ins
from metalforge import states
from metalforge.conductor import history, inspection_report, node_work
from metalforge.conductor.flows import inspection_events
from metalforge.conductor.flows.spec import FlowRequest
from metalforge.db import introspections
from metalforge.db.engine import now_for
from metalforge.db.introspections import Data, Record
from metalforge.db.models import Introspection, Node, NodeHistory, Port, utcnow
from metalforge.errors import RequestError, bad_request, conflict, not_found
from metalforge.inspection_rules import inspector as inspector_rules
from metalforge.services import fencing, lookup, nodes, provisioning
from metalforge.services.context import Services
from metalforge.services.microversion import NEWEST as LATEST
from metalforge.services.microversion import Version

NOT_FOUND = "The resource could not be found."
BMC_ADDRESS_SUFFIX = "_address"
"""``driver_info`` keys naming a BMC address (``ipmi_address``, ``redfish_address``, ...)."""


def _nobody() -> RequestError:
    return not_found(NOT_FOUND)


def continue_inspection(svc: Services, report: object, node_uuid: str | None) -> Node:
    """Store the ramdisk's report and queue its processing; returns the node."""
    try:
        checked = inspection_report.check_shape(report)
    except inspection_report.ReportRejected as exc:
        raise bad_request(f"Invalid inspection data: {exc}") from None
    macs = inspection_report.macs_of(checked)
    bmcs = inspection_report.bmc_addresses_of(checked)
    if node_uuid is not None:
        lookup.check_uuid(node_uuid, "node_uuid")
    elif not macs and not bmcs:
        raise bad_request("No lookup information provided")
    stored = inspection_report.kept(checked)
    with svc.db.write() as session:
        try:
            node = _find_waiting(session, node_uuid, macs, bmcs)
        except RequestError:
            if node_uuid is not None or not _may_discover(svc, session, macs):
                raise
            _check_discovery_rate(svc, session)
            node = _discover(svc, session, stored, bmcs)
            svc.notify()
            return node
        missing = _pxe_macs_missing(session, node, macs)
        if not missing:
            record = _waiting_record(session, node)
            introspections.store_raw(session, node.uuid, stored)
            svc.queue_for(
                session, node, node_work.INSPECTION, inspection_events.event(ins.CONTINUE, record)
            )
    if missing:
        _record_refusal(svc, node, macs, missing)
        raise _nobody()
    svc.notify()
    return node


def _waiting_record(session: Session, node: Node) -> Record:
    """The node's introspection record, waiting for this report (409 while it starts)."""
    record = introspections.load(session, node.uuid)
    if record is not None and record.state == ins.STARTING:
        raise conflict(f"Node {node.uuid} is still starting its inspection; retry shortly")
    if record is None or record.state != ins.WAITING:
        raise _nobody()
    return record


def _record_refusal(svc: Services, node: Node, macs: list[str], missing: list[str]) -> None:
    """Say on the node why a report found it and was refused: its inspection would
    otherwise time out as if no report had come. Not again while it is the node's last
    error (whoever sends reports may send many, and the history keeps a node's newest
    entries only), and ``last_error`` only while nobody holds the node."""
    reported = ", ".join(sorted(macs)[:16]) or "none"
    message = (
        f"An inspection report was refused: it names the MAC addresses {reported} but not "
        f"{', '.join(sorted(missing))}, of the node's PXE-enabled ports; a report must come "
        "from the machine the inspection booted"
    )
    with svc.db.write() as session:
        current = session.get(Node, node.id)
        if current is None or current.last_error == message:
            return
        fencing.record(session, current, "inspection", message, None, history.WARNING)
        if current.reservation is None:
            # Changed meanwhile (a race lost): the history still says it.
            with contextlib.suppress(RequestError):
                fencing.update_node(session, current, {"last_error": message})


def continue_for_inspector(svc: Services, report: object) -> Node:
    """ironic-inspector's ``/v1/continue``: ``continue_inspection``, refusing as
    ironic-inspector words it (a report that finds no node is its 400 naming what was
    looked up, not Ironic's 404)."""
    if not isinstance(report, dict):
        kind = "NoneType" if report is None else type(report).__name__
        raise bad_request(f"Invalid data: expected a JSON object, got {kind}")
    inventory = report.get("inventory")
    if not isinstance(inventory, dict) or not inventory:
        raise bad_request(
            f"{HOOK_FAILURES}\nPreprocessing hook validate_interfaces: Hardware inventory "
            f"is empty or missing\n{_lookup_error([], [])}"
        )
    try:
        return continue_inspection(svc, report, None)
    except RequestError as exc:
        if exc.status != 404:
            raise
    checked = inspection_report.check_shape(report)
    macs = inspection_report.macs_of(checked)
    bmcs = inspection_report.bmc_addresses_of(checked)
    raise bad_request(f"{HOOK_FAILURES}\n{_lookup_error(bmcs, macs)}")


HOOK_FAILURES = "The following failures happened during running pre-processing hooks:"


def _lookup_error(bmcs: list[str], macs: list[str]) -> str:
    attributes = {"bmc_address": bmcs, "mac": macs}
    return f"Look up error: Could not find a node for attributes {attributes}"


REPORTABLE = (ins.STARTING, ins.WAITING)
"""Records a report may be for: waiting, or still starting (the ramdisk was quicker than
the conductor's commit; the report is refused with a 409, which the agent retries)."""


DISCOVERED_BMC_KEYS = {"ipmi": "ipmi_address", "redfish": "redfish_address"}
"""Where a discovered node of these drivers keeps the BMC address its ramdisk reported."""


def _may_discover(svc: Services, session: Session, macs: list[str]) -> bool:
    """Discovery is on, and the report is from a new machine (none of its MACs is known)."""
    settings = svc.settings.conductor.inspection
    if not settings.discovery or settings.discovery_driver not in svc.drivers.types:
        return False
    if not macs:
        return False
    return not lookup.port_owners(session, macs)


DISCOVERED = "enrolled from an inspection report (discovery)"
"""The history entry a discovered node starts with; the rate limit counts them."""


def _check_discovery_rate(svc: Services, session: Session) -> None:
    """At most ``discovery_max_per_minute`` nodes enrolled by discovery in any minute,
    across the cluster: a report needs no credentials, so without a cap anything on the
    provisioning network could enroll nodes as fast as it can post. Beyond it, 503 with
    ``Retry-After``; the ramdisk reports again."""
    limit = svc.settings.conductor.inspection.discovery_max_per_minute
    since = now_for(session) - dt.timedelta(seconds=60)
    recent = session.scalar(
        select(func.count())
        .select_from(NodeHistory)
        .where(
            NodeHistory.event_type == "inspection",
            NodeHistory.event == DISCOVERED,
            NodeHistory.created_at >= since,
        )
    )
    if (recent or 0) >= limit:
        raise RequestError(
            503,
            f"Discovery enrolled {limit} nodes in the last minute, its limit; report again later",
            headers={"Retry-After": "60"},
        )


def _discover(svc: Services, session: Session, report: dict[str, Any], bmcs: list[str]) -> Node:
    """Enroll the machine that reported as a new node and queue its report's processing."""
    driver = svc.settings.conductor.inspection.discovery_driver
    info: dict[str, Any] = {}
    key = DISCOVERED_BMC_KEYS.get(driver)
    if key is not None and bmcs:
        info[key] = bmcs[0]
    values = nodes.enrolment_values(svc, {"driver": driver, "driver_info": info}, LATEST)
    row = (
        session.connection()
        .execute(nodes.insert_node(("uuid",)), {**values, "provision_updated_at": utcnow()})
        .one()
    )
    history.record(
        session,
        row.id,
        "inspection",
        DISCOVERED,
        state=states.ENROLL,
    )
    node = session.get(Node, row.id)
    assert node is not None
    state = ins.after(None, ins.ENROLL)
    record = Record(node.uuid, state, 1, manage_boot=False, started_at=now_for(session))
    introspections.save(session, record)
    introspections.store_raw(session, node.uuid, {**report, "auto_discovered": True})
    svc.queue_for(
        session, node, node_work.INSPECTION, inspection_events.event(ins.CONTINUE, record)
    )
    return node


def _pxe_macs_missing(session: Session, node: Node, macs: list[str]) -> list[str]:
    """The MACs the node boots from that the report does not name (none known: none)."""
    pxe = session.scalars(
        select(Port.address).where(Port.node_id == node.id, Port.pxe_enabled.is_(True))
    )
    reported = {mac.lower() for mac in macs}
    return [address for address in pxe if address.lower() not in reported]


def _waiting(session: Session, node_ids: list[int]) -> list[Node]:
    query = (
        select(Node)
        .join(Introspection, Introspection.node_uuid == Node.uuid)
        .where(Introspection.state.in_(REPORTABLE))
    )
    if node_ids:
        query = query.where(Node.id.in_(node_ids))
    return list(session.scalars(query))


def _find_waiting(
    session: Session, node_uuid: str | None, macs: list[str], bmcs: list[str]
) -> Node:
    """The one node waiting for this report: by UUID, else its MACs, else its BMC address."""
    owners = lookup.port_owners(session, macs)
    if len(owners) > 1:
        raise _nobody()  # the MACs belong to several nodes: no way to tell which
    if node_uuid is not None:
        node = session.scalar(select(Node).where(Node.uuid == node_uuid))
        if node is None or (owners and owners != {node.id}):
            raise _nobody()
        return node
    if owners:
        found = _waiting(session, list(owners))
        if not found:
            raise _nobody()
        return found[0]
    wanted = set(bmcs)
    matches = [
        node
        for node in _waiting(session, [])
        if any(
            key.endswith(BMC_ADDRESS_SUFFIX) and str(value) in wanted
            for key, value in node.driver_info.items()
        )
    ]
    if len(matches) != 1:
        raise _nobody()
    return matches[0]


def inventory(svc: Services, ident: str, version: Version) -> dict[str, Any]:
    """``GET /v1/nodes/{id}/inventory``: the inventory and plugin data of the last inspection."""
    with svc.db.read() as session:
        node = lookup.find_node(session, ident, version)
        data: Data | None = introspections.load_data(session, node.uuid)
    if data is None or data.inventory is None:
        raise not_found(f"Node inventory record for node {node.uuid} could not be found.")
    return {"inventory": data.inventory, "plugin_data": data.plugin_data or {}}


# -- the ironic-inspector API ---------------------------------------------------
STARTABLE_PROVISION_STATES = (states.MANAGEABLE, states.INSPECT_FAILED, states.INSPECTING)
"""Where ``POST /v1/introspection/{node}`` may start (or repeat the start of) an inspection."""


def _node(session: Session, ident: str, unknown: str | None = None) -> Node:
    """The node by UUID or name; an unknown one is 404 ``unknown`` (ironic-inspector's
    words differ by route), else Ironic's."""
    try:
        return lookup.find_node(session, ident, LATEST)
    except RequestError as exc:
        if exc.status != 404 or unknown is None:
            raise
        raise not_found(unknown) from None


def _not_in_cache(ident: str) -> str:
    return f"Could not find node {ident} in cache"


def _no_data(ident: str, processed: bool) -> RequestError:
    return not_found(f"Introspection data not found for node {ident}, processed={processed}")


NEW_INSPECTION = (ins.STARTING, ins.WAITING)
"""Records of an inspection whose report has not come: ironic-inspector drops a node's
data when a new inspection starts, so its API shows none until the new report."""


def start(svc: Services, ident: str, manage_boot: bool, actor: str | None) -> None:
    """Start inspecting the node: Ironic's ``inspect`` verb, as the inspector API asks it.

    Only from ``manageable`` or ``inspect failed`` (the node moves to
    ``inspecting`` as with ``baremetal node inspect``), or again while it is
    still starting; an ``enroll`` node must be managed first.
    """
    with svc.db.read() as session:
        node = _node(session, ident, f"Node {ident} was not found in Ironic")
        record = introspections.load(session, node.uuid)
    if node.provision_state not in STARTABLE_PROVISION_STATES:
        valid = list(STARTABLE_PROVISION_STATES)
        raise bad_request(
            f'Invalid provision state for introspection: "{node.provision_state}", valid '
            f'states are "{valid}"'
        )
    if node.provision_state == states.INSPECTING:
        if record is not None and record.state == ins.STARTING:
            return  # a start repeated while the node is still starting: it is under way
        raise bad_request(
            f"Invalid state for introspection: {record.state if record else 'not started'}"
        )
    request = FlowRequest(verb=states.INSPECT, target="inspect", manage_boot=manage_boot)
    provisioning.start(svc, node.uuid, LATEST, request, actor)


def _record_of(session: Session, node: Node) -> Record:
    record = introspections.load(session, node.uuid)
    if record is None:
        raise not_found(_not_in_cache(node.uuid))
    return record


def status(svc: Services, ident: str) -> Record:
    with svc.db.read() as session:
        return _record_of(session, _node(session, ident, _not_in_cache(ident)))


def statuses(svc: Services, marker: str | None, limit: int, wanted: list[str]) -> list[Record]:
    """A page of records, newest first; ``marker`` is the last UUID of the previous page."""
    with svc.db.read() as session:
        after = None
        if marker is not None:
            after = introspections.load(session, marker)
            if after is None:
                raise not_found(f"Node {marker} was not found")
        return introspections.page(session, limit=limit, marker=after, states=wanted)


NODE_LOCKED = "Node is locked, please, retry later"
"""ironic-inspector's words for a node it cannot act on now."""


def abort(svc: Services, ident: str, actor: str | None) -> None:
    """Stop the inspection: Ironic's ``abort`` while the node waits for its ramdisk."""
    record = status(svc, ident)
    if record.state not in ins.ACTIVE:
        return  # nothing runs: like ironic-inspector, an abort then changes nothing
    # Waiting for the ramdisk, or for a power-on turn given for later (the node is then
    # unlocked in ``inspect wait``): Ironic's abort stops it. Anything else holds the node.
    waiting_turn = record.state == ins.STARTING and record.power_on_at is not None
    if record.state != ins.WAITING and not waiting_turn:
        raise conflict(NODE_LOCKED)
    try:
        provisioning.start(
            svc, record.node_uuid, LATEST, FlowRequest(verb=states.ABORT, target="abort"), actor
        )
    except RequestError as exc:
        if exc.status not in (400, 409):
            raise
        # Its turn came meanwhile and a conductor has it (or it moved on): as for a node
        # that is locked, the caller retries.
        raise conflict(NODE_LOCKED) from None


def data(svc: Services, ident: str, *, processed: bool) -> dict[str, Any]:
    """What the inspection stored: processed (inventory and what was derived) or as received."""
    with svc.db.read() as session:
        node = _node(
            session, ident, f"Introspection data not found for node {ident}, processed={processed}"
        )
        stored = _data_of(session, node)
    if processed and stored is not None and stored.inventory is not None:
        return inspector_rules.introspection_data(stored.inventory, stored.plugin_data or {})
    if not processed and stored is not None and stored.raw is not None:
        return stored.raw
    raise _no_data(node.uuid, processed)


def _data_of(session: Session, node: Node) -> Data | None:
    """The node's stored data as the inspector API shows it: none while a new inspection
    waits for its report."""
    record = introspections.load(session, node.uuid)
    if record is None or record.state in NEW_INSPECTION:
        return None
    return introspections.load_data(session, node.uuid)


def reapply(svc: Services, ident: str, report: object | None) -> None:
    """Process the stored report again (or ``report``, which replaces it)."""
    if report is not None and not isinstance(report, dict):
        raise bad_request(f"Invalid data: expected a JSON object, got {type(report).__name__}")
    with svc.db.write() as session:
        node = _node(session, ident)
        if report is None:
            stored = _data_of(session, node)
            if stored is None or stored.raw is None:
                raise _no_data(node.uuid, False)
        fencing.check_unlocked(session, node)
        record = _record_of(session, node)
        if not ins.allowed(record.state, ins.REAPPLY):
            if record.state in ins.ACTIVE - {ins.WAITING}:
                raise conflict("Node locked, please, try again later")
            raise bad_request(f"Cannot reapply while the inspection is {record.state}")
        if report is not None:
            try:
                checked = inspection_report.check_shape(report)
            except inspection_report.ReportRejected as exc:
                raise bad_request(f"Invalid introspection data: {exc}") from None
            introspections.store_raw(session, node.uuid, inspection_report.kept(checked))
        svc.queue_for(
            session, node, node_work.INSPECTION, inspection_events.event(ins.REAPPLY, record)
        )
    svc.notify()
