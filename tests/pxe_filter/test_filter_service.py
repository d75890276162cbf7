"""A filter host's rounds: election, wake-ups, repair, and blocking on any error.

The driver is replaced at our own boundary by one that records what it was
told; the real drivers have their own tests and the namespace tests run the
whole chain with dnsmasq and nftables. The clock is the test's.
"""

from __future__ import annotations

import pytest
from sqlalchemy import update

from metalforge import inspection_states as ins
from metalforge.config import PxeFilterSettings
from metalforge.coordination.election import SqlElector
from metalforge.db.engine import Database
from metalforge.db.models import LeaderLease
from metalforge.pxe_filter.desired import FilterState
from metalforge.pxe_filter.driver import FilterDriver, FilterError
from metalforge.pxe_filter.service import BLOCKING, PASSING, STOPPED, PxeFilter, host_statuses
from tests.pxe_filter.conftest import add_node, mac, set_inspection
from tests.support.api import wait_until


class RecordingDriver(FilterDriver):
    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, FilterState | None, bool]] = []
        self.valid_for: list[float] = []
        self.fail_with: Exception | None = None
        self.blocked = False

    def start(self) -> None:
        self.calls.append(("start", None, False))
        self.blocked = True

    def apply(self, state: FilterState, *, repair: bool, valid_for: float) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.calls.append(("apply", state, repair))
        self.valid_for.append(valid_for)
        self.blocked = state.blocking

    def block(self) -> None:
        self.calls.append(("block", None, False))
        self.blocked = True

    @property
    def last(self) -> FilterState | None:
        applied = [state for kind, state, _ in self.calls if kind == "apply"]
        return applied[-1] if applied else None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


SETTINGS = PxeFilterSettings(
    driver="dnsmasq", sync_period=15, election_interval=1.0, leader_lease=5.0
)
CLUSTER = FilterState(frozenset({mac(1)}), frozenset({mac(2)}), unknown_allowed=False)
"""The cluster's filter with node 1 inspected and node 2 not."""
STANDBY = FilterState(frozenset(), frozenset({mac(1), mac(2)}), unknown_allowed=False)


def _filter(db: Database, host: str, clock: Clock, **settings: object) -> PxeFilter:
    chosen = SETTINGS.model_copy(update={"hostname": host, **settings})
    return PxeFilter(
        db,
        chosen,
        RecordingDriver(),
        SqlElector(db, host, chosen.leader_lease),
        discovery=False,
        monotonic=clock,
    )


def _driver(pxe_filter: PxeFilter) -> RecordingDriver:
    driver = pxe_filter.driver
    assert isinstance(driver, RecordingDriver)
    return driver


def _started(*hosts: PxeFilter) -> None:
    """Each host's first sync (blocking, not yet campaigning), then its first campaign."""
    for host in hosts:
        host.step()
        assert not host.leading
        assert _driver(host).blocked
    for host in hosts:
        host.step()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cluster(db: Database) -> None:
    add_node(db, mac(1), inspection=ins.WAITING)
    add_node(db, mac(2))


@pytest.fixture
def host(db: Database, clock: Clock) -> PxeFilter:
    return _filter(db, "filter-a", clock)


@pytest.mark.usefixtures("cluster")
def test_a_host_blocks_first_and_campaigns_once_it_filters(db: Database, host: PxeFilter) -> None:
    host.step()
    calls = _driver(host).calls
    assert calls[0] == ("start", None, False)
    assert calls[1] == ("apply", STANDBY, True)
    assert not host.leading
    host.step()  # the campaign is due at once
    assert host.leading
    assert calls[-1] == ("apply", CLUSTER, False)
    (status,) = host_statuses(db)
    assert (status.hostname, status.mode, status.allowed, status.denied, status.error) == (
        "filter-a",
        PASSING,
        1,
        1,
        None,
    )


def test_a_wake_up_applies_what_changed_and_nothing_else(
    db: Database, host: PxeFilter, clock: Clock
) -> None:
    uuid = add_node(db, mac(1))
    _started(host)
    driver = _driver(host)
    applied = len(driver.calls)
    clock.now += 0.1
    host.step()  # nothing due, nothing woke it
    assert len(driver.calls) == applied
    set_inspection(db, uuid, ins.STARTING)
    host.wake()
    host.step()
    allowed = FilterState(frozenset({mac(1)}), frozenset(), False)
    assert driver.calls[-1] == ("apply", allowed, False)
    host.wake()
    host.step()  # woken, but the same state: not applied again
    assert len(driver.calls) == applied + 1


@pytest.mark.usefixtures("cluster")
def test_the_leaders_entries_live_as_long_as_its_lease_and_are_renewed_each_round(
    host: PxeFilter, clock: Clock
) -> None:
    _started(host)
    driver = _driver(host)
    # The lease less one round, counted from the campaign.
    assert driver.valid_for[-1] == SETTINGS.leader_lease - SETTINGS.election_interval
    applied = len(driver.calls)
    clock.now += SETTINGS.election_interval
    host.step()
    assert len(driver.calls) == applied + 1
    assert driver.last == CLUSTER
    assert driver.valid_for[-1] == SETTINGS.leader_lease - SETTINGS.election_interval


def test_the_periodic_resync_repairs_and_zero_disables_it(db: Database, clock: Clock) -> None:
    add_node(db, mac(1))
    every = _filter(db, "filter-a", clock)
    never = _filter(db, "filter-b", clock, sync_period=0.0)
    _started(every, never)
    clock.now += SETTINGS.sync_period
    every.step()
    never.step()
    assert [c[2] for c in _driver(every).calls if c[0] == "apply"][-1] is True
    assert [c[2] for c in _driver(never).calls if c[0] == "apply"] == [True]


