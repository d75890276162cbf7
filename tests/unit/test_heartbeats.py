"""After an outage that stopped every heartbeat, no conductor calls its peers dead at once."""

from __future__ import annotations

from metalforge.conductor.context import Heartbeats

INTERVAL, TIMEOUT = 5.0, 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_beating_on_time_adds_nothing() -> None:
    clock = Clock()
    beats = Heartbeats(clock)
    for _ in range(10):
        clock.now += INTERVAL
        beats.beat(INTERVAL, TIMEOUT)
        assert beats.blind_for(INTERVAL, TIMEOUT) == 0.0


def test_while_cut_off_and_for_a_timeout_after_peers_get_the_outage_s_length() -> None:
    clock = Clock()
    beats = Heartbeats(clock)
    beats.beat(INTERVAL, TIMEOUT)
    clock.now += 45  # the database is out of reach
    assert beats.blind_for(INTERVAL, TIMEOUT) == 45
    beats.beat(INTERVAL, TIMEOUT)  # back
    assert beats.blind_for(INTERVAL, TIMEOUT) == 45, "peers have not heartbeated yet"
    for _ in range(5):
        clock.now += INTERVAL
        beats.beat(INTERVAL, TIMEOUT)
    clock.now += INTERVAL - 1
    assert beats.blind_for(INTERVAL, TIMEOUT) == 45
    clock.now += 2
    beats.beat(INTERVAL, TIMEOUT)
    assert beats.blind_for(INTERVAL, TIMEOUT) == 0.0, "every live peer has heartbeated since"
