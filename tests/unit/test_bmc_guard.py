"""The per-BMC call limit and circuit breaker, on an injected clock."""

from __future__ import annotations

import threading

import pytest
from pydantic import ValidationError

from metalforge.config import BmcGuardSettings, Settings
from metalforge.drivers import failures
from metalforge.drivers.base import BmcUnavailable, DriverError
from metalforge.drivers.bmc_guard import BmcBusy, BmcGuard, BreakerOpen
from metalforge.tallies import (
    BMC_BREAKER_TRIPS,
    BMC_CALL_DURATION,
    BMC_ERRORS,
    LABEL_SEPARATOR,
    Tally,
)

ADDRESS = "https://bmc-1.example:443"
OTHER = "https://bmc-2.example:443"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _guard(clock: Clock, **settings: float) -> BmcGuard:
    return BmcGuard(BmcGuardSettings(**settings), clock=clock)


def _unreachable(guard: BmcGuard, address: str = ADDRESS) -> None:
    with pytest.raises(BmcUnavailable), guard.call("redfish", address):
        raise BmcUnavailable("connection refused")


def _tripped(clock: Clock) -> BmcGuard:
    """A guard whose breaker for ``ADDRESS`` just opened (two failures, 30 s to cool)."""
    guard = _guard(clock, failures_to_open=2, cooldown=30)
    _unreachable(guard)
    _unreachable(guard)
    return guard


