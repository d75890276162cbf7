"""Keeping a BMC from being hammered: a limit on calls at once, and a circuit breaker.

BMCs are small computers with few session slots (an iDRAC or an iLO serves a
handful of Redfish sessions, then refuses or hangs), and a BMC that stopped
answering costs every call to it a connect timeout. Without a guard, a
fleet-wide sync, a rollout and an operator's requests can all reach one
BMC at once, and a dead BMC pins one conductor worker per call until each
times out, so other nodes' flows wait for workers.

Every call a driver makes to a BMC goes through ``GUARD.call(protocol,
address)``, keyed by the BMC's address (several nodes behind one BMC, as
on a chassis or the Redfish emulator, share its limit):

- at most ``max_concurrent`` calls run against one BMC at once; a caller
  waits at most ``slot_wait`` seconds for a free one, then fails with
  ``BmcUnavailable`` (the BMC is busy, so the conductor's bounded retries
  may try again later);
- with ``calls_per_minute`` set, calls to one BMC draw on a budget that
  refills steadily (a bucket of that many calls): a call beyond it waits for
  the budget, at most ``slot_wait`` in all, then fails the same way;
- every call has a whole-call deadline, ``call_deadline`` seconds for the
  connection, the request, the answer and every retry together
  (``outbound_http``): a BMC that accepts a connection and then never
  finishes answering, or trickles its answer, is cut off there, and the call
  counts as the BMC not reached, so a BMC that never answers opens its
  breaker instead of holding a worker (a conductor's or the API's) for as
  long as it likes;
- after ``failures_to_open`` consecutive calls that could not reach the
  BMC (connection refused, timed out), the breaker opens: calls fail at once
  for ``cooldown`` seconds instead of each waiting for a timeout. The first
  call after the cooling period is let through as a probe; its success
  closes the breaker, its failure opens it again. Any answer but "unavailable"
  (even an error: refused credentials, an unsupported request) proves the
  BMC is reachable and resets the count; an HTTP 503, a BMC saying it is
  busy, counts as not reached, as a timeout does.

The guard is process-local state, like the protocol clients it guards: each
conductor protects the BMCs it talks to. Refusals are counted in
``metalforge_bmc_errors`` (kinds ``busy`` and ``circuit_open``), every
opening of a breaker in ``metalforge_bmc_breaker_trips``, and how long each
call that ran took in ``metalforge_bmc_call_duration_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from metalforge import outbound_http
from metalforge.config import BmcGuardSettings
from metalforge.drivers.base import BmcUnavailable
from metalforge.drivers.failures import bmc_breaker_opened, bmc_call_took, bmc_failed

LOG = logging.getLogger(__name__)


class BreakerOpen(BmcUnavailable):
    """The BMC failed to answer too many times in a row; calls are refused until it cools."""


class BmcBusy(BmcUnavailable):
    """Every slot for the BMC stayed taken longer than the guard lets a caller wait."""


@dataclass
class _Bmc:
    """One BMC's slots and breaker; created on first use and kept (a few per BMC address)."""

    slots: threading.BoundedSemaphore
    failures: int = 0
    """Consecutive calls that could not reach the BMC."""
    open_until: float = 0.0
    """Monotonic time until which calls are refused (0: the breaker is closed)."""
    probing: bool = False
    """A call is trying the BMC after its cooling period; the others still wait it out."""
    budget: float = -1.0
    """Calls left in the budget (-1: not filled yet, the bucket starts full)."""
    refilled_at: float = 0.0


class BreakerListener(Protocol):
    """Told when a breaker opens or closes (``db.bmc_breakers``: the cluster's view)."""

    def opened(self, protocol: str, address: str, failures: int, cooldown: float) -> None: ...

    def closed(self, address: str) -> None: ...


@dataclass(frozen=True)
class BreakerState:
    """What ``GUARD.breakers()`` reports about one BMC whose breaker is open."""

    address: str
    failures: int
    seconds_left: float


