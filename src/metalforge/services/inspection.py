"""Inspection requests: the ramdisk's report, and reading what inspection collected.

The report is checked, its node found and the report stored together with
the ``continue`` work item that processes it, in one transaction: a report
the API accepted is never lost, whichever process dies next. Only a node
whose inspection waits for a report is found; any other lookup is the same
404, so the (unauthenticated) caller learns nothing about other nodes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from metalforge import inspection_states as ins
from metalforge.conductor import inspection_report
from metalforge.conductor.flows import inspection
from metalforge.db import introspections
from metalforge.db.introspections import Data
from metalforge.db.models import Introspection, Node, Port
from metalforge.errors import RequestError, bad_request, not_found
from metalforge.services import lookup
from metalforge.services.context import Services
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
    stored = {key: value for key, value in checked.items() if key != "logs"}
    with svc.db.write() as session:
        node = _find_waiting(session, node_uuid, macs, bmcs)
        record = introspections.load(session, node.uuid)
        if record is None or record.state != ins.WAITING:
            raise _nobody()
        introspections.store_raw(session, node.uuid, stored)
        svc.queue_for(
            session, node, inspection.WORK_KIND, inspection.event_payload(ins.CONTINUE, record)
        )
    svc.notify()
    return node


def _waiting(session: Session, node_ids: list[int]) -> list[Node]:
    query = (
        select(Node)
        .join(Introspection, Introspection.node_uuid == Node.uuid)
        .where(Introspection.state == ins.WAITING)
    )
    if node_ids:
        query = query.where(Node.id.in_(node_ids))
    return list(session.scalars(query))


def _find_waiting(
    session: Session, node_uuid: str | None, macs: list[str], bmcs: list[str]
) -> Node:
    """The one node waiting for this report: by UUID, else its MACs, else its BMC address."""
    owners = (
        sorted(set(session.scalars(select(Port.node_id).where(Port.address.in_(macs)))))
        if macs
        else []
    )
    if len(owners) > 1:
        raise _nobody()  # the MACs belong to several nodes: no way to tell which
    if node_uuid is not None:
        node = session.scalar(select(Node).where(Node.uuid == node_uuid))
        if node is None or (owners and owners != [node.id]):
            raise _nobody()
        return node
    if owners:
        found = _waiting(session, owners)
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
