"""Power state sync against the IPMI simulator (drift, force, BMC errors) and fake hardware."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import select, update

from metalforge import states
from metalforge.conductor import power_sync
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.power_sync import ERROR_KEY, SyncReport, sync_power_states
from metalforge.config import ConductorSettings
from metalforge.db.engine import Database
from metalforge.db.models import Conductor, Node, NodeHistory, utcnow
from metalforge.drivers.base import POWER_OFF, POWER_ON, DriverTask
from metalforge.drivers.catalog import REDFISH
from metalforge.drivers.fake import FAKE_HARDWARE, FakePower
from metalforge.drivers.hardware import DriverRegistry, HardwareType
from metalforge_lab.ipmi_bmc import BmcProcess
from tests.support.api import LATEST, create_node, get_node, provision, wait_for_state
from tests.support.ipmi import IPMI_HARDWARE, driver_info, ipmitool, power_status, start_bmcs
from tests.support.stack import start_stack, test_settings
from tests.support.stalling import stalling

pytestmark = pytest.mark.timeout(60)

_serial = itertools.count(1)


class DriftingPower(FakePower):
    """Fake power whose hardware is always on, and which runs ``during_read`` while reading."""

    during_read: ClassVar[Callable[[Node], None] | None] = None

    def get_power_state(self, task: DriverTask) -> str:
        if DriftingPower.during_read is not None:
            DriftingPower.during_read(task.node)
        return POWER_ON


DRIFTING = HardwareType(
    name="drifting", supported={**FAKE_HARDWARE.supported, "power": (DriftingPower,)}
)
REGISTRY = DriverRegistry([FAKE_HARDWARE, IPMI_HARDWARE, DRIFTING])


def _register(db: Database, host: str, drivers: list[str] | None = None) -> None:
    """A live conductor; ``drivers`` decides which hash rings it is on (default: all)."""
    with db.write() as session:
        session.add(
            Conductor(
                hostname=host, drivers=drivers or sorted(REGISTRY.types), heartbeat_at=utcnow()
            )
        )


def _context(db: Database, host: str = "c1") -> ConductorContext:
    _register(db, host)
    return ConductorContext(
        hostname=host,
        db=db,
        drivers=REGISTRY,
        settings=ConductorSettings(hostname=host, heartbeat_timeout=30),
    )


def _node(db: Database, driver: str = "fake-hardware", **fields: Any) -> int:
    values: dict[str, Any] = {
        "uuid": str(uuid.uuid4()),
        "name": f"node-{next(_serial)}",
        "driver": driver,
        "provision_state": states.AVAILABLE,
        "power_state": POWER_OFF,
        "epoch": 0,
        **fields,
    }
    with db.write() as session:
        node = Node(**values)
        session.add(node)
        session.flush()
        return node.id


def _get(db: Database, node_id: int) -> Node:
    with db.read() as session:
        node = session.get(Node, node_id)
        assert node is not None
        session.expunge(node)
        return node


def _history(db: Database, node_id: int) -> list[tuple[str, str]]:
    with db.read() as session:
        rows = session.execute(
            select(NodeHistory.severity, NodeHistory.event)
            .where(NodeHistory.node_id == node_id, NodeHistory.event_type == "power_sync")
            .order_by(NodeHistory.id)
        ).all()
    return [(severity, event) for severity, event in rows]


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


@pytest.fixture
def bmcs(tmp_path: Path) -> Iterator[BmcProcess]:
    yield from start_bmcs(tmp_path, count=3)


def test_drift_updates_the_recorded_state_and_is_recorded(db: Database, bmcs: BmcProcess) -> None:
    ctx = _context(db)
    turned_on, steady, turned_off = (
        _node(db, "ipmi", driver_info=driver_info(port), power_state=recorded)
        for port, recorded in zip(bmcs.ports, (POWER_OFF, POWER_OFF, POWER_ON), strict=True)
    )
    ipmitool(bmcs.ports[0], "power", "on")  # behind metalforge's back

    report = sync_power_states(ctx, force=False)

    assert report == SyncReport(checked=3, drifted=2, corrected=2)
    assert _get(db, turned_on).power_state == POWER_ON
    assert _get(db, turned_off).power_state == POWER_OFF
    assert _history(db, turned_on) == [
        (
            "WARNING",
            "recorded power state power off, the hardware reports power on; recorded state updated",
        )
    ]
    assert _history(db, steady) == []
    assert all(_get(db, n).reservation is None for n in (turned_on, steady, turned_off))
    assert power_status(bmcs.ports[0]) == "on"


def test_force_sets_the_hardware_back(db: Database, bmcs: BmcProcess) -> None:
    ctx = _context(db)
    node_id = _node(db, "ipmi", driver_info=driver_info(bmcs.ports[0]))
    ipmitool(bmcs.ports[0], "power", "on")

    report = sync_power_states(ctx, force=True)

    assert report == SyncReport(checked=1, drifted=1, corrected=1)
    assert power_status(bmcs.ports[0]) == "off"
    assert _get(db, node_id).power_state == POWER_OFF
    assert _history(db, node_id) == [
        (
            "WARNING",
            "recorded power state power off, the hardware reports power on; "
            "switched it back to power off (forced)",
        )
    ]


def test_an_unreadable_bmc_is_recorded_once_per_error(db: Database, bmcs: BmcProcess) -> None:
    ctx = _context(db)
    good = driver_info(bmcs.ports[0])
    node_id = _node(db, "ipmi", driver_info={**good, "ipmi_password": "wrong"})

    for _ in range(2):
        assert sync_power_states(ctx) == SyncReport(checked=1, failed=1)
    [(severity, event)] = _history(db, node_id)
    assert severity == "WARNING"
    assert event.startswith("cannot read the power state: IPMI BMC at 127.0.0.1:")
    assert "refused the credentials" in _get(db, node_id).driver_internal_info[ERROR_KEY]

    with db.write() as session:
        session.execute(update(Node).where(Node.id == node_id).values(driver_info=good))
    assert sync_power_states(ctx) == SyncReport(checked=1)
    assert _history(db, node_id)[-1] == ("INFO", "the power state can be read again")
    assert ERROR_KEY not in _get(db, node_id).driver_internal_info
    assert sync_power_states(ctx) == SyncReport(checked=1)
    assert len(_history(db, node_id)) == 2


def test_only_idle_nodes_are_checked(db: Database) -> None:
    ctx = _context(db)
    _register(db, "busy-peer", drivers=["fake-hardware"])
    _node(db, "drifting", maintenance=True)
    _node(db, "drifting", reservation="busy-peer")
    _node(db, "drifting", provision_state=states.DEPLOYING, target_provision_state="active")
    _node(db, "drifting", provision_state=states.CLEAN_WAIT, target_provision_state="available")
    _node(db, "drifting", target_power_state=POWER_ON)
    _node(db, "drifting", provision_state=states.ENROLL)
    idle = [
        _node(db, "drifting"),
        _node(db, "drifting", provision_state=states.ACTIVE),
        _node(db, "drifting", provision_state=states.DEPLOY_FAILED),
    ]

    report = sync_power_states(ctx)

    assert report == SyncReport(checked=3, drifted=3, corrected=3)
    assert {n for n in idle if _get(db, n).power_state == POWER_ON} == set(idle)


def test_each_node_is_checked_by_the_conductor_the_ring_gives_it(db: Database) -> None:
    one, two = _context(db, "c1"), _context(db, "c2")
    nodes = [_node(db) for _ in range(20)]
    first, second = sync_power_states(one), sync_power_states(two)
    assert first.checked + second.checked == len(nodes)
    assert 0 < first.checked < len(nodes)


def test_a_share_larger_than_one_read_is_checked_whole(db: Database) -> None:
    """A conductor's share is read in chunks of whole rows: none is lost between them."""
    one, two = _context(db, "c1"), _context(db, "c2")
    count = 3 * power_sync._ROWS_PER_READ
    nodes = [_node(db, "drifting") for _ in range(count)]
    first, second = sync_power_states(one), sync_power_states(two)
    assert first.checked + second.checked == count
    assert first.checked > power_sync._ROWS_PER_READ
    assert all(_get(db, n).power_state == POWER_ON for n in nodes)


