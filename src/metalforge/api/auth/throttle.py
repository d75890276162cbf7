"""Failed logins slow a password guesser down: a few per address and user, then a pause.

bcrypt makes each guess cost the server a quarter of a second of CPU, so
unthrottled guessing is both a brute-force attack and a way to burn the
API's CPU. After ``api.login_failures`` failed logins from one client
address as one user within ``api.login_throttle_seconds``, that address's
further attempts as that user are refused at once, without a bcrypt check,
until the period since the first of them has passed. Keyed by address and
user together, so a guesser elsewhere cannot lock the real user out. The
table is bounded: the oldest entries go first.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

MAX_ENTRIES = 10_000
"""Address and user pairs remembered at most (each a few dozen bytes)."""


@dataclass
class _Failures:
    since: float
    count: int


class LoginThrottle:
    def __init__(
        self,
        failures: int,
        period: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures = failures
        self.period = period
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, str], _Failures] = OrderedDict()

    def wait(self, address: str, user: str) -> float:
        """Seconds until ``address`` may try ``user`` again (0: it may now)."""
        with self._lock:
            entry = self._seen.get((address, user))
            if entry is None:
                return 0.0
            left = entry.since + self.period - self._clock()
            if left <= 0:
                del self._seen[(address, user)]
                return 0.0
            return left if entry.count >= self.failures else 0.0

    def failed(self, address: str, user: str) -> None:
        with self._lock:
            now = self._clock()
            key = (address, user)
            entry = self._seen.get(key)
            if entry is None or now - entry.since >= self.period:
                self._seen[key] = _Failures(now, 1)
            else:
                entry.count += 1
            self._seen.move_to_end(key)
            while len(self._seen) > MAX_ENTRIES:
                self._seen.popitem(last=False)

    def succeeded(self, address: str, user: str) -> None:
        with self._lock:
            self._seen.pop((address, user), None)
