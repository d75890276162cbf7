"""Volume connectors and targets: a node's records of the remote volumes it uses.

A connector is one of the node's initiator identities (an IQN, a WWPN...);
a target is a volume the node attaches, in ``boot_index`` order. Both
belong to their node, so a write follows the node's fencing rule as a port
write does (Ironic takes the node's lock for it): a node a conductor holds
answers 409 after the API's short lock wait, and the write compares and
bumps the node's epoch.

Ironic's power rules, which exist because changing what a running machine
is attached to would pull volumes from under it: an update needs the node
powered off; a deletion needs it powered off or in a state where it runs
nothing (``enroll``, ``manageable``, ``adopt failed``); a creation needs
neither. Refusals are 400s naming the action, as Ironic words them.

Which nodes a caller may see and use is the API's policy; the route hands
in the request's ``Caller`` and the rules here ask it at the point Ironic
does. Callers hand in parsed values, and a PATCH as its operations (checked
against the kind's policy, applied here, the result parsed as a create's
body), and render the detached records these functions return.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.db.models import Node, VolumeConnector, VolumeTarget, utcnow
from metalforge.drivers.base import POWER_OFF
from metalforge.errors import NodeLocked, RequestError, bad_request, conflict, not_found
from metalforge.services import fencing, lookup
from metalforge.services.bodies import VolumeConnectorCreate, VolumeTargetCreate, checked
from metalforge.services.caller import Caller, NodeTarget
from metalforge.services.context import Services
from metalforge.services.microversion import Version
from metalforge.services.patching import Operation, Patchable, PatchPolicy, apply

CONNECTOR_TYPES = ("iqn", "ip", "mac", "wwnn", "wwpn", "port", "portgroup")
"""The kinds of initiator identity Ironic documents for a connector's ``type``."""

DELETE_WHILE_POWERED_STATES = frozenset({states.ENROLL, states.MANAGEABLE, states.ADOPT_FAILED})
"""Where a powered-on node's volume records may still be deleted (Ironic's node
deletion states, without ``available``: an available node may be deployed at once)."""

LIMITS = {"type": 32, "connector_id": 255, "volume_type": 64, "volume_id": 36}
"""Column widths: a longer value is a 400 here rather than a database error."""

_INT32 = 2**31

CREATE = "baremetal:volume:create"
"""The rule a caller needs on the node a new connector or target names."""

Record = VolumeConnector | VolumeTarget


@dataclass(frozen=True)
class ConnectorSpec:
    """A connector as the client wants it: a create's body, or a stored one after a patch."""

    node_uuid: str
    type: str
    connector_id: str
    extra: dict[str, Any] = field(default_factory=dict)
    uuid: str | None = None


@dataclass(frozen=True)
class TargetSpec:
    """A target as the client wants it: a create's body, or a stored one after a patch."""

    node_uuid: str
    volume_type: str
    volume_id: str
    boot_index: int
    properties: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    uuid: str | None = None


Spec = ConnectorSpec | TargetSpec


@dataclass(frozen=True)
class Kind:
    """What differs between connectors and targets, for the code they share."""

    model: type[VolumeConnector] | type[VolumeTarget]
    label: str
    """``volume connector``: in messages, and Ironic's action names."""
    param: str
    """The path parameter naming one (Ironic's, for its 400 on a non-UUID)."""
    body: type[VolumeConnectorCreate] | type[VolumeTargetCreate]
    """A create's body, which a patched record is parsed as too."""
    patch: PatchPolicy
    """What a JSON patch may change (Ironic's list, in its order)."""


def _policy(*names: str) -> PatchPolicy:
    return PatchPolicy(dict.fromkeys(names, Patchable()))


CONNECTORS = Kind(
    VolumeConnector,
    "volume connector",
    "connector_uuid",
    VolumeConnectorCreate,
    _policy("connector_id", "extra", "node_uuid", "type"),
)
TARGETS = Kind(
    VolumeTarget,
    "volume target",
    "target_uuid",
    VolumeTargetCreate,
    _policy("boot_index", "extra", "node_uuid", "properties", "volume_id", "volume_type"),
)


def kind_of(spec: Spec) -> Kind:
    return CONNECTORS if isinstance(spec, ConnectorSpec) else TARGETS


def node_uuid_of(value: Any) -> str:
    """A record names its node by UUID only (Ironic's validator, before anything is read)."""
    if not isinstance(value, str) or not lookup.is_uuid(value):
        raise bad_request(f"Expected UUID for node_uuid: {value}")
    return lookup.check_uuid(value)


def spec_from(body: VolumeConnectorCreate | VolumeTargetCreate) -> Spec:
    """A parsed body (a create's, or a patched record's) as the service takes it."""
    if isinstance(body, VolumeConnectorCreate):
        return ConnectorSpec(
            node_uuid=node_uuid_of(body.node_uuid),
            type=body.type,
            connector_id=body.connector_id,
            extra=body.extra or {},
            uuid=body.uuid,
        )
    return TargetSpec(
        node_uuid=node_uuid_of(body.node_uuid),
        volume_type=body.volume_type,
        volume_id=body.volume_id,
        boot_index=body.boot_index,
        properties=body.properties or {},
        extra=body.extra or {},
        uuid=body.uuid,
    )