@pytest.mark.usefixtures("cluster")
def test_only_one_host_leads_the_other_blocks_until_the_leader_stops(
    db: Database, clock: Clock
) -> None:
    first, second = _filter(db, "filter-a", clock), _filter(db, "filter-b", clock)
    _started(first, second)
    assert first.leading
    assert not second.leading
    assert _driver(first).last == CLUSTER
    assert _driver(second).last == STANDBY
    first.stop()
    assert _driver(first).calls[-1][0] == "block"
    clock.now += SETTINGS.election_interval
    second.step()
    assert second.leading
    assert _driver(second).last == CLUSTER
    modes = {s.hostname: s.mode for s in host_statuses(db)}
    assert modes == {"filter-a": STOPPED, "filter-b": PASSING}


def test_a_dead_leaders_role_is_taken_when_its_lease_runs_out(db: Database, clock: Clock) -> None:
    first, second = _filter(db, "filter-a", clock), _filter(db, "filter-b", clock)
    _started(first, second)
    assert first.leading
    assert not second.leading
    # ``first`` dies: it neither renews nor releases. The lease is on the database's clock.
    with db.write() as session:
        session.execute(update(LeaderLease).values(expires_at=db.now()))
    clock.now += SETTINGS.election_interval
    second.step()
    assert second.leading


@pytest.mark.usefixtures("cluster")
def test_a_driver_error_blocks_gives_the_role_up_shows_it_and_retries_a_round_later(
    db: Database, clock: Clock
) -> None:
    first, second = _filter(db, "filter-a", clock), _filter(db, "filter-b", clock)
    _started(first, second)
    driver = _driver(first)
    driver.fail_with = FilterError("nft refused the change")
    clock.now += SETTINGS.election_interval
    first.step()
    assert driver.blocked
    assert not first.leading
    status = {s.hostname: s for s in host_statuses(db)}["filter-a"]
    assert (status.mode, status.error) == (BLOCKING, "FilterError: nft refused the change")
    # No spinning: the next try is a round away, and a failed round changes nothing.
    assert first._seconds_to_next_round() == SETTINGS.election_interval
    calls = len(driver.calls)
    first.step()
    assert len(driver.calls) == calls
    # The other host takes over at its next round.
    clock.now += SETTINGS.election_interval
    second.step()
    assert second.leading
    assert _driver(second).last == CLUSTER
    # The failed host keeps trying; once it works again it filters (blocking: not the leader).
    driver.fail_with = None
    first.step()
    assert first.error is None
    assert driver.last == STANDBY
    status = {s.hostname: s for s in host_statuses(db)}["filter-a"]
    assert (status.mode, status.error) == (BLOCKING, None)


@pytest.mark.usefixtures("cluster")
def test_a_failed_host_does_not_campaign_until_it_has_synced_again(
    db: Database, clock: Clock
) -> None:
    host = _filter(db, "filter-a", clock)
    _started(host)
    driver = _driver(host)
    driver.fail_with = FilterError("broken")
    for _ in range(3):
        clock.now += SETTINGS.election_interval
        host.step()
        assert not host.leading
    with db.read() as session:
        lease = session.get(LeaderLease, "pxe-filter")
        assert lease is not None
        assert lease.holder is None  # free for a host that works
    driver.fail_with = None
    clock.now += SETTINGS.election_interval
    host.step()
    host.step()
    assert host.leading


@pytest.mark.usefixtures("cluster")
def test_a_leader_whose_round_hangs_blocks_before_its_lease_may_pass(
    host: PxeFilter, clock: Clock
) -> None:
    _started(host)
    driver = _driver(host)
    assert not driver.blocked
    clock.now += SETTINGS.leader_lease - SETTINGS.election_interval - 0.1
    host.check_lease()  # the watchdog, while the round is stuck
    assert not driver.blocked
    clock.now += 0.1
    host.check_lease()
    assert driver.blocked
    host.step()  # the stuck round returns: it must not answer again
    assert not host.leading
    assert host.error is not None
    assert "lease" in host.error
    assert driver.blocked


def test_a_database_failure_blocks_the_host(db: Database, clock: Clock, db_url: str) -> None:
    add_node(db, mac(1), inspection=ins.WAITING)
    broken = Database(db_url)
    host = _filter(broken, "filter-a", clock)
    _started(host)
    assert host.leading

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise ConnectionError("database unreachable")

    broken.read = refuse  # type: ignore[method-assign,assignment]
    broken.write = refuse  # type: ignore[method-assign,assignment]
    host.wake()
    clock.now += SETTINGS.election_interval
    host.step()
    assert _driver(host).blocked
    assert host.error is not None
    assert "unreachable" in host.error
    assert not host.leading
    broken.dispose()


def test_the_threads_apply_a_change_on_wake_up_and_stop_leaves_it_blocking(
    db: Database,
) -> None:
    uuid = add_node(db, mac(1))
    host = PxeFilter(
        db,
        SETTINGS.model_copy(update={"hostname": "filter-a"}),
        RecordingDriver(),
        SqlElector(db, "filter-a", SETTINGS.leader_lease),
        discovery=True,
    )
    host.start()
    try:
        wait_until("the first campaign", lambda: host.leading)
        set_inspection(db, uuid, ins.WAITING)
        host.wake()
        wait_until(
            "the node to be allowed",
            lambda: (last := _driver(host).last) is not None and mac(1) in last.allowed,
        )
        assert _driver(host).last == FilterState(frozenset({mac(1)}), frozenset(), True)
    finally:
        host.stop()
    assert _driver(host).calls[-1][0] == "block"
