"""Calls to a BMC with pyghmi: one session per BMC at a time, every try bounded and retried.

Each BMC has one slot: a lock that lets one call at a time use it, and the
session that call may reuse (``sessions`` explains why a session is closed
after being idle and what else pyghmi needs). A session is dropped on any
error other than an error answer, which proves it works.

pyghmi's own timeouts are fixed (about 5 s before an unreachable BMC is
reported) and cannot be interrupted. Each try therefore runs in a
short-lived thread and the caller stops waiting after ``ipmi_timeout``; the
abandoned try keeps its slot until pyghmi gives up, and the BMC gets a fresh
slot, so a retry starts at once and a dead BMC holds at most a few threads.

A node's ``ipmi_retries`` and ``ipmi_timeout`` are its owner's to set (up to
11 tries of 60 s), so they alone do not bound a call: inside the BMC guard's
whole-call deadline (``outbound_http.within``), each try waits at most for
what is left of it and no try starts once it has passed.

The pool is module-level because pyghmi's state is: two pools in one process
would still share, and trip over, the same sessions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyghmi import exceptions as pyghmi_exceptions

from metalforge import outbound_http
from metalforge.drivers.base import BmcUnavailable, DriverError
from metalforge.drivers.failures import bmc_failed
from metalforge.drivers.ipmi import sessions

T = TypeVar("T")

DEFAULT_PORT = 623
DEFAULT_RETRIES = 2
"""Tries after the first one fails (Ironic retries IPMI commands too)."""
DEFAULT_TIMEOUT = 5.0
"""Seconds one try (login and command) may take before the BMC counts as silent."""

_NO_ANSWER = ("timeout", "session no longer connected")
_BAD_CREDENTIALS = ("incorrect password", "unauthorized name", "wrong kg")


class NoAnswer(BmcUnavailable):
    """The BMC did not answer in time (unreachable, wrong address or port, overloaded)."""


class CredentialsRefused(DriverError):
    """The BMC answered but refused the user name or password; retrying cannot help."""


class CommandFailed(DriverError):
    """The BMC answered a command with an error completion code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _kind(exc: DriverError) -> str:
    """The failure's kind, as metrics count it."""
    if isinstance(exc, CredentialsRefused):
        return "auth"
    if isinstance(exc, CommandFailed):
        return "refused"
    if isinstance(exc, NoAnswer):
        return "timeout"
    return "protocol"


@dataclass(frozen=True)
class BmcAddress:
    """Where a BMC is and how to log in; the key of its cached session."""

    host: str
    port: int
    username: str
    password: str = field(repr=False)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class CallPolicy:
    """How hard to try: ``retries`` after the first try, ``timeout`` seconds per try."""

    retries: int = DEFAULT_RETRIES
    timeout: float = DEFAULT_TIMEOUT

    @property
    def tries(self) -> int:
        return self.retries + 1


class _Slot:
    """One BMC's session and the lock that lets one call at a time use it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.command: Any = None
        self.used_at = 0.0

    def open(self, bmc: BmcAddress) -> Any:
        """The slot's session, logged in afresh when there is none or it sat idle too long."""
        if self.command is not None and time.monotonic() - self.used_at > sessions.MAX_IDLE:
            sessions.logout(self.command)
            self.command = None
        if self.command is None:
            self.command = sessions.login(bmc.host, bmc.port, bmc.username, bmc.password)
        self.used_at = time.monotonic()
        return self.command


class _Outcome:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.ok = False
        self.error: DriverError | None = None


def _classify(bmc: BmcAddress, exc: BaseException) -> DriverError:
    """A pyghmi error as the operator should read it."""
    text = str(exc) if str(exc) not in ("", "None") else "timeout"
    lowered = text.lower()
    if any(marker in lowered for marker in _BAD_CREDENTIALS):
        return CredentialsRefused(
            f"IPMI BMC at {bmc} refused the credentials of user {bmc.username!r}: {text} "
            "(check ipmi_username and ipmi_password)"
        )
    code = getattr(exc, "ipmicode", 0)
    if isinstance(exc, pyghmi_exceptions.IpmiException) and code and code != 0xFFFF:
        return CommandFailed(f"IPMI BMC at {bmc} answered with an error: {text}", code)
    if any(marker in lowered for marker in _NO_ANSWER):
        return NoAnswer(text)
    return DriverError(f"IPMI BMC at {bmc}: {type(exc).__name__}: {text}")


def _time_left(deadline: outbound_http.Deadline | None, timeout: float) -> float:
    """How long the next try may wait: ``timeout``, cut to what is left of ``deadline``."""
    if deadline is None:
        return timeout
    return min(timeout, deadline.at - time.monotonic())


