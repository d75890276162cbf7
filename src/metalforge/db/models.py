"""SQLAlchemy 2 models: the database row is the truth.

Column names follow Ironic's field names so that API views are a plain
mapping. JSON columns are never NULL: an empty dict is the "unset" value, as
the API reports it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, configure_mappers, mapped_column, relationship
from sqlalchemy.orm.instrumentation import manager_of_class

JsonType = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> dt.datetime:
    """Aware UTC now; every timestamp metalforge writes comes from here."""
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timestamps stored as UTC and always returned timezone-aware.

    SQLite has no time zones; without this a value written aware would come
    back naive and compare wrongly with ``utcnow()``.
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime written to the database")
        return value.astimezone(dt.UTC).replace(tzinfo=None)

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC)


def _json_dict() -> Any:
    return mapped_column(JsonType, nullable=False, default=dict)


class Base(DeclarativeBase):
    """Declarative base of every metalforge table."""


class TimestampMixin:
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
    updated_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, onupdate=utcnow)


INTERFACES = (
    "bios",
    "boot",
    "console",
    "deploy",
    "firmware",
    "inspect",
    "management",
    "network",
    "power",
    "raid",
    "rescue",
    "storage",
    "vendor",
)
"""Every driver interface a node names, in Ironic's order of fields."""


class Node(TimestampMixin, Base):
    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    name: Mapped[str | None] = mapped_column(String(255), unique=True)
    driver: Mapped[str] = mapped_column(String(255), nullable=False)
    driver_info: Mapped[dict[str, Any]] = _json_dict()
    driver_internal_info: Mapped[dict[str, Any]] = _json_dict()
    instance_info: Mapped[dict[str, Any]] = _json_dict()
    properties: Mapped[dict[str, Any]] = _json_dict()
    extra: Mapped[dict[str, Any]] = _json_dict()
    instance_uuid: Mapped[str | None] = mapped_column(String(36), unique=True)
    chassis_uuid: Mapped[str | None] = mapped_column(String(36), index=True)
    console_enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    last_error: Mapped[str | None] = mapped_column(Text)
    maintenance: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    maintenance_reason: Mapped[str | None] = mapped_column(Text)
    fault: Mapped[str | None] = mapped_column(String(255))
    power_state: Mapped[str | None] = mapped_column(String(15))
    target_power_state: Mapped[str | None] = mapped_column(String(15))
    provision_state: Mapped[str] = mapped_column(String(15), nullable=False, index=True)
    target_provision_state: Mapped[str | None] = mapped_column(String(15))
    provision_updated_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    flow_started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    """When the node's current (or last) flow began: its duration is measured from here."""
    reservation: Mapped[str | None] = mapped_column(String(255), index=True)
    epoch: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    """Fencing token: bumped by every lock acquisition and every provision transition."""
    conductor_affinity: Mapped[str | None] = mapped_column(String(255))
    clean_step: Mapped[dict[str, Any]] = _json_dict()
    deploy_step: Mapped[dict[str, Any]] = _json_dict()
    service_step: Mapped[dict[str, Any]] = _json_dict()
    raid_config: Mapped[dict[str, Any]] = _json_dict()
    target_raid_config: Mapped[dict[str, Any]] = _json_dict()
    resource_class: Mapped[str | None] = mapped_column(String(80), index=True)
    conductor_group: Mapped[str] = mapped_column(String(255), nullable=False, default="")
    automated_clean: Mapped[bool | None] = mapped_column(Boolean)
    protected: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    protected_reason: Mapped[str | None] = mapped_column(Text)
    owner: Mapped[str | None] = mapped_column(String(255))
    lessee: Mapped[str | None] = mapped_column(String(255))
    description: Mapped[str | None] = mapped_column(Text)
    retired: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    retired_reason: Mapped[str | None] = mapped_column(Text)
    network_data: Mapped[dict[str, Any]] = _json_dict()
    boot_mode: Mapped[str | None] = mapped_column(String(16))
    secure_boot: Mapped[bool | None] = mapped_column(Boolean)
    shard: Mapped[str | None] = mapped_column(String(255))
    parent_node: Mapped[str | None] = mapped_column(String(36))
    disable_power_off: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    instance_name: Mapped[str | None] = mapped_column(String(255))
    health: Mapped[str | None] = mapped_column(String(16))
    """``OK``, ``Warning`` or ``Critical`` as the BMC last rated the hardware (power sync)."""
    flow_request_id: Mapped[str | None] = mapped_column(String(64))
    """The global request id (``req-<uuid>``) of the request that started the node's
    current flow: the agent ramdisk logs with it (``ipa-global-request-id``)."""
    inspection_started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    inspection_finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    bios_interface: Mapped[str | None] = mapped_column(String(255))
    boot_interface: Mapped[str | None] = mapped_column(String(255))
    console_interface: Mapped[str | None] = mapped_column(String(255))
    deploy_interface: Mapped[str | None] = mapped_column(String(255))
    firmware_interface: Mapped[str | None] = mapped_column(String(255))
    inspect_interface: Mapped[str | None] = mapped_column(String(255))
    management_interface: Mapped[str | None] = mapped_column(String(255))
    network_interface: Mapped[str | None] = mapped_column(String(255))
    power_interface: Mapped[str | None] = mapped_column(String(255))
    raid_interface: Mapped[str | None] = mapped_column(String(255))
    rescue_interface: Mapped[str | None] = mapped_column(String(255))
    storage_interface: Mapped[str | None] = mapped_column(String(255))
    vendor_interface: Mapped[str | None] = mapped_column(String(255))
    allocation_id: Mapped[int | None] = mapped_column(
        Integer,
        ForeignKey(
            "allocations.id", ondelete="SET NULL", name="fk_nodes_allocation_id", use_alter=True
        ),
        index=True,
    )
    """The allocation holding the node; its UUID is then also the node's ``instance_uuid``."""

    traits: Mapped[list[NodeTrait]] = relationship(
        back_populates="node",
        cascade="all, delete-orphan",
        lazy="select",
        order_by="NodeTrait.trait",
    )