def test_a_node_reserved_during_the_read_is_left_to_its_holder(db: Database) -> None:
    ctx = _context(db)
    _register(db, "peer", drivers=["fake-hardware"])
    node_id = _node(db, "drifting")

    def reserve(node: Node) -> None:
        with db.write() as session:
            session.execute(
                update(Node)
                .where(Node.id == node.id)
                .values(reservation="peer", epoch=Node.epoch + 1)
            )

    DriftingPower.during_read = reserve
    try:
        report = sync_power_states(ctx)
    finally:
        DriftingPower.during_read = None

    assert report == SyncReport(checked=1, skipped=1)
    node = _get(db, node_id)
    assert (node.power_state, node.reservation) == (POWER_OFF, "peer")
    assert _history(db, node_id) == []


def test_a_node_changed_and_released_during_the_read_is_skipped(db: Database) -> None:
    """The epoch shows someone held the node meanwhile, even though it is free again."""
    ctx = _context(db)
    node_id = _node(db, "drifting")

    def held_meanwhile(node: Node) -> None:
        with db.write() as session:
            session.execute(
                update(Node)
                .where(Node.id == node.id)
                .values(power_state=POWER_OFF, epoch=Node.epoch + 1)
            )

    DriftingPower.during_read = held_meanwhile
    try:
        assert sync_power_states(ctx) == SyncReport(checked=1, skipped=1)
    finally:
        DriftingPower.during_read = None
    assert _history(db, node_id) == []