def not_found_error(kind: Kind, ident: str) -> RequestError:
    return not_found(f"{kind.label.capitalize()} {ident} could not be found.")


def check_ident(kind: Kind, ident: str) -> str:
    """A record is named by UUID only: 400 for anything else, as Ironic."""
    if not lookup.is_uuid(ident):
        raise bad_request(f"Expected UUID for {kind.param}: {ident}")
    return str(uuidlib.UUID(ident))


def find(session: Session, kind: Kind, ident: str) -> Record:
    """The record with its node; 404 otherwise."""
    model = kind.model
    found = session.scalar(select(model).where(model.uuid == check_ident(kind, ident)))
    if not isinstance(found, VolumeConnector | VolumeTarget):
        raise not_found_error(kind, ident)
    return found


def _check(spec: Spec) -> None:
    """Values the columns and Ironic's documented vocabulary accept (400 otherwise)."""
    if isinstance(spec, ConnectorSpec):
        if spec.type not in CONNECTOR_TYPES:
            raise bad_request(
                f"Invalid value for type: {spec.type!r}; it must be one of "
                f"{', '.join(CONNECTOR_TYPES)}"
            )
        texts = {"connector_id": spec.connector_id}
    else:
        if not -_INT32 <= spec.boot_index < _INT32:
            raise bad_request(f"Invalid value for boot_index: {spec.boot_index} is out of range")
        texts = {"volume_type": spec.volume_type, "volume_id": spec.volume_id}
    for name, value in texts.items():
        if len(value) > LIMITS[name]:
            raise bad_request(
                f"Invalid value for {name}: at most {LIMITS[name]} characters are allowed"
            )


def _values(spec: Spec) -> dict[str, Any]:
    """The stored columns ``spec`` sets (not the node nor the UUID)."""
    if isinstance(spec, ConnectorSpec):
        return {"type": spec.type, "connector_id": spec.connector_id, "extra": spec.extra}
    return {
        "volume_type": spec.volume_type,
        "volume_id": spec.volume_id,
        "boot_index": spec.boot_index,
        "properties": spec.properties,
        "extra": spec.extra,
    }


def document(record: Record) -> dict[str, Any]:
    """The record's patchable fields, as a patch sees them."""
    doc: dict[str, Any] = {"node_uuid": record.node.uuid}
    if isinstance(record, VolumeConnector):
        doc.update(type=record.type, connector_id=record.connector_id, extra=record.extra)
    else:
        doc.update(
            volume_type=record.volume_type,
            volume_id=record.volume_id,
            boot_index=record.boot_index,
            properties=record.properties,
            extra=record.extra,
        )
    return doc


def _duplicate(exc: IntegrityError, spec: Spec, record_uuid: str) -> RequestError:
    """The 409 for a write that broke a uniqueness rule, worded as Ironic's."""
    kind = kind_of(spec)
    if "uuid" in str(exc.orig).lower():
        return conflict(f"A {kind.label} with UUID {record_uuid} already exists.")
    if isinstance(spec, ConnectorSpec):
        return conflict(
            f"A volume connector with type {spec.type} and connector ID "
            f"{spec.connector_id} already exists."
        )
    return conflict(
        f"A volume target with boot index '{spec.boot_index}' for the same node already exists."
    )


_node_for_update = lookup.node_for_update


def create(svc: Services, spec: Spec, *, caller: Caller) -> Record:
    """Create the record on its node: 403 before 400 for a node the caller may not see.

    As Ironic, the create rule is checked on the node (on none when it is
    missing or hidden) before a missing node is reported, so that a project
    learns nothing of nodes it may not see; the node's power state does
    not matter.
    """
    kind = kind_of(spec)
    _check(spec)
    record_uuid = lookup.check_uuid(spec.uuid, "uuid") if spec.uuid else str(uuidlib.uuid4())
    try:
        with svc.db.write() as session:
            node = session.scalar(select(Node).where(Node.uuid == spec.node_uuid).with_for_update())
            if node is not None and not caller.sees(node.owner, node.lessee):
                node = None
            caller.require(CREATE, NodeTarget.of(node))
            if node is None:
                raise bad_request(
                    f"Invalid input for field/attribute node_uuid. Value: '{spec.node_uuid}'. "
                )
            fencing.check_unlocked(session, node)
            fencing.update_node(session, node, {})
            record = kind.model(uuid=record_uuid, node_id=node.id, **_values(spec))
            session.add(record)
            session.flush()
            session.refresh(record)
    except IntegrityError as exc:
        raise _duplicate(exc, spec, record_uuid) from None
    return record


