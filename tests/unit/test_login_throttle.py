"""Failed logins: a few per address and user, then a pause without a password check."""

from __future__ import annotations

from metalforge.api.auth.throttle import MAX_ENTRIES, LoginThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_past_the_allowed_failures_an_address_waits_out_the_period() -> None:
    clock = Clock()
    throttle = LoginThrottle(3, 60.0, clock)
    for _ in range(3):
        assert throttle.wait("192.0.2.1", "alice") == 0.0
        throttle.failed("192.0.2.1", "alice")
    clock.now += 10
    assert throttle.wait("192.0.2.1", "alice") == 50.0
    assert throttle.wait("192.0.2.2", "alice") == 0.0, "another address is not held back"
    assert throttle.wait("192.0.2.1", "bob") == 0.0, "nor another user"
    clock.now += 50
    assert throttle.wait("192.0.2.1", "alice") == 0.0


def test_a_success_forgets_the_failures() -> None:
    clock = Clock()
    throttle = LoginThrottle(2, 60.0, clock)
    throttle.failed("a", "alice")
    throttle.succeeded("a", "alice")
    throttle.failed("a", "alice")
    assert throttle.wait("a", "alice") == 0.0


def test_the_table_is_bounded() -> None:
    throttle = LoginThrottle(1, 60.0, Clock())
    for number in range(MAX_ENTRIES + 10):
        throttle.failed(f"198.51.100.{number}", "alice")
    assert throttle.wait("198.51.100.0", "alice") == 0.0, "the oldest entry went first"
    assert throttle.wait(f"198.51.100.{MAX_ENTRIES + 9}", "alice") == 60.0
