"""The hours in which a rollout may start nodes."""

from __future__ import annotations

import datetime as dt

import pytest

from metalforge.services.rollout_waves import window_open


def _at(hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime(2026, 12, 6, hour, minute, tzinfo=dt.UTC)


def test_no_window_is_always_open() -> None:
    assert all(window_open(None, None, _at(h)) for h in range(24))


@pytest.mark.parametrize(
    ("start", "end", "open_hours"),
    [
        (9, 17, set(range(9, 17))),
        (22, 6, {22, 23, 0, 1, 2, 3, 4, 5}),
        (0, 1, {0}),
        (23, 0, {23}),
    ],
)
def test_a_window_opens_at_its_start_and_closes_at_its_end(
    start: int, end: int, open_hours: set[int]
) -> None:
    assert {h for h in range(24) if window_open(start, end, _at(h, 59))} == open_hours