class NodeTrait(Base):
    __tablename__ = "node_traits"

    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True
    )
    trait: Mapped[str] = mapped_column(String(255), primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False, default=utcnow)

    node: Mapped[Node] = relationship(back_populates="traits")


class BiosSetting(TimestampMixin, Base):
    """One BIOS attribute of a node as its BMC last reported it, with the registry's
    rules for it (type, allowed values, bounds) when the BMC publishes a registry."""

    __tablename__ = "bios_settings"

    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    value: Mapped[str | None] = mapped_column(Text)
    attribute_type: Mapped[str | None] = mapped_column(String(255))
    allowable_values: Mapped[list[str] | None] = mapped_column(JsonType)
    lower_bound: Mapped[int | None] = mapped_column(BigInteger)
    max_length: Mapped[int | None] = mapped_column(Integer)
    min_length: Mapped[int | None] = mapped_column(Integer)
    read_only: Mapped[bool | None] = mapped_column(Boolean)
    reset_required: Mapped[bool | None] = mapped_column(Boolean)
    unique: Mapped[bool | None] = mapped_column(Boolean)
    upper_bound: Mapped[int | None] = mapped_column(BigInteger)


class FirmwareComponent(TimestampMixin, Base):
    """One firmware component of a node (``bios``, ``bmc``...): the version it was first
    seen with, the one it runs, and the last one metalforge flashed onto it."""

    __tablename__ = "firmware_components"

    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True
    )
    component: Mapped[str] = mapped_column(String(255), primary_key=True)
    initial_version: Mapped[str] = mapped_column(String(255), nullable=False)
    current_version: Mapped[str | None] = mapped_column(String(255))
    last_version_flashed: Mapped[str | None] = mapped_column(String(255))
    vendor: Mapped[str | None] = mapped_column(String(255))
    model: Mapped[str | None] = mapped_column(String(255))
    serial_number: Mapped[str | None] = mapped_column(String(255))