def patch(
    svc: Services,
    kind: Kind,
    ident: str,
    version: Version,
    ops: Sequence[Operation],
    *,
    caller: Caller,
) -> Record:
    """Apply the JSON patch ``ops`` (checked against the kind's policy before the record
    is read); the node the record ends on must be powered off (as Ironic).

    A record moves only to a node the caller may see with the same owner;
    anything else reads as an invalid value, whether or not the node exists.
    """
    _check_patch(kind, ops, version)
    spec: Spec | None = None
    try:
        with svc.db.write() as session:
            record = find(session, kind, ident)
            spec = _patched(kind, document(record), ops)
            _check(spec)
            node, target = _lock_nodes(session, record, spec.node_uuid, caller)
            moved = [target] if target is not None else []
            for each in (node, *moved):
                _check_settled(session, each)
            ends_on = target or node
            if ends_on.power_state != POWER_OFF:
                raise _refused(f"{kind.label} update", ends_on)
            for each in (node, *moved):
                fencing.update_node(session, each, {})
            values = _values(spec)
            if target is not None:
                values["node_id"] = target.id
            model = kind.model
            session.execute(
                update(model).where(model.id == record.id).values(**values, updated_at=utcnow())
            )
            session.flush()
            session.refresh(record)
    except IntegrityError as exc:
        assert spec is not None  # only a write can break a uniqueness rule
        raise _duplicate(exc, spec, ident) from None
    return record


def _check_patch(kind: Kind, ops: Sequence[Operation], version: Version) -> None:
    """The kind's policy, operation by operation, and a node named by UUID.

    As Ironic, the field is the path's first segment after its leading ``/``
    exactly (``extra`` or ``//extra`` name none), and a node UUID is checked
    with its operation, so the first faulty operation decides.
    """
    for op in ops:
        segments = op.path.split("/")
        if (segments[1] if len(segments) > 1 else "") != op.root:
            raise kind.patch.refusal(op)
        kind.patch.check([op], version)
        if op.path == "/node_uuid" and op.op != "remove" and not lookup.is_uuid(str(op.value)):
            raise bad_request(f"Expected a UUID for node_uuid, but received {op.value}.")


def _patched(kind: Kind, before: dict[str, Any], ops: Sequence[Operation]) -> Spec:
    """``before`` with ``ops`` applied, parsed as a create's body would be.

    As Ironic: removing ``node_uuid`` leaves the record where it is, and a
    removed or null ``extra``/``properties`` is empty.
    """
    after = apply(before, ops)
    moved = [op.value for op in ops if op.path == "/node_uuid" and op.op != "remove"]
    after["node_uuid"] = lookup.check_uuid(str(moved[-1])) if moved else before["node_uuid"]
    return spec_from(checked(kind.body, after, kind.label))


def remove(svc: Services, kind: Kind, ident: str) -> None:
    """Delete the record where Ironic allows it (see the module's power rules)."""
    with svc.db.write() as session:
        record = find(session, kind, ident)
        node = _node_for_update(session, record.node_id)
        _check_settled(session, node)
        if node.provision_state not in DELETE_WHILE_POWERED_STATES and (
            node.power_state != POWER_OFF
        ):
            raise _refused(f"{kind.label} deletion", node)
        fencing.update_node(session, node, {})
        model = kind.model
        session.execute(delete(model).where(model.id == record.id))


def delete_for_node(session: Session, node_id: int) -> None:
    """Delete a node's volume records, in the transaction that deletes the node."""
    session.execute(delete(VolumeConnector).where(VolumeConnector.node_id == node_id))
    session.execute(delete(VolumeTarget).where(VolumeTarget.node_id == node_id))


def _check_settled(session: Session, node: Node) -> None:
    """Held, or with a power change queued: ``NodeLocked``, which the API waits out briefly.

    The power rules read the node's power state, which a queued change is
    about to make stale. Ironic's conductor holds the node's lock from the
    power request on, so a write right after ``power off`` waits for it
    there too, rather than being judged on the state before.
    """
    fencing.check_unlocked(session, node)
    if node.target_power_state is not None:
        raise NodeLocked(node.uuid, f"(a power change to {node.target_power_state} is pending)")


def _refused(action: str, node: Node) -> RequestError:
    return bad_request(
        f'The requested action "{action}" can not be performed on node "{node.uuid}" '
        f'while it is in state "{node.power_state}".'
    )


def _lock_nodes(
    session: Session, record: Record, wanted: str, caller: Caller
) -> tuple[Node, Node | None]:
    """The record's node and the node a patch moves it to (None: it stays), under row locks.

    Both rows are locked in id order, so two patches moving records in
    opposite directions take turns instead of deadlocking.
    """
    invalid = bad_request(
        f"Unable to apply the requested node_uuid '{wanted}'. Requested value was invalid."
    )
    target_id: int | None = None
    if wanted != record.node.uuid:
        found = lookup.find_node_or_none(session, wanted, (1, 1))
        if found is None or not caller.sees(found.owner, found.lessee):
            raise invalid
        target_id = found.id
    ids = sorted({record.node_id, *([target_id] if target_id is not None else [])})
    rows = session.scalars(
        select(Node)
        .where(Node.id.in_(ids))
        .order_by(Node.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).all()
    by_id = {row.id: row for row in rows}
    node = by_id[record.node_id]
    if target_id is None:
        return node, None
    target = by_id.get(target_id)
    if target is None or target.owner != node.owner:
        raise invalid
    return node, target