def test_nothing_to_check_reads_nothing(db: Database) -> None:
    assert sync_power_states(_context(db)) == SyncReport()


def test_a_running_conductor_syncs_power_changed_behind_its_back(
    sqlite_url: str, bmcs: BmcProcess
) -> None:
    """The periodic sync is wired into the conductor: ipmitool's change shows on the node."""
    settings = test_settings(sqlite_url, enabled_hardware_types=["ipmi"], sync_power_interval=0.3)
    stack = start_stack(settings)
    try:
        port = bmcs.ports[0]
        node = create_node(stack.client, driver="ipmi", driver_info=driver_info(port))
        assert provision(stack.client, node["uuid"], "manage").status_code == 202
        wait_for_state(stack.client, node["uuid"], states.MANAGEABLE)
        assert get_node(stack.client, node["uuid"])["power_state"] == POWER_OFF
        ipmitool(port, "power", "on")
        wait_for_state(stack.client, node["uuid"], POWER_ON, timeout=20, field="power_state")
        events = stack.client.get(f"/v1/nodes/{node['uuid']}/history", headers=LATEST).json()
        assert any("power" in e["event"] and "on" in e["event"] for e in events["history"])
    finally:
        stack.stop()


def test_the_bmcs_health_rating_is_recorded_when_it_changes(db: Database) -> None:
    """``health`` (1.109) follows what the management interface reports, read with the
    power state; a change is recorded in history once, a warning when not OK."""
    ctx = _context(db)
    node_id = _node(db, driver_info={"fake_health": "Warning"}, power_state=POWER_OFF)
    sync_power_states(ctx)
    assert _get(db, node_id).health == "Warning"
    sync_power_states(ctx)  # unchanged: nothing more is recorded
    with db.write() as session:
        session.execute(
            update(Node).where(Node.id == node_id).values(driver_info={"fake_health": "OK"})
        )
    sync_power_states(ctx)
    assert _get(db, node_id).health == "OK"
    with db.read() as session:
        rows = session.execute(
            select(NodeHistory.severity, NodeHistory.event)
            .where(NodeHistory.node_id == node_id, NodeHistory.event_type == "monitoring")
            .order_by(NodeHistory.id)
        ).all()
    assert [tuple(r) for r in rows] == [
        ("WARNING", "health Warning (was not reported)"),
        ("INFO", "health OK (was Warning)"),
    ]
    assert _get(db, node_id).power_state == POWER_OFF
    assert _get(db, node_id).reservation is None


def test_a_bmc_that_never_answers_costs_the_sync_one_read_deadline(db: Database) -> None:
    """Without the read's deadline, the sync of the conductor's whole share waited on it."""
    registry = DriverRegistry([FAKE_HARDWARE, REDFISH])
    _register(db, "c1", sorted(registry.types))
    settings = ConductorSettings(hostname="c1", heartbeat_timeout=30, sync_power_read_deadline=0.5)
    ctx = ConductorContext(hostname="c1", db=db, drivers=registry, settings=settings)
    fine = _node(db, power_state=POWER_OFF)
    with stalling("silent") as bmc:
        info = {"redfish_address": bmc.url, "redfish_system_id": "/redfish/v1/Systems/1"}
        silent = _node(db, "redfish", power_state=POWER_ON, driver_info=info)
        assert sync_power_states(ctx) == SyncReport(checked=2, failed=1)
    assert _get(db, fine).power_state == POWER_OFF
    [(severity, event)] = _history(db, silent)
    assert severity == "WARNING"
    assert event == (
        f"cannot read the power state: BMC at {bmc.url} did not finish answering within "
        "0.5 s (conductor.sync_power_read_deadline); the call was cut off"
    )