class SessionPool:
    """Cached pyghmi sessions, one per BMC, safe to use from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[BmcAddress, _Slot] = {}

    def _slot(self, bmc: BmcAddress) -> _Slot:
        with self._lock:
            return self._slots.setdefault(bmc, _Slot())

    def _abandon(self, bmc: BmcAddress, slot: _Slot) -> None:
        """Give the BMC a fresh slot; the stuck try keeps the old one until pyghmi gives up.

        A login still under way is forgotten too, or the next try would join
        it and wait for pyghmi's own timeout instead of starting afresh.
        """
        with self._lock:
            if self._slots.get(bmc) is slot:
                del self._slots[bmc]
        sessions.forget_login(bmc.host, bmc.port, bmc.username, bmc.password, finished=False)
        sessions.retire(slot.command)

    def forget(self) -> None:
        """Drop every cached session (tests; a BMC's session is also dropped on any error)."""
        with self._lock:
            slots, self._slots = list(self._slots.values()), {}
        for slot in slots:
            sessions.retire(slot.command)

    def call(
        self,
        bmc: BmcAddress,
        operation: Callable[[Any], T],
        policy: CallPolicy,
        *,
        pause: Callable[[float], None],
    ) -> T:
        """Run ``operation(command)`` against ``bmc``, retrying as ``policy`` says.

        ``pause`` waits between tries (the task's interruptible sleep).
        Raises ``DriverError`` subclasses only.
        """
        try:
            return self._call(bmc, operation, policy, pause)
        except DriverError as exc:
            bmc_failed("ipmi", _kind(exc))
            raise

    def _call(
        self,
        bmc: BmcAddress,
        operation: Callable[[Any], T],
        policy: CallPolicy,
        pause: Callable[[float], None],
    ) -> T:
        last: DriverError = NoAnswer("timeout")
        deadline = outbound_http.current()
        tried = 0
        for attempt in range(policy.tries):
            if attempt:
                pause(min(1.0, policy.timeout / 4))
            wait = _time_left(deadline, policy.timeout)
            if wait <= 0:
                break
            tried += 1
            try:
                return self._try(bmc, operation, wait)
            except (CredentialsRefused, CommandFailed):
                raise
            except DriverError as exc:
                last = exc
        tries = f"{tried} {'try' if tried == 1 else 'tries'}"
        if deadline is not None and tried < policy.tries and isinstance(last, NoAnswer):
            raise NoAnswer(
                f"no answer from IPMI BMC at {bmc} after {tries} within {deadline.seconds:g} s "
                f"({deadline.setting}); the call was given up"
            ) from None
        if not isinstance(last, NoAnswer):
            raise DriverError(f"{last} (after {tries})") from last
        detail = "" if str(last) == "timeout" else f" ({last})"
        raise NoAnswer(f"no answer from IPMI BMC at {bmc} after {tries}{detail}") from None

    def _try(self, bmc: BmcAddress, operation: Callable[[Any], T], timeout: float) -> T:
        slot = self._slot(bmc)
        if not slot.lock.acquire(timeout=timeout):
            raise NoAnswer("an earlier request to this BMC is still unanswered")
        outcome = _Outcome()

        def run() -> None:
            try:
                with sessions.nudging():
                    outcome.value = operation(slot.open(bmc))
                outcome.ok = True
            except Exception as exc:  # noqa: BLE001 - pyghmi raises bare Exception: for the caller
                outcome.error = exc if isinstance(exc, DriverError) else _classify(bmc, exc)
                outcome.error.__cause__ = exc if outcome.error is not exc else None
                if not isinstance(outcome.error, CommandFailed):
                    # The session may be broken (an error answer proves it is not).
                    sessions.retire(slot.command)
                    slot.command = None
            finally:
                slot.lock.release()
                outcome.done.set()

        threading.Thread(target=run, name=f"ipmi-{bmc}", daemon=True).start()
        if not outcome.done.wait(timeout):
            self._abandon(bmc, slot)
            raise NoAnswer("timeout")
        if outcome.error is not None:
            raise outcome.error
        if not outcome.ok:
            raise DriverError(f"IPMI BMC at {bmc}: the request was interrupted")
        value: T = outcome.value
        return value


SESSIONS = SessionPool()
"""The process's sessions (see the module docstring for why there is one pool)."""


def raw(command: Any, netfn: int, cmd: int, data: tuple[int, ...] = ()) -> bytes:
    """Send one IPMI request on an open session; the response data (completion code checked)."""
    response = command.xraw_command(netfn=netfn, command=cmd, data=data)
    return bytes(response["data"])
