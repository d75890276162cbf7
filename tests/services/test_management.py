"""The boot device through ``services.management``, without HTTP.

``fake-hardware`` keeps the boot device in the node's
``driver_internal_info``, so what the BMC was told is read back from the
database. Setting it takes the node's reservation for the call: the tests
check it is given back, whatever the outcome, and that a node a conductor
holds is refused untouched.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import select

from metalforge import states
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.reservations import acquire
from metalforge.db.models import Node, NodeHistory
from metalforge.drivers.fake import FakeManagement
from metalforge.errors import NodeLocked, RequestError
from metalforge.services import fencing, maintenance, management
from metalforge.services.context import Services
from metalforge.services.management import BootDevice
from tests.services.conftest import add_node, refused, stored_node

LATEST = (1, 115)


def _add_node(svc: Services, **fields: Any) -> Node:
    return add_node(
        svc,
        states.MANAGEABLE,
        **{"name": "rack1-n1", "driver_internal_info": {"kept": 1}, **fields},
    )


def _node(svc: Services, node_id: int) -> Node:
    return stored_node(svc, node_id)


def _history(svc: Services, node_id: int) -> list[tuple[str, str, str | None]]:
    with svc.db.read() as session:
        rows = session.scalars(
            select(NodeHistory).where(NodeHistory.node_id == node_id).order_by(NodeHistory.id)
        )
        return [(h.event_type, h.event, h.conductor) for h in rows]


def test_a_fake_node_boots_from_disk_until_told_otherwise(svc: Services) -> None:
    node = _add_node(svc)
    assert management.boot_device(svc, node.uuid, LATEST) == BootDevice("disk", True)
    assert management.supported_boot_devices(svc, "rack1-n1", LATEST) == ["pxe", "disk"]


@pytest.mark.parametrize(("persistent", "how"), [(False, "next boot only"), (True, "persistent")])
def test_the_boot_device_set_is_the_one_read_back(
    svc: Services, persistent: bool, how: str
) -> None:
    node = _add_node(svc)
    management.set_boot_device(svc, "rack1-n1", LATEST, "pxe", persistent)
    assert management.boot_device(svc, node.uuid, LATEST) == BootDevice("pxe", persistent)
    stored = _node(svc, node.id)
    assert stored.driver_internal_info == {
        "kept": 1,
        "fake_boot_device": "pxe",
        "fake_boot_persistent": persistent,
    }
    assert stored.reservation is None, "the reservation is given back after the call"
    assert stored.epoch > node.epoch, "the write is fenced"
    [(event_type, event, holder)] = _history(svc, node.id)
    assert (event_type, event) == ("management", f"boot device set to pxe ({how})")
    assert holder is not None
    assert holder.startswith(f"{API_HOLDER} until ")


def test_an_unknown_boot_device_is_400(svc: Services) -> None:
    node = _add_node(svc)
    with pytest.raises(RequestError) as raised:
        management.set_boot_device(svc, node.uuid, LATEST, "floppy", False)
    assert "Invalid boot device 'floppy'" in refused(400, raised)
    stored = _node(svc, node.id)
    assert (stored.driver_internal_info, stored.epoch) == ({"kept": 1}, node.epoch)


def test_a_device_the_node_does_not_support_is_400_and_the_node_is_given_back(
    svc: Services,
) -> None:
    node = _add_node(svc)
    with pytest.raises(RequestError) as raised:
        management.set_boot_device(svc, node.uuid, LATEST, "cdrom", True)
    assert "Boot device 'cdrom' is not supported" in refused(400, raised)
    stored = _node(svc, node.id)
    assert stored.reservation is None
    assert stored.driver_internal_info == {"kept": 1}
    assert _history(svc, node.id) == []
    assert management.boot_device(svc, node.uuid, LATEST) == BootDevice("disk", True)


def test_a_node_a_conductor_holds_is_refused_untouched(svc: Services) -> None:
    node = _add_node(svc, reservation="conductor-1")
    with pytest.raises(NodeLocked, match="locked by host conductor-1"):
        management.set_boot_device(svc, node.uuid, LATEST, "pxe", False)
    stored = _node(svc, node.id)
    assert (stored.reservation, stored.epoch) == ("conductor-1", node.epoch)
    assert stored.driver_internal_info == {"kept": 1}
    assert _history(svc, node.id) == []
    # Reads take no reservation: they answer while the conductor holds the node.
    assert management.boot_device(svc, node.uuid, LATEST) == BootDevice("disk", True)


def test_an_unknown_node_is_404(svc: Services) -> None:
    _add_node(svc)
    for call in (
        lambda: management.boot_device(svc, "rack9-n9", LATEST),
        lambda: management.supported_boot_devices(svc, "rack9-n9", LATEST),
        lambda: management.set_boot_device(svc, "rack9-n9", LATEST, "pxe", False),
    ):
        with pytest.raises(RequestError) as raised:
            call()
        assert refused(404, raised) == "Node rack9-n9 could not be found."


# -- a reservation left by an API process that died during the BMC call ---------------

API_HOLDER = "api@test-conductor"
"""The holder ``set_boot_device`` takes the reservation as (settings' conductor hostname)."""


def test_the_call_holds_the_node_as_the_api_not_as_a_conductor(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str | None] = []
    real = FakeManagement.set_boot_device

    def spy(self: FakeManagement, task: Any, device: str, persistent: bool = False) -> None:
        with svc.db.read() as session:
            seen.append(session.scalar(select(Node.reservation).where(Node.id == task.node.id)))
        real(self, task, device, persistent)

    monkeypatch.setattr(FakeManagement, "set_boot_device", spy)
    node = _add_node(svc)
    management.set_boot_device(svc, node.uuid, LATEST, "pxe", False)
    assert len(seen) == 1
    assert seen[0] is not None
    holder, until = seen[0].split(" until ")
    assert holder == API_HOLDER
    deadline = svc.db.now() + dt.timedelta(seconds=svc.settings.api.call_hold_seconds)
    assert dt.datetime.fromisoformat(until) <= deadline
    assert _node(svc, node.id).reservation is None


def test_a_conductor_takes_over_a_reservation_a_dead_api_call_left(svc: Services) -> None:
    node = _add_node(svc, reservation=API_HOLDER)
    conductor = svc.settings.conductor
    ctx = ConductorContext(
        hostname=conductor.hostname, db=svc.db, drivers=svc.drivers, settings=conductor
    )
    with acquire(ctx, node.id, "test") as task:
        assert task.node.reservation == conductor.hostname
    assert _node(svc, node.id).reservation is None


def test_a_reservation_a_dead_api_call_left_does_not_lock_the_node_for_requests(
    svc: Services,
) -> None:
    """Past its deadline the hold is one a dead process left: the next request clears it."""
    expired = fencing.api_hold("test-conductor", svc.db.now() - dt.timedelta(seconds=1))
    node = _add_node(svc, reservation=expired)
    management.set_boot_device(svc, node.uuid, LATEST, "pxe", False)
    stored = _node(svc, node.id)
    assert stored.reservation is None
    assert stored.driver_internal_info["fake_boot_device"] == "pxe"


def test_a_running_calls_hold_still_refuses_requests(svc: Services) -> None:
    running = fencing.api_hold("test-conductor", svc.db.now() + dt.timedelta(seconds=60))
    node = _add_node(svc, reservation=running)
    with pytest.raises(NodeLocked):
        management.set_boot_device(svc, node.uuid, LATEST, "pxe", False)
    with pytest.raises(NodeLocked):
        maintenance.set_maintenance(svc, node.uuid, LATEST, on=True, reason="x", actor=None)
    stored = _node(svc, node.id)
    assert (stored.reservation, stored.epoch, stored.maintenance) == (running, node.epoch, False)


def test_any_request_clears_an_expired_api_hold_fenced(svc: Services) -> None:
    expired = fencing.api_hold("test-conductor", svc.db.now() - dt.timedelta(seconds=1))
    node = _add_node(svc, reservation=expired)
    maintenance.set_maintenance(svc, node.uuid, LATEST, on=True, reason="x", actor=None)
    stored = _node(svc, node.id)
    assert (stored.reservation, stored.maintenance) == (None, True)
    assert stored.epoch == node.epoch + 2, "the hold's release and the write each bump it"