class Port(TimestampMixin, Base):
    __tablename__ = "ports"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    address: Mapped[str] = mapped_column(String(18), unique=True, nullable=False)
    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False, index=True
    )
    name: Mapped[str | None] = mapped_column(String(255), unique=True)
    pxe_enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    local_link_connection: Mapped[dict[str, Any]] = _json_dict()
    physical_network: Mapped[str | None] = mapped_column(String(64))
    internal_info: Mapped[dict[str, Any]] = _json_dict()
    extra: Mapped[dict[str, Any]] = _json_dict()
    is_smartnic: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    description: Mapped[str | None] = mapped_column(Text)
    vendor: Mapped[str | None] = mapped_column(String(255))
    category: Mapped[str | None] = mapped_column(String(80))
    portgroup_id: Mapped[int | None] = mapped_column(
        ForeignKey("portgroups.id", name="fk_ports_portgroup_id"), index=True
    )
    available_for_dynamic_portgroup: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=True, server_default=true()
    )
    """Whether a port may be bonded into a group formed for a VIF (metalforge forms none)."""
    """The port group the port is a member of; a group with members cannot be deleted."""

    node: Mapped[Node] = relationship(lazy="joined")
    portgroup: Mapped[Portgroup | None] = relationship(lazy="joined")


class Portgroup(TimestampMixin, Base):
    """Ports of one node bonded together (a LAG); its address is the bond's MAC."""

    __tablename__ = "portgroups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    name: Mapped[str | None] = mapped_column(String(255), unique=True)
    address: Mapped[str | None] = mapped_column(String(18), unique=True)
    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False, index=True
    )
    extra: Mapped[dict[str, Any]] = _json_dict()
    internal_info: Mapped[dict[str, Any]] = _json_dict()
    standalone_ports_supported: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    mode: Mapped[str | None] = mapped_column(String(255))
    properties: Mapped[dict[str, Any]] = _json_dict()
    physical_network: Mapped[str | None] = mapped_column(String(64))
    category: Mapped[str | None] = mapped_column(String(80))

    node: Mapped[Node] = relationship(lazy="joined")


class Conductor(TimestampMixin, Base):
    """A live (or once live) conductor; ``updated_at`` is its heartbeat."""

    __tablename__ = "conductors"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    hostname: Mapped[str] = mapped_column(String(255), unique=True, nullable=False)
    conductor_group: Mapped[str] = mapped_column(String(255), nullable=False, default="")
    drivers: Mapped[list[str]] = mapped_column(JsonType, nullable=False, default=list)
    online: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    heartbeat_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
    run_id: Mapped[str | None] = mapped_column(String(64))
    """The running process that holds the hostname: two processes never share one."""