@pytest.fixture(autouse=True)
def _own_tally(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts go to a tally of the test's own, not to one a database may be flushing."""
    monkeypatch.setattr(failures, "FAILURES", Tally())


def _counted(metric: str, labels: tuple[str, ...]) -> float:
    counted = failures.FAILURES.take()
    failures.FAILURES.give_back(counted)
    joined = LABEL_SEPARATOR.join(labels)
    return sum(
        v for (name, label, _part), v in counted.items() if (name, label) == (metric, joined)
    )


def test_the_breaker_opens_after_consecutive_failures_and_refuses_without_calling() -> None:
    clock = Clock()
    guard = _guard(clock, failures_to_open=3, cooldown=60)
    before = _counted(BMC_BREAKER_TRIPS.name, ("redfish",))
    for _ in range(3):
        _unreachable(guard)
    assert _counted(BMC_BREAKER_TRIPS.name, ("redfish",)) == before + 1
    called = []
    with (
        pytest.raises(BreakerOpen, match="failed to answer 3 times in a row; calls resume in 60 s"),
        guard.call("redfish", ADDRESS),
    ):
        called.append(True)
    assert called == []
    # Another BMC is not affected.
    with guard.call("redfish", OTHER):
        called.append(True)
    assert called == [True]
    assert [b.address for b in guard.breakers()] == [ADDRESS]


def test_a_breaker_open_is_a_bmc_unavailable_so_idempotent_actions_retry_later() -> None:
    assert issubclass(BreakerOpen, BmcUnavailable)
    assert issubclass(BmcBusy, BmcUnavailable)


def test_after_the_cooldown_one_probe_goes_through_and_its_success_closes_the_breaker() -> None:
    clock = Clock()
    guard = _tripped(clock)
    clock.now += 29
    with pytest.raises(BreakerOpen), guard.call("redfish", ADDRESS):
        pass
    clock.now += 2
    with guard.call("redfish", ADDRESS):
        pass
    assert guard.breakers() == []
    # Closed again: one more failure does not reopen it.
    _unreachable(guard)
    with guard.call("redfish", ADDRESS):
        pass


def test_a_failed_probe_opens_the_breaker_again_at_once() -> None:
    clock = Clock()
    guard = _tripped(clock)
    clock.now += 31
    _unreachable(guard)
    with pytest.raises(BreakerOpen, match="calls resume in 30 s"), guard.call("redfish", ADDRESS):
        pass


def test_while_the_probe_runs_other_calls_are_still_refused() -> None:
    clock = Clock()
    guard = _guard(clock, failures_to_open=1, cooldown=10, max_concurrent=4)
    _unreachable(guard)
    clock.now += 11
    with (
        guard.call("redfish", ADDRESS),
        pytest.raises(BreakerOpen),
        guard.call("redfish", ADDRESS),
    ):
        pass


def test_an_answer_even_an_error_resets_the_count() -> None:
    clock = Clock()
    guard = _guard(clock, failures_to_open=3)
    _unreachable(guard)
    _unreachable(guard)
    with pytest.raises(DriverError), guard.call("redfish", ADDRESS):
        raise DriverError("the BMC refused the credentials")
    _unreachable(guard)
    _unreachable(guard)
    with guard.call("redfish", ADDRESS):
        pass
    assert guard.breakers() == []


def test_calls_beyond_the_limit_wait_and_then_fail_as_busy() -> None:
    guard = _guard(Clock(), max_concurrent=1, slot_wait=0.2)
    before = _counted(BMC_ERRORS.name, ("ipmi", "busy"))
    inside = threading.Event()
    leave = threading.Event()

    def hold() -> None:
        with guard.call("ipmi", "10.0.0.1:623"):
            inside.set()
            leave.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(10)
        busy = r"1 call\(s\) to it did not finish within 0.2 s"
        with pytest.raises(BmcBusy, match=busy), guard.call("ipmi", "10.0.0.1:623"):
            pass
        # A different BMC has slots of its own.
        with guard.call("ipmi", "10.0.0.2:623"):
            pass
    finally:
        leave.set()
        holder.join(10)
    assert _counted(BMC_ERRORS.name, ("ipmi", "busy")) == before + 1
    # The slot came back.
    with guard.call("ipmi", "10.0.0.1:623"):
        pass


def test_a_busy_refusal_is_not_a_failure_to_answer() -> None:
    guard = _guard(Clock(), max_concurrent=1, slot_wait=0.05, failures_to_open=1)
    taken = threading.Event()
    leave = threading.Event()

    def hold() -> None:
        with guard.call("redfish", ADDRESS):
            taken.set()
            leave.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(10)
    with pytest.raises(BmcBusy), guard.call("redfish", ADDRESS):
        pass
    leave.set()
    holder.join(10)
    assert guard.breakers() == []


def test_settings_refuse_absurd_values() -> None:
    for bad in ({"max_concurrent": 0}, {"slot_wait": 0}, {"failures_to_open": 0}, {"cooldown": -1}):
        with pytest.raises(ValidationError):
            BmcGuardSettings(**bad)
    settings = Settings.model_validate({"conductor": {"bmc_guard": {"max_concurrent": 2}}})
    assert settings.conductor.bmc_guard.max_concurrent == 2


class SleepingClock(Clock):
    """A clock that moves only when the guard sleeps (what it waited is what it asked)."""

    def __init__(self) -> None:
        super().__init__()
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_budget_lets_a_burst_through_then_spaces_the_calls() -> None:
    clock = SleepingClock()
    guard = BmcGuard(
        BmcGuardSettings(calls_per_minute=60, slot_wait=5), clock=clock, sleep=clock.sleep
    )
    for _ in range(60):
        with guard.call("redfish", ADDRESS):
            pass
    assert clock.slept == []
    with guard.call("redfish", ADDRESS):
        pass
    assert clock.slept == [pytest.approx(1.0)], "one call a second once the burst is spent"
    with guard.call("redfish", OTHER):
        pass
    assert len(clock.slept) == 1, "another BMC has a budget of its own"


def test_a_call_that_would_wait_longer_than_slot_wait_for_the_budget_is_busy() -> None:
    clock = SleepingClock()
    guard = BmcGuard(
        BmcGuardSettings(calls_per_minute=6, slot_wait=5), clock=clock, sleep=clock.sleep
    )
    for _ in range(6):
        with guard.call("ipmi", "10.0.0.9:623"):
            pass
    spent = "budget of 6 calls a minute is spent"
    with pytest.raises(BmcBusy, match=spent), guard.call("ipmi", "10.0.0.9:623"):
        pass
    assert _counted(BMC_ERRORS.name, ("ipmi", "busy")) == 1
    assert clock.slept == [], "it did not wait for a budget it could not get in time"
    clock.now += 10  # one call's worth refilled
    with guard.call("ipmi", "10.0.0.9:623"):
        pass


def test_each_call_that_ran_is_timed() -> None:
    guard = _guard(Clock())
    with guard.call("redfish", ADDRESS):
        pass
    _unreachable(guard)
    assert _counted(BMC_CALL_DURATION.name, ("redfish",)) > 0
    counted = failures.FAILURES.take()
    assert counted[(BMC_CALL_DURATION.name, "redfish", "count")] == 2
