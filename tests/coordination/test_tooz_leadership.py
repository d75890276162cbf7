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

from metalforge.coordination.election import (
    EpochLedger,
    LeadershipUnavailable,
    LeaseLost,
    ToozElector,
    check_lease,
)
from metalforge.db.engine import Database
from tests.support.redis import RedisServer
from tests.support.tooz_candidate import ROLE

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
    def __init__(self, url: str, name: str, workdir: Path, db_url: str) -> None:
        self.name = name
        self.out = workdir / f"{name}.out"
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.tooz_candidate", url, name, db_url],
            stdout=self.out.open("wb"),
            stderr=subprocess.STDOUT,
            cwd=root,
            # The tree's own source before any installed copy: the candidate runs the
            # code under test even when another checkout is installed in the venv.
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "src")])},
        )

    def standings(self) -> list[str]:
        """Every standing it printed: ``follows`` or ``leads EPOCH``."""
        lines = self.out.read_text().splitlines()
        return [line for line in lines if line == "follows" or line.startswith("leads ")]

    def standing(self) -> str | None:
        found = self.standings()
        return found[-1].split()[0] if found else None

    def epoch(self) -> int:
        return int(self.standings()[-1].split()[1])

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def _wait(what: str, condition: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def ledger(tmp_path: Path) -> EpochLedger:
    db = Database(f"sqlite:///{tmp_path / 'leases.sqlite'}")
    db.upgrade()
    return EpochLedger(db, 5.0)


def test_exactly_one_leader_and_a_new_one_after_it_is_killed(
    redis: RedisServer, tmp_path: Path, ledger: EpochLedger
) -> None:
    url = f"{redis.url}?timeout={LOCK_TIMEOUT}"
    db_url = ledger.db.url
    candidates = [Candidate(url, f"conductor-{i}", tmp_path, db_url) for i in range(3)]
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
        new = next(c for c in rest if c.standing() == "leads")
        assert new.epoch() > old.epoch()  # the killed leader's term is fenced off
        with pytest.raises(LeaseLost), ledger.db.write() as session:
            check_lease(session, ROLE, old.name, old.epoch())
    finally:
        for candidate in candidates:
            if candidate.process.poll() is None:
                candidate.kill()


def test_standing_down_hands_the_role_over(redis: RedisServer, ledger: EpochLedger) -> None:
    url = f"{redis.url}?timeout=30"
    first = ToozElector(url, "a", "metalforge-test", 5.0, ledger)
    second = ToozElector(url, "b", "metalforge-test", 5.0, ledger)
    first.start()
    second.start()
    try:
        epoch = first.campaign("role")
        assert epoch is not None
        assert first.campaign("role") == epoch  # keeps it, in the same term
        assert second.campaign("role") is None
        assert first.members() == frozenset({"a", "b"})
        first.stand_down("role")
        assert second.campaign("role") == epoch + 1
        second.stop()
        assert first.members() == frozenset({"a"})
    finally:
        first.stop()


def test_a_backend_that_cannot_elect_refuses_to_start(ledger: EpochLedger) -> None:
    # tooz's System V IPC driver has locks but no groups: no membership, no election.
    elector = ToozElector("ipc://", "a", "metalforge-test", 5.0, ledger)
    with pytest.raises(LeadershipUnavailable, match="cannot elect"):
        elector.start()