class WorkItem(Base):
    """A durable request for a conductor to act on a node.

    Written in the same transaction as the intent that needs it; claimed with
    a lease so that a crashed worker's item is retried (at-least-once).
    """

    __tablename__ = "work_items"
    __table_args__ = (
        Index("ix_work_items_ready", "state", "not_before"),
        UniqueConstraint("dedupe_key", name="uq_work_items_dedupe_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(64), nullable=False)
    node_id: Mapped[int | None] = mapped_column(Integer, index=True)
    payload: Mapped[dict[str, Any]] = _json_dict()
    state: Mapped[str] = mapped_column(String(16), nullable=False, default="pending")
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    failures: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    """Attempts that ended with the worker gone or an unexpected error; bounded."""
    preferred_owner: Mapped[str | None] = mapped_column(String(255))
    """Conductor the hash ring chose when the item was queued."""
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    not_before: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
    dedupe_key: Mapped[str | None] = mapped_column(String(255))
    """While set, at most one unfinished item carries this key (cleared when done)."""
    rerun: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    """Set when a duplicate arrives while the item runs: run it once more afterwards."""
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False, default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    duration: Mapped[float | None] = mapped_column(Float)


class Chassis(TimestampMixin, Base):
    """A group of nodes an operator names (a rack, an enclosure); nodes refer to it by UUID.

    ``nodes.chassis_uuid`` holds the UUID rather than a foreign key, so that
    adding chassis did not rebuild the nodes table (and its event triggers)
    on SQLite; ``services.chassis`` keeps the reference true instead: a node
    is given a chassis and a chassis is deleted only under the chassis' row
    lock, and a chassis with nodes is never deleted.
    """

    __tablename__ = "chassis"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    description: Mapped[str | None] = mapped_column(String(255))
    extra: Mapped[dict[str, Any]] = _json_dict()


class VolumeConnector(TimestampMixin, Base):
    """How a node reaches remote volumes: one of its initiator identities (an IQN, a WWPN...).

    A ``(type, connector_id)`` pair names one initiator in the whole
    deployment, so it is unique across nodes (as Ironic's).
    """

    __tablename__ = "volume_connectors"
    __table_args__ = (
        UniqueConstraint("type", "connector_id", name="uq_volume_connectors_type_connector_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False, index=True
    )
    type: Mapped[str] = mapped_column(String(32), nullable=False)
    connector_id: Mapped[str] = mapped_column(String(255), nullable=False)
    extra: Mapped[dict[str, Any]] = _json_dict()

    node: Mapped[Node] = relationship(lazy="joined")


class VolumeTarget(TimestampMixin, Base):
    """A remote volume a node boots from or attaches, in ``boot_index`` order (unique per node)."""

    __tablename__ = "volume_targets"
    __table_args__ = (
        UniqueConstraint("node_id", "boot_index", name="uq_volume_targets_node_id_boot_index"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False, index=True
    )
    volume_type: Mapped[str] = mapped_column(String(64), nullable=False)
    volume_id: Mapped[str] = mapped_column(String(36), nullable=False)
    boot_index: Mapped[int] = mapped_column(Integer, nullable=False)
    properties: Mapped[dict[str, Any]] = _json_dict()
    extra: Mapped[dict[str, Any]] = _json_dict()

    node: Mapped[Node] = relationship(lazy="joined")


class InspectionRule(TimestampMixin, Base):
    """An operator's inspection rule (``metalforge.inspection_rules``), stored as given.

    ``conditions`` and ``actions`` are kept as the API was given them (arguments
    listed or named), checked whole by ``inspection_rules.grammar`` before they
    are written, and read back through it.
    """

    __tablename__ = "inspection_rules"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    description: Mapped[str | None] = mapped_column(String(255))
    priority: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    phase: Mapped[str] = mapped_column(String(16), nullable=False, default="main")
    sensitive: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    conditions: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, nullable=False)
    actions: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, nullable=False)
    dialect: Mapped[str] = mapped_column(String(16), nullable=False, default="ironic")
    """``ironic`` (``/v1/inspection_rules``) or ``inspector`` (port 5050's ``/v1/rules``):
    the format ``conditions`` and ``actions`` are in."""
    scope: Mapped[str | None] = mapped_column(String(255))
    """An inspector rule's scope (see ``inspection_rules.inspector``)."""


class FirmwareBaseline(TimestampMixin, Base):
    """The firmware versions one vendor's and model's machines should run
    (``services.firmware_baselines``; drift is worked out by ``firmware_drift``)."""

    __tablename__ = "firmware_baselines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    name: Mapped[str] = mapped_column(String(255), unique=True, nullable=False)
    description: Mapped[str | None] = mapped_column(String(255))
    vendor: Mapped[str | None] = mapped_column(String(255))
    model: Mapped[str | None] = mapped_column(String(255))
    components: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, nullable=False)
    """``[{"component", "version", "url", "wait"}]``, checked whole before it is stored."""


class Rollout(TimestampMixin, Base):
    """One change rolled out over many nodes in waves (``services.rollouts``).

    Its progress is its rows: the rollout's state and each node's
    (``RolloutNode``), advanced by one conductor at a time (the ``rollouts``
    singleton role), so the death of any process loses nothing.
    """

    __tablename__ = "rollouts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    name: Mapped[str | None] = mapped_column(String(255), unique=True)
    state: Mapped[str] = mapped_column(String(15), nullable=False, index=True)
    action: Mapped[dict[str, Any]] = mapped_column(JsonType, nullable=False)
    """What runs on each node: ``{"kind": "runbook"|"baseline"|"provide"|"inspect", ...}``."""
    selector: Mapped[dict[str, Any]] = mapped_column(JsonType, nullable=False)
    """The selector as given (the nodes it matched are the rollout's rows)."""
    canary: Mapped[int] = mapped_column(Integer, nullable=False)
    batch: Mapped[int] = mapped_column(Integer, nullable=False)
    max_failures: Mapped[int] = mapped_column(Integer, nullable=False)
    canary_approved: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    """Resumed after the canary: the waves may start."""
    window_start: Mapped[int | None] = mapped_column(Integer)
    window_end: Mapped[int | None] = mapped_column(Integer)
    """Hours (UTC, 0-23) between which nodes may start; none: at any time."""
    owner: Mapped[str | None] = mapped_column(String(255), index=True)
    """The project that created it, over nodes it owns (none: the system scope's)."""
    created_by: Mapped[str | None] = mapped_column(String(255))
    paused_reason: Mapped[str | None] = mapped_column(String(255))
    last_error: Mapped[str | None] = mapped_column(Text)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class RolloutNode(Base):
    """One node of a rollout: the request its flow is started with, and how it ended.

    ``claim`` is the node's id while the rollout may still act on the node, and
    unique: the database itself refuses one node in two live rollouts.
    """

    __tablename__ = "rollout_nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rollout_id: Mapped[int] = mapped_column(
        ForeignKey("rollouts.id", ondelete="CASCADE"), nullable=False, index=True
    )
    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False, index=True
    )
    node_uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    position: Mapped[int] = mapped_column(Integer, nullable=False)
    wave: Mapped[int] = mapped_column(Integer, nullable=False)
    """0: the canary; then 1, 2... of at most ``batch`` nodes each."""
    state: Mapped[str] = mapped_column(String(15), nullable=False)
    verbs: Mapped[str] = mapped_column(String(64), nullable=False)
    """The flows the node goes through, in turn, comma-separated (``manage,clean,provide``
    for an available node's firmware); empty when it is skipped."""
    stage: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    """Which of ``verbs`` the node is at."""
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, nullable=False)
    """The steps of its ``clean`` or ``service`` flow."""
    disable_ramdisk: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    outcome: Mapped[str | None] = mapped_column(String(15))
    """The node's provision state when its flow ended."""
    error: Mapped[str | None] = mapped_column(Text)
    claim: Mapped[int | None] = mapped_column(Integer, unique=True)

    @property
    def verb(self) -> str:
        """The flow the node is at (none: skipped)."""
        plan = self.verbs.split(",") if self.verbs else []
        return plan[self.stage] if self.stage < len(plan) else ""

    @property
    def last_stage(self) -> bool:
        return self.stage >= len(self.verbs.split(",")) - 1