class BmcGuard:
    """The per-BMC limits and breakers of one process (see the module docstring)."""

    def __init__(
        self,
        settings: BmcGuardSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._settings = settings or BmcGuardSettings()
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._bmcs: dict[str, _Bmc] = {}
        self._listener: BreakerListener | None = None

    @property
    def settings(self) -> BmcGuardSettings:
        return self._settings

    def configure(
        self, settings: BmcGuardSettings, listener: BreakerListener | None = None
    ) -> None:
        """Apply a service's settings (and forget every BMC: their slots are sized by them);
        ``listener`` is told of each breaker that opens or closes."""
        with self._lock:
            self._settings = settings
            self._listener = listener
            self._bmcs = {}

    def _bmc(self, address: str) -> _Bmc:
        with self._lock:
            found = self._bmcs.get(address)
            if found is None:
                found = _Bmc(threading.BoundedSemaphore(self._settings.max_concurrent))
                self._bmcs[address] = found
            return found

    def _admit(self, protocol: str, address: str, bmc: _Bmc) -> bool:
        """Refuse the call while the breaker is open; True when it is the probe."""
        with self._lock:
            if not bmc.open_until:
                return False
            left = bmc.open_until - self._clock()
            if left > 0 or bmc.probing:
                bmc_failed(protocol, "circuit_open")
                wait = f"; calls resume in {left:.0f} s" if left > 0 else ""
                raise BreakerOpen(
                    f"BMC at {address} is not being called: it failed to answer "
                    f"{bmc.failures} times in a row{wait}"
                )
            bmc.probing = True
            return True

    def _record(self, protocol: str, address: str, bmc: _Bmc, reached: bool) -> None:
        settings = self._settings
        with self._lock:
            bmc.probing = False
            listener = self._listener
            if reached:
                was_open = bool(bmc.open_until)
                bmc.failures = 0
                bmc.open_until = 0.0
            else:
                bmc.failures += 1
                if bmc.failures < settings.failures_to_open:
                    return
                bmc.open_until = self._clock() + settings.cooldown
        if reached:
            if was_open:
                LOG.info("BMC at %s answers again; its breaker is closed", address)
                if listener is not None:
                    listener.closed(address)
            return
        bmc_breaker_opened(protocol)
        if listener is not None:
            listener.opened(protocol, address, bmc.failures, settings.cooldown)
        LOG.warning(
            "BMC at %s failed to answer %d times in a row; refusing calls to it for %g s",
            address,
            bmc.failures,
            settings.cooldown,
        )

    def _spend(self, bmc: _Bmc, waited: float) -> float | None:
        """Take one call from the budget: 0 when there was one, else the seconds until there
        is (None: longer than the caller may still wait)."""
        per_minute = self._settings.calls_per_minute
        if not per_minute:
            return 0.0
        rate = per_minute / 60.0
        with self._lock:
            now = self._clock()
            if bmc.budget < 0:
                bmc.budget, bmc.refilled_at = float(per_minute), now
            bmc.budget = min(float(per_minute), bmc.budget + (now - bmc.refilled_at) * rate)
            bmc.refilled_at = now
            if bmc.budget >= 1.0:
                bmc.budget -= 1.0
                return 0.0
            wait = (1.0 - bmc.budget) / rate
        return wait if waited + wait <= self._settings.slot_wait else None

    def _within_budget(self, protocol: str, address: str, bmc: _Bmc) -> None:
        waited = 0.0
        while (wait := self._spend(bmc, waited)) != 0.0:
            if wait is None:
                bmc_failed(protocol, "busy")
                raise BmcBusy(
                    f"BMC at {address} is busy: its budget of "
                    f"{self._settings.calls_per_minute} calls a minute is spent"
                )
            self._sleep(wait)
            waited += wait

    def _take_slot(self, protocol: str, address: str, bmc: _Bmc) -> None:
        """One of the BMC's slots and a call from its budget, or ``BmcBusy``."""
        if not bmc.slots.acquire(timeout=self._settings.slot_wait):
            bmc_failed(protocol, "busy")
            raise BmcBusy(
                f"BMC at {address} is busy: {self._settings.max_concurrent} call(s) to it "
                f"did not finish within {self._settings.slot_wait:g} s"
            )
        try:
            self._within_budget(protocol, address, bmc)
        except BmcBusy:
            bmc.slots.release()
            raise

    @contextmanager
    def call(self, protocol: str, address: str) -> Iterator[None]:
        """Hold one of the BMC's slots for the block, or fail fast (see the module docstring).

        A ``BmcUnavailable`` leaving the block counts as the BMC not being
        reached; anything else, success or an error answer, as reached.
        """
        bmc = self._bmc(address)
        probe = self._admit(protocol, address, bmc)
        try:
            self._take_slot(protocol, address, bmc)
        except BmcBusy:
            if probe:  # refused before it could probe: the next call may
                with self._lock:
                    bmc.probing = False
            raise
        reached = True
        began = time.monotonic()
        try:
            with outbound_http.within(self._settings.call_deadline, CALL_DEADLINE) as deadline:
                try:
                    yield
                except Exception as exc:  # re-raised as it is unless the deadline cut it
                    if not deadline.expired:
                        raise
                    bmc_failed(protocol, "deadline")
                    raise BmcUnavailable(
                        f"BMC at {address} did not finish answering within "
                        f"{deadline.seconds:g} s ({deadline.setting}); the call was cut off"
                    ) from exc
        except BmcUnavailable:
            reached = False
            raise
        finally:
            bmc.slots.release()
            bmc_call_took(protocol, time.monotonic() - began)
            self._record(protocol, address, bmc, reached)

    def breakers(self) -> list[BreakerState]:
        """The BMCs whose breaker is open now, for the logs and the dashboard."""
        now = self._clock()
        with self._lock:
            return [
                BreakerState(address, bmc.failures, max(0.0, bmc.open_until - now))
                for address, bmc in sorted(self._bmcs.items())
                if bmc.open_until
            ]


CALL_DEADLINE = "bmc_guard.call_deadline"

GUARD = BmcGuard()
"""This process's guard (drivers are built without arguments by the registry)."""
