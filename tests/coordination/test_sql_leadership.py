"""Leader election on the service's database: one leader per role, handed over safely."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from metalforge.conductor.leadership import Leadership, LeaderTerm, SingletonTask
from metalforge.conductor.process import ConductorProcess
from metalforge.config import CoordinationSettings
from metalforge.coordination.election import LeaseLost, SqlElector
from metalforge.db.engine import Database, RetryPolicy
from metalforge.db.models import LeaderLease
from tests.support.conductors import registered_conductor
from tests.support.stack import AdjustableClock

ROLE = "inspection-timeouts"
SETTINGS = CoordinationSettings(election_interval=0.1, leader_lease=5.0, retry_count=3)


@pytest.fixture
def clock() -> AdjustableClock:
    return AdjustableClock()


@pytest.fixture
def db(db_url: str, clock: AdjustableClock) -> Database:
    database = Database(db_url, local_clock=clock)
    database.upgrade()
    return database


def _member(db: Database, host: str) -> ConductorProcess:
    return registered_conductor(db, host)


def _elector(service: ConductorProcess) -> SqlElector:
    return SqlElector.for_conductors(
        service.ctx.db, service.ctx.hostname, service.ctx.dead_after, SETTINGS.leader_lease
    )


def test_one_member_leads_a_role_and_keeps_it_while_it_renews(db: Database) -> None:
    a, b = _elector(_member(db, "a")), _elector(_member(db, "b"))
    assert a.campaign(ROLE)
    assert not b.campaign(ROLE)
    assert a.campaign(ROLE)  # renewing
    assert not b.campaign(ROLE)
    assert b.campaign("another-role")  # roles are elected apart
    assert a.members() == frozenset({"a", "b"})


def test_standing_down_hands_the_role_over_at_once(db: Database) -> None:
    a, b = _elector(_member(db, "a")), _elector(_member(db, "b"))
    assert a.campaign(ROLE)
    a.stand_down(ROLE)
    assert b.campaign(ROLE)
    assert not a.campaign(ROLE)


def test_an_expired_lease_is_taken_over(db: Database, clock: AdjustableClock) -> None:
    a_service, b_service = _member(db, "a"), _member(db, "b")
    a, b = _elector(a_service), _elector(b_service)
    assert a.campaign(ROLE)
    clock.advance(SETTINGS.leader_lease + 1)
    b_service.heartbeat()
    a_service.heartbeat()  # both alive: only the lease's expiry frees the role
    assert b.campaign(ROLE)
    assert not a.campaign(ROLE)


def test_a_dead_holders_role_is_taken_without_waiting_for_its_lease(
    db: Database, clock: AdjustableClock
) -> None:
    a_service, b_service = _member(db, "a"), _member(db, "b")
    a, b = _elector(a_service), _elector(b_service)
    assert a.campaign(ROLE)
    clock.advance(31)  # a stopped heartbeating: it is dead, though its lease still runs
    b_service.heartbeat()
    assert a.members() == frozenset({"b"})
    assert b.campaign(ROLE)


def _leadership(
    service: ConductorProcess, run: Callable[[LeaderTerm], object], fatal: list[str]
) -> Leadership:
    task = SingletonTask(ROLE, lambda _ctx: 0.0, run)
    return Leadership(service.ctx, _elector(service), [task], SETTINGS, fatal.append)


def test_only_the_leader_runs_the_task(db: Database) -> None:
    runs: list[str] = []
    fatal: list[str] = []
    a, b = _member(db, "a"), _member(db, "b")
    first = _leadership(a, lambda term: runs.append(term.ctx.hostname), fatal)
    second = _leadership(b, lambda term: runs.append(term.ctx.hostname), fatal)
    for _ in range(3):
        first.round()
        second.round()
    assert runs == ["a", "a", "a"]
    assert first.leads(ROLE)
    assert not second.leads(ROLE)


def test_a_leader_whose_task_fails_stands_down(db: Database) -> None:
    fatal: list[str] = []

    def broken(_term: LeaderTerm) -> None:
        raise RuntimeError("disk full")

    runs: list[str] = []
    a, b = _member(db, "a"), _member(db, "b")
    first = _leadership(a, broken, fatal)
    second = _leadership(b, lambda term: runs.append(term.ctx.hostname), fatal)
    first.round()
    assert not first.leads(ROLE)
    second.round()
    assert runs == ["b"]
    assert fatal == []


def _epoch(db: Database) -> int:
    with db.read() as session:
        lease = session.get(LeaderLease, ROLE)
    assert lease is not None
    return lease.epoch


def test_a_shrinking_membership_makes_everyone_stand_down_and_elect_again(
    db: Database, clock: AdjustableClock
) -> None:
    fatal: list[str] = []
    a, b, _c = _member(db, "a"), _member(db, "b"), _member(db, "c")
    first = _leadership(a, lambda _term: None, fatal)
    second = _leadership(b, lambda _term: None, fatal)
    first.round()
    second.round()
    assert first.leads(ROLE)
    before = _epoch(db)
    first.round()
    assert _epoch(db) == before  # renewing keeps the epoch
    clock.advance(SETTINGS.leader_lease / 2)
    c_died_at = 31  # c stops heartbeating; a and b go on
    clock.advance(c_died_at)
    a.heartbeat()
    b.heartbeat()
    first.round()  # a sees c gone: it stands down and the role is elected again
    second.round()
    assert _epoch(db) > before
    assert first.leads(ROLE) != second.leads(ROLE)  # exactly one leads


def test_a_member_that_cannot_reach_the_backend_stops(db: Database) -> None:
    fatal: list[str] = []
    a = _member(db, "a")
    leadership = _leadership(a, lambda _term: None, fatal)
    leadership.round()
    assert leadership.leads(ROLE)
    db.dispose()
    a.ctx.db = Database(
        "sqlite:////nonexistent/dir/metalforge.sqlite",
        retry=RetryPolicy(SETTINGS.retry_count, SETTINGS.retry_interval),
    )
    leadership.elector = SqlElector.for_conductors(
        a.ctx.db, a.ctx.hostname, a.ctx.dead_after, SETTINGS.leader_lease
    )
    for _ in range(SETTINGS.retry_count):
        leadership.round()
        assert not leadership.leads(ROLE)
    assert len(fatal) == 1
    assert "failed 3 times" in fatal[0]


def test_a_lease_shorter_than_two_rounds_is_refused() -> None:
    with pytest.raises(ValueError, match="leader_lease"):
        CoordinationSettings(election_interval=5.0, leader_lease=8.0)


def _write_mark(term: LeaderTerm, marks: list[int]) -> None:
    with term.write():
        marks.append(term.epoch)


def test_a_replaced_leaders_writes_are_refused(db: Database, clock: AdjustableClock) -> None:
    a_service, b_service = _member(db, "a"), _member(db, "b")
    a, b = _elector(a_service), _elector(b_service)
    a_epoch = a.campaign(ROLE)
    assert a_epoch is not None
    a_term = LeaderTerm(a_service.ctx, ROLE, "a", a_epoch)
    marks: list[int] = []
    _write_mark(a_term, marks)
    # a is paused past its lease; b takes the role meanwhile.
    clock.advance(SETTINGS.leader_lease + 1)
    a_service.heartbeat()
    b_service.heartbeat()
    with pytest.raises(LeaseLost, match="ran out"):
        _write_mark(a_term, marks)  # expired, even before anyone took the role
    b_epoch = b.campaign(ROLE)
    assert b_epoch == a_epoch + 1
    with pytest.raises(LeaseLost, match="held by b"):
        _write_mark(a_term, marks)
    _write_mark(LeaderTerm(b_service.ctx, ROLE, "b", b_epoch), marks)
    # a wins the role back later: its old term still cannot write, its new one can.
    b.stand_down(ROLE)
    again = a.campaign(ROLE)
    assert again == b_epoch + 1
    with pytest.raises(LeaseLost):
        _write_mark(a_term, marks)
    _write_mark(LeaderTerm(a_service.ctx, ROLE, "a", again), marks)
    assert marks == [a_epoch, b_epoch, again]


def test_a_task_that_loses_its_term_stops_without_standing_its_successor_down(
    db: Database, clock: AdjustableClock
) -> None:
    fatal: list[str] = []
    a_service, b_service = _member(db, "a"), _member(db, "b")
    b = _elector(b_service)
    taken: list[int | None] = []

    def overtaken(term: LeaderTerm) -> None:
        clock.advance(SETTINGS.leader_lease + 1)  # the round ran past the lease
        a_service.heartbeat()
        b_service.heartbeat()
        taken.append(b.campaign(ROLE))
        with term.write() as session:
            session.add(LeaderLease(role="never-written", holder="a", epoch=1, expires_at=clock()))

    leadership = _leadership(a_service, overtaken, fatal)
    leadership.round()
    assert taken[0] is not None
    assert not leadership.leads(ROLE)
    with db.read() as session:
        assert session.get(LeaderLease, "never-written") is None
        lease = session.get(LeaderLease, ROLE)
        assert lease is not None
        assert (lease.holder, lease.epoch) == ("b", taken[0])
    assert fatal == []


def test_a_slow_task_does_not_hold_up_the_other_roles(db: Database) -> None:
    fatal: list[str] = []
    service = _member(db, "a")
    release = threading.Event()
    quick_runs: list[int] = []
    many = threading.Event()

    def quick(term: LeaderTerm) -> None:
        quick_runs.append(term.epoch)
        if len(quick_runs) >= 3:
            many.set()

    tasks = [
        SingletonTask("slow", lambda _ctx: 0.0, lambda _term: release.wait(120)),
        SingletonTask("quick", lambda _ctx: 0.0, quick),
    ]
    leadership = Leadership(service.ctx, _elector(service), tasks, SETTINGS, fatal.append)
    leadership.start()
    try:
        assert many.wait(60), "the quick task did not run again while the slow one ran"
        assert leadership.leads("slow")
        assert leadership.leads("quick")
    finally:
        release.set()
        service.ctx.stopping.set()
        leadership.stop()
    assert fatal == []