class BmcBreaker(Base):
    """A BMC whose circuit breaker a process opened (``drivers.bmc_guard``): its row is
    written when the breaker opens and deleted when it closes, so ``GET /metrics`` of any
    process shows which BMCs are being spared, by whom, until when."""

    __tablename__ = "bmc_breakers"

    address: Mapped[str] = mapped_column(String(255), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255), primary_key=True)
    """The process (a conductor's hostname, or ``api``) that refuses calls to it."""
    protocol: Mapped[str] = mapped_column(String(16), nullable=False)
    failures: Mapped[int] = mapped_column(Integer, nullable=False)
    open_until: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class DeployTemplate(TimestampMixin, Base):
    """Named deploy steps, selected for a deployment by a trait of the same name."""

    __tablename__ = "deploy_templates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    name: Mapped[str] = mapped_column(String(255), unique=True, nullable=False)
    extra: Mapped[dict[str, Any]] = _json_dict()

    steps: Mapped[list[DeployTemplateStep]] = relationship(
        back_populates="template",
        cascade="all, delete-orphan",
        passive_deletes=True,
        lazy="selectin",
        order_by="DeployTemplateStep.id",
    )


class DeployTemplateStep(Base):
    """One step of a deploy template; the order of ``id`` is the order given."""

    __tablename__ = "deploy_template_steps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    deploy_template_id: Mapped[int] = mapped_column(
        ForeignKey("deploy_templates.id", ondelete="CASCADE"), nullable=False, index=True
    )
    interface: Mapped[str] = mapped_column(String(255), nullable=False)
    step: Mapped[str] = mapped_column(String(255), nullable=False)
    args: Mapped[dict[str, Any]] = _json_dict()
    priority: Mapped[int] = mapped_column(Integer, nullable=False)

    template: Mapped[DeployTemplate] = relationship(back_populates="steps")


class Runbook(TimestampMixin, Base):
    """Named clean or service steps an operator may run on nodes that carry one of its traits.

    ``owner`` (a project) or ``public`` decide who may use it; a public runbook has no
    owner. Below API 1.112 a node is eligible when one of its traits is the runbook's
    name; from 1.112 when it has one of the runbook's own ``traits``.
    """

    __tablename__ = "runbooks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    name: Mapped[str] = mapped_column(String(255), unique=True, nullable=False)
    description: Mapped[str | None] = mapped_column(String(255))
    owner: Mapped[str | None] = mapped_column(String(255), index=True)
    public: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    disable_ramdisk: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    extra: Mapped[dict[str, Any]] = _json_dict()

    steps: Mapped[list[RunbookStep]] = relationship(
        back_populates="runbook",
        cascade="all, delete-orphan",
        passive_deletes=True,
        lazy="selectin",
        order_by="RunbookStep.id",
    )
    traits: Mapped[list[RunbookTrait]] = relationship(
        cascade="all, delete-orphan",
        passive_deletes=True,
        lazy="selectin",
        order_by="RunbookTrait.trait",
    )


