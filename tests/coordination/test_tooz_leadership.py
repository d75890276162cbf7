"""Leader election through tooz with a real redis-server: one leader, replaced when killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metalforge.conductor.leadership import LeadershipUnavailable, ToozElector
from tests.support.redis import RedisServer

LOCK_TIMEOUT = 2
"""The lease: a killed leader's lock expires this many seconds after its last refresh."""


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Candidate:
    def __init__(self, url: str, name: str, workdir: Path) -> None:
        self.name = name
        self.out = workdir / f"{name}.out"
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.tooz_candidate", url, name],
            stdout=self.out.open("wb"),
            stderr=subprocess.STDOUT,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
        )

    def standing(self) -> str | None:
        lines = [line for line in self.out.read_text().split() if line in ("leads", "follows")]
        return lines[-1] if lines else None

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def _wait(what: str, condition: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_exactly_one_leader_and_a_new_one_after_it_is_killed(
    redis: RedisServer, tmp_path: Path
) -> None:
    url = f"{redis.url}?timeout={LOCK_TIMEOUT}"
    candidates = [Candidate(url, f"conductor-{i}", tmp_path) for i in range(3)]
    try:
        _wait("every candidate to campaign", lambda: all(c.standing() for c in candidates))
        leaders = [c for c in candidates if c.standing() == "leads"]
        assert len(leaders) == 1, [(c.name, c.standing()) for c in candidates]
        old = leaders[0]
        old.kill()
        rest = [c for c in candidates if c is not old]
        _wait("a new leader", lambda: any(c.standing() == "leads" for c in rest))
        time.sleep(LOCK_TIMEOUT)  # and it stays alone: nobody else takes the lock it holds
        assert sum(c.standing() == "leads" for c in rest) == 1
    finally:
        for candidate in candidates:
            if candidate.process.poll() is None:
                candidate.kill()


def test_standing_down_hands_the_role_over(redis: RedisServer) -> None:
    url = f"{redis.url}?timeout=30"
    first = ToozElector(url, "a", "metalforge-test", timeout=5.0)
    second = ToozElector(url, "b", "metalforge-test", timeout=5.0)
    first.start()
    second.start()
    try:
        assert first.campaign("role")
        assert first.campaign("role")  # keeps it
        assert not second.campaign("role")
        assert first.members() == frozenset({"a", "b"})
        first.stand_down("role")
        assert second.campaign("role")
        second.stop()
        assert first.members() == frozenset({"a"})
    finally:
        first.stop()


def test_a_backend_that_cannot_elect_refuses_to_start() -> None:
    # tooz's System V IPC driver has locks but no groups: no membership, no election.
    elector = ToozElector("ipc://", "a", "metalforge-test", timeout=5.0)
    with pytest.raises(LeadershipUnavailable, match="cannot elect"):
        elector.start()