class RunbookStep(Base):
    """One step of a runbook; ``id`` keeps the order the steps were given in."""

    __tablename__ = "runbook_steps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    runbook_id: Mapped[int] = mapped_column(
        ForeignKey("runbooks.id", ondelete="CASCADE"), nullable=False, index=True
    )
    interface: Mapped[str] = mapped_column(String(255), nullable=False)
    step: Mapped[str] = mapped_column(String(255), nullable=False)
    args: Mapped[dict[str, Any]] = _json_dict()
    order: Mapped[int] = mapped_column(Integer, nullable=False)

    runbook: Mapped[Runbook] = relationship(back_populates="steps")


class RunbookTrait(Base):
    """A trait that makes a node eligible for a runbook (API 1.112)."""

    __tablename__ = "runbook_traits"

    runbook_id: Mapped[int] = mapped_column(
        ForeignKey("runbooks.id", ondelete="CASCADE"), primary_key=True
    )
    trait: Mapped[str] = mapped_column(String(255), primary_key=True, index=True)


class NodeHistory(Base):
    """One event in a node's life: a transition, an error, a step started or ended."""

    __tablename__ = "node_history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), nullable=False, index=True
    )
    conductor: Mapped[str | None] = mapped_column(String(255))
    event_type: Mapped[str] = mapped_column(String(255), nullable=False)
    event: Mapped[str] = mapped_column(Text, nullable=False)
    severity: Mapped[str] = mapped_column(String(16), nullable=False, default="INFO")
    user: Mapped[str | None] = mapped_column(String(255))
    state: Mapped[str | None] = mapped_column(String(15))
    """The node's provision state after the event."""
    target_provision_state: Mapped[str | None] = mapped_column(String(15))
    duration_seconds: Mapped[float | None] = mapped_column(Float)
    """How long the recorded operation took (steps, flows), when it has a duration."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False, default=utcnow)


class Allocation(TimestampMixin, Base):
    """A request to reserve one available node matching a resource class and traits.

    ``node_id`` is unique: the database itself refuses a node in two
    allocations. ``conductor_affinity`` is the conductor processing it; every
    conductor write is conditional on it, so two conductors never both do.
    """

    __tablename__ = "allocations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    name: Mapped[str | None] = mapped_column(String(255), unique=True)
    node_id: Mapped[int | None] = mapped_column(
        Integer,
        ForeignKey("nodes.id", ondelete="CASCADE", name="fk_allocations_node_id"),
        unique=True,
    )
    resource_class: Mapped[str | None] = mapped_column(String(80))
    candidate_nodes: Mapped[list[str]] = mapped_column(JsonType, nullable=False, default=list)
    state: Mapped[str] = mapped_column(String(15), nullable=False, index=True)
    last_error: Mapped[str | None] = mapped_column(Text)
    conductor_affinity: Mapped[str | None] = mapped_column(String(255), index=True)
    owner: Mapped[str | None] = mapped_column(String(255))
    extra: Mapped[dict[str, Any]] = _json_dict()

    traits: Mapped[list[AllocationTrait]] = relationship(
        cascade="all, delete-orphan",
        passive_deletes=True,
        lazy="selectin",
        order_by="AllocationTrait.trait",
    )


class AllocationTrait(Base):
    """A trait the allocated node must have."""

    __tablename__ = "allocation_traits"

    allocation_id: Mapped[int] = mapped_column(
        ForeignKey("allocations.id", ondelete="CASCADE"), primary_key=True
    )
    trait: Mapped[str] = mapped_column(String(255), primary_key=True)


class AgentSession(Base):
    """The ramdisk agent the node runs now: its token, address and last heartbeat.

    Kept apart from the node row because the API writes it (lookup issues the
    token, heartbeats record the agent's address) while a conductor may hold
    the node's reservation and save its own copy of the node: in the node's
    JSON columns one of the two writes would be lost.
    """

    __tablename__ = "agent_sessions"

    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True
    )
    booted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    """When a conductor last booted the ramdisk; heartbeats before it are from an older agent."""
    token: Mapped[str | None] = mapped_column(String(128))
    """The agent token, issued once per ramdisk boot by the first lookup."""
    token_issued_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    agent_url: Mapped[str | None] = mapped_column(String(255))
    """The ``callback_url`` of the first heartbeat; later heartbeats must match it."""
    agent_version: Mapped[str | None] = mapped_column(String(64))
    verify_ca: Mapped[str | None] = mapped_column(Text)
    """PEM certificate the agent sent for auto-TLS; its HTTPS API is verified against it."""
    last_heartbeat_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    agent_status: Mapped[str | None] = mapped_column(String(16))
    agent_status_message: Mapped[str | None] = mapped_column(Text)
    kept_since: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    """A flow ended and left the agent running for the next one (fast track), at this
    time; ``None`` while a flow uses the agent or no agent runs."""


class FlowProgressRow(Base):
    """How far the node's current step flow (cleaning, deployment, servicing) has got.

    Kept apart from the node's ``driver_internal_info``, which drivers own:
    the conductor reads and writes it as one typed record
    (``db.flow_progress.FlowProgress``) under the node's reservation, and a
    new flow replaces it whole, so nothing an earlier flow left is read by
    the next one. The API shows it as Ironic's ``<kind>_steps`` and
    ``<kind>_step_index`` keys of ``driver_internal_info``.
    """

    __tablename__ = "flow_progress"

    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True
    )
    flow: Mapped[str | None] = mapped_column(String(16))
    """``clean``, ``deploy`` or ``service``: the kind of steps the plan holds."""
    planned: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    """The flow has built its plan (which may hold no steps)."""
    plan: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, nullable=False, default=list)
    """The steps in the order they run."""
    step_index: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    """The step running or next to run: saved before it starts, so a takeover reruns it."""
    requested: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, nullable=False, default=list)
    """The steps the request asked for, until the flow plans with them."""
    ramdisk_prepared: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    ramdisk_booting_since: Mapped[float | None] = mapped_column(Float)
    without_ramdisk: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    step_started_at: Mapped[float | None] = mapped_column(Float)
    step_heartbeat_at: Mapped[float | None] = mapped_column(Float)
    completes_after: Mapped[str | None] = mapped_column(String(255))
    """The step after which a provisional plan is completed with the agent's steps."""


class Introspection(Base):
    """A node's inspection: where it stands in the introspection state machine.

    Keyed by the node's UUID and deliberately without a foreign key: the
    workers that process ramdisk reports write here, and a node's deletion
    must never wait on (or fail because of) them. What a deleted node leaves
    is removed by the inventory sync, a singleton periodic task.
    ``generation`` counts the inspections started on the node; work queued
    for one inspection carries it, so a late event never touches the next.
    """

    __tablename__ = "introspections"

    node_uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    state: Mapped[str] = mapped_column(String(16), nullable=False, index=True)
    generation: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    manage_boot: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    power_on_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    """The power-on turn the inspection was given by the throttle, while it waits for it."""


class InspectionData(Base):
    """What inspecting a node collected: the inventory, plugin data and the raw report.

    ``inventory`` and ``plugin_data`` are what ``GET /v1/nodes/{id}/inventory``
    returns, kept until the node is deleted; ``raw`` is the ramdisk's report
    as received (without its logs), kept for reprocessing until it expires
    (``raw_received_at``). Once processed, a report is folded: ``raw`` is
    emptied and rebuilt from the processed data (``db.introspections``).
    """

    __tablename__ = "inspection_data"

    node_uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    inventory: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    plugin_data: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    processed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    raw: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    raw_received_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, index=True)
    raw_folded: Mapped[list[str] | None] = mapped_column(JsonType)
    """Set when ``raw`` was folded into the processed data: the derived keys the report
    itself carried (None: not folded)."""


class Throttle(Base):
    """A cluster-wide rate limit: the earliest moment the next caller may act.

    Each caller takes the next slot in one short write (``db.throttle``) and
    then waits for it outside any transaction, so N workers together never
    act faster than the interval allows, and none holds a lock while it waits.
    """

    __tablename__ = "throttles"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    next_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class LeaderLease(Base):
    """Who leads a singleton role (a periodic task only one process may run), until when.

    ``epoch`` grows each time the role changes hands; a holder keeps the role
    by renewing ``expires_at`` and loses it to any member once it expires, or
    at once when the holder is no live conductor.
    """

    __tablename__ = "leader_leases"

    role: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(255))
    epoch: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class PxeFilterHost(Base):
    """What one PXE filter host last did: the operator's view of every host's filter.

    ``mode`` is ``passing`` (the leader: it answers the nodes being inspected),
    ``blocking`` (another host, or one that failed and answers nobody) or
    ``stopped``; ``error`` is the last failure, cleared by the next good sync.
    """

    __tablename__ = "pxe_filter_hosts"

    hostname: Mapped[str] = mapped_column(String(255), primary_key=True)
    driver: Mapped[str] = mapped_column(String(16), nullable=False)
    mode: Mapped[str] = mapped_column(String(16), nullable=False)
    allowed: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    denied: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    unknown_allowed: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    synced_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


STEP_COLUMNS: tuple[str, ...] = tuple(
    column.key
    for column in Node.__table__.columns
    if column.key.endswith("_step") and isinstance(column.type, JSON)
)
"""The node's running-step fields, one per step kind (``clean_step``...), in the table's
order: what shows a flow's step, so every reader (the view's masking, the dashboard)
finds a new kind's column without a list of its own."""


def node_from_row(values: Mapping[str, Any]) -> Node:
    """A transient ``Node`` holding ``values`` (every column, as read with Core).

    ``Node(**values)`` sets seventy attributes through the ORM's change events,
    which costs forty times more; the conductor builds one per node it locks
    and the provision API one per request. The object belongs to no session:
    changing it writes nothing, and later assignments behave as usual.
    """
    # Building an instance this way skips the constructor, which is what
    # configures the mappers on first use (a fresh API process may build a node
    # here before any query): do it here, a no-op once done.
    configure_mappers()
    node: Node = manager_of_class(Node).new_instance()
    node.__dict__.update(values)
    return node


class StepRun(Base):
    """How long one step took on one hardware type: what estimates of time left are made of.

    Written by the conductor when a step finishes, in the transaction that
    records it; only the newest ``db.step_runs.KEPT`` runs of each step and
    hardware type are used, and a conductor's minute upkeep drops the rest,
    so the table stays small however long the service runs.
    """

    __tablename__ = "step_runs"
    __table_args__ = (Index("ix_step_runs_key", "hardware_type", "interface", "step", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    hardware_type: Mapped[str] = mapped_column(String(255), nullable=False)
    interface: Mapped[str] = mapped_column(String(64), nullable=False)
    step: Mapped[str] = mapped_column(String(255), nullable=False)
    seconds: Mapped[float] = mapped_column(Float, nullable=False)
    finished_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class NodeEvent(Base):
    """ "This node changed": one row per write of a field an operator watches.

    Database triggers (migration 0012) add the rows in the writing
    transaction, whoever wrote (a conductor, an API process, an operator's
    SQL), so the event stream (``GET /v1/events``) misses nothing that
    committed and shows nothing that rolled back. ``at`` is epoch seconds on
    the database's clock; rows older than the stream's retention are pruned.
    """

    __tablename__ = "node_events"
    # AUTOINCREMENT: SQLite would otherwise hand out ids again once old rows are pruned,
    # and clients resume by id.
    __table_args__ = (Index("ix_node_events_at", "at"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    node_uuid: Mapped[str] = mapped_column(String(36), nullable=False)
    deleted: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    at: Mapped[float] = mapped_column(Float, nullable=False)


class MetricTotal(Base):
    """One running total of an event counter or histogram, summed over every process.

    Each process counts in memory and adds what it counted here every few
    seconds (``db.tallies``), so totals are the cluster's, outlive restarts
    and cost one small transaction per process per interval rather than a
    write per event. ``labels`` is the label values joined by ``\\x1f``;
    ``part`` is ``""`` for a counter, or a histogram's bucket bound
    (``"0.5"``, ``"+Inf"``), ``"sum"`` or ``"count"``.
    """

    __tablename__ = "metric_totals"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    labels: Mapped[str] = mapped_column(String(512), primary_key=True)
    part: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
