"""Reaching a node's BMC: ``driver_info``, cached sushy clients, errors an operator can act on.

``driver_info`` keys (all interfaces share them):

``redfish_address``
    The BMC's URL, ``http://127.0.0.1:8000``; a bare host means https.
``redfish_system_id``
    The system's path, ``/redfish/v1/Systems/<id>`` (a bare ``<id>`` is
    taken as that path). Optional when the BMC has exactly one system.
``redfish_username``, ``redfish_password``
    Credentials; Redfish session auth is tried first, then Basic.
``redfish_verify_ca``
    ``true`` (default), ``false`` or the path of a CA bundle. The CLI sends
    every value as a string, so ``"false"``/``"no"``/``"0"`` count as false.

A ``sushy.Sushy`` client costs a GET of the service root (and a session
login), so one client per (address, username, password, verify) is kept and
shared between threads; it is dropped after a connection or credential
failure so the next call starts afresh. Every request has a connect and a
read timeout and every call a whole-call deadline (the guard's
``call_deadline``, which cuts off a BMC that trickles its answer), so a
dead BMC cannot hold a node's reservation for long, and
every use of a BMC goes through ``bmc_guard`` (a limit on calls at once, a
circuit breaker for a BMC that stopped answering).

Errors: every sushy or requests failure leaves this module as ``DriverError``
whose message names the BMC and what went wrong (unreachable and why,
credentials refused, no such system, what the BMC answered).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import sushy
from sushy import connector as sushy_connector
from sushy import exceptions as sushy_errors

from metalforge import outbound_http
from metalforge.drivers.base import BmcUnavailable, DriverError, DriverTask
from metalforge.drivers.bmc_guard import GUARD
from metalforge.drivers.failures import bmc_failed

SYSTEMS_PREFIX = "/redfish/v1/Systems/"

PROPERTIES: dict[str, str] = {
    "redfish_address": (
        "URL of the BMC, e.g. https://bmc.example.com or http://127.0.0.1:8000 "
        "(a bare host means https). Required."
    ),
    "redfish_system_id": (
        "Path of the system, e.g. /redfish/v1/Systems/1. Optional when the BMC "
        "manages exactly one system."
    ),
    "redfish_username": "User name for the BMC. Optional.",
    "redfish_password": "Password for the BMC. Optional.",
    "redfish_verify_ca": (
        "true (default) to verify the BMC's TLS certificate, false to skip it, "
        "or the path of a CA bundle."
    ),
}
"""``driver_info`` keys every redfish interface reads, for ``properties()``."""

LOG = logging.getLogger(__name__)

_TRUE = frozenset({"true", "1", "yes", "on", "y", "t"})
_FALSE = frozenset({"false", "0", "no", "off", "n", "f"})


@dataclass(frozen=True)
class RedfishInfo:
    """A node's BMC as ``driver_info`` describes it (checked)."""

    address: str
    """Scheme and authority only: ``https://host:port``."""
    system_id: str | None
    username: str | None
    password: str | None = field(repr=False)
    verify: bool | str

    @property
    def key(self) -> tuple[str, str | None, str | None, bool | str]:
        return (self.address, self.username, self.password, self.verify)

    @property
    def who(self) -> str:
        return self.username if self.username else "(none)"


def _optional_str(info: Mapping[str, Any], key: str, invalid: list[str]) -> str | None:
    value = info.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        invalid.append(f"{key} must be a string, not {type(value).__name__}")
        return None
    return value


def _address(raw: Any, invalid: list[str]) -> str | None:
    if not isinstance(raw, str) or not raw.strip():
        invalid.append(f"redfish_address must be a URL or host, not {raw!r}")
        return None
    text = raw.strip()
    if "://" not in text:
        text = f"https://{text}"
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        invalid.append(f"redfish_address {raw!r} is not a valid URL: {exc}")
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        invalid.append(f"redfish_address {raw!r} must be an http(s) URL with a host")
        return None
    if parts.username is not None or parts.password is not None:
        # The address is shown in every BMC error message: no credentials in it.
        invalid.append(
            "redfish_address must not carry credentials; use redfish_username and redfish_password"
        )
        return None
    return f"{parts.scheme}://{parts.netloc}"


def _verify(raw: Any, invalid: list[str]) -> bool | str:
    if raw is None or isinstance(raw, bool):
        return True if raw is None else raw
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        if os.path.exists(raw):
            return raw
    invalid.append(
        f"redfish_verify_ca must be true, false or the path of an existing CA bundle, not {raw!r}"
    )
    return True


def parse_driver_info(info: Mapping[str, Any]) -> RedfishInfo:
    """The node's BMC settings; ``DriverError`` names every missing or invalid key."""
    missing = [key for key in ("redfish_address",) if not info.get(key)]
    invalid: list[str] = []
    address = _address(info["redfish_address"], invalid) if not missing else None
    system_id = _optional_str(info, "redfish_system_id", invalid)
    if system_id is not None and not system_id.startswith("/"):
        system_id = SYSTEMS_PREFIX + system_id
    username = _optional_str(info, "redfish_username", invalid)
    password = _optional_str(info, "redfish_password", invalid)
    verify = _verify(info.get("redfish_verify_ca"), invalid)
    problems = []
    if missing:
        problems.append(f"missing driver_info: {', '.join(missing)}")
    problems.extend(invalid)
    if problems or address is None:
        raise DriverError("Invalid redfish driver_info: " + "; ".join(problems))
    return RedfishInfo(address, system_id, username, password, verify)


@dataclass(frozen=True)
class ClientOptions:
    """How patient to be with a BMC; one request never waits longer than these."""

    connect_timeout: float = 10.0
    """Seconds to open the TCP connection: a BMC that is down fails this fast."""
    read_timeout: float = 60.0
    """Seconds for an answer once connected; some BMCs are slow on actions."""
    attempts: int = 2
    """Tries per request on connection errors and (for GET) server-side errors."""
    retry_delay: float = 1.0
    """Seconds between those tries (sushy sleeps them; keep them short)."""


class _DeadlineConnector(sushy_connector.Connector):  # type: ignore[misc]
    """sushy's connector, whose connections the BMC guard's whole-call deadline cuts
    (``outbound_http``): its timeouts are per read, which a trickling BMC outlasts."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        # sushy builds its session here and offers no way to pass one in.
        outbound_http.mount(self._session)


class Connections:
    """One sushy client per BMC identity, shared by the threads of a service."""

    def __init__(self, options: ClientOptions | None = None) -> None:
        self.options = options or ClientOptions()
        self._clients: dict[tuple[str, str | None, str | None, bool | str], Any] = {}
        self._lock = threading.Lock()

    def client(self, info: RedfishInfo) -> Any:
        """The ``sushy.Sushy`` for ``info`` (created, and the service root read, on first use)."""
        with self._lock:
            found = self._clients.get(info.key)
        if found is not None:
            return found
        # Built outside the lock: a slow BMC must not stall calls to the others.
        opts = self.options
        url = f"{info.address}/redfish/v1/"
        connector = _DeadlineConnector(
            url,
            verify=info.verify,
            default_request_timeout=opts.read_timeout,
            connect_timeout=opts.connect_timeout,
            server_side_retries=opts.attempts,
            server_side_retries_delay=opts.retry_delay,
        )
        created = sushy.Sushy(
            url,
            # Empty, not None: requests deprecates non-string Basic credentials.
            username=info.username or "",
            password=info.password or "",
            verify=info.verify,
            connector=connector,
        )
        with self._lock:
            return self._clients.setdefault(info.key, created)

    def forget(self, info: RedfishInfo) -> None:
        with self._lock:
            dropped = self._clients.pop(info.key, None)
        if dropped is not None:
            _close_later([dropped])

    def clear(self) -> None:
        with self._lock:
            dropped = list(self._clients.values())
            self._clients.clear()
        _close_later(dropped)

    def close_all(self, timeout: float) -> None:
        """Log every client out of its BMC before the process ends, waiting at most
        ``timeout`` seconds (a BMC that does not answer keeps its session until it
        expires there; the process does not wait for it)."""
        with self._lock:
            dropped = list(self._clients.values())
            self._clients.clear()
        closing = _close_later(dropped)
        if closing is not None:
            closing.join(timeout)


def _close_later(clients: list[Any]) -> threading.Thread | None:
    """End the clients' Redfish sessions now, in a thread of their own.

    Left to the garbage collector, sushy's ``__del__`` would delete the
    session from whatever thread collects it -- possibly the API's event
    loop, blocked for a connect timeout when the BMC is the reason the
    client was dropped -- and BMCs have few session slots to leak.
    """

    def close() -> None:
        for client in clients:
            auth = getattr(client, "_auth", None)
            if auth is None:
                continue
            client._auth = None  # __del__ then has nothing left to do
            try:
                auth.close()
            except sushy_errors.SushyError as exc:  # the BMC may be gone: why it was dropped
                LOG.debug("closing a Redfish session failed: %s", exc)

    if not clients:
        return None
    thread = threading.Thread(target=close, name="redfish-close", daemon=True)
    thread.start()
    return thread


CONNECTIONS = Connections()
"""The clients of this process (interfaces are built without arguments by the registry)."""


def _reason(exc: BaseException) -> str:
    """The low-level cause of a connection failure, without requests' wrapping."""
    text = str(exc.__context__ or exc)
    errno = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if errno:
        return errno.group(1).strip().rstrip(".").lower()
    for marker, reason in (
        ("timed out", "the connection timed out"),
        ("CERTIFICATE_VERIFY_FAILED", "its TLS certificate could not be verified"),
        ("SSLError", "the TLS handshake failed"),
        ("RemoteDisconnected", "it closed the connection without answering"),
    ):
        if marker in text:
            return reason
    return text


def _http_detail(exc: Any) -> str:
    detail = getattr(exc, "detail", None)
    return str(detail) if detail else str(exc)


def translate(info: RedfishInfo, exc: Exception, doing: str) -> DriverError:
    """A sushy failure while ``doing`` something, as a message for ``last_error``."""
    bmc = f"Redfish BMC at {info.address}"
    if isinstance(exc, sushy_errors.ConnectionError):
        return BmcUnavailable(f"{bmc} is unreachable ({_reason(exc)}) while trying to {doing}")
    if isinstance(exc, sushy_errors.HTTPError):
        # 503: the BMC is up but busy (a firmware update, a reboot of its own).
        busy = exc.status_code == HTTPStatus.SERVICE_UNAVAILABLE
        return (BmcUnavailable if busy else DriverError)(_http_failure(bmc, info, exc, doing))
    if isinstance(exc, sushy_errors.InvalidParameterValueError):
        return DriverError(f"{bmc} does not accept what was asked while trying to {doing}: {exc}")
    if isinstance(exc, sushy_errors.MissingAttributeError | sushy_errors.MissingActionError):
        return DriverError(f"{bmc} does not support what is needed to {doing}: {exc}")
    if isinstance(exc, sushy_errors.SushyError):
        return DriverError(f"{bmc} failed while trying to {doing}: {exc}")
    return DriverError(f"{bmc}: unexpected {type(exc).__name__} while trying to {doing}: {exc}")


def _http_failure(bmc: str, info: RedfishInfo, exc: sushy_errors.HTTPError, doing: str) -> str:
    """What an HTTP error answer means: the BMC was reached, and said no.

    ``AccessError`` and ``ResourceNotFoundError`` are the ``HTTPError``s an
    operator can act on; any other status is reported with the BMC's detail.
    """
    if isinstance(exc, sushy_errors.AccessError):
        if exc.status_code == 401:
            return f"{bmc} refused the credentials for user {info.who}"
        return f"{bmc} denied user {info.who} permission to {doing}: {_http_detail(exc)}"
    if isinstance(exc, sushy_errors.ResourceNotFoundError):
        return f"{bmc} has no such resource while trying to {doing}: {exc}"
    return f"{bmc} answered HTTP {exc.status_code} while trying to {doing}: {_http_detail(exc)}"


_EXPECTED = (sushy_errors.SushyError,)


@contextmanager
def redfish_errors(info: RedfishInfo, doing: str) -> Iterator[None]:
    """Turn sushy failures in the block into ``DriverError``; drop a client that broke."""
    try:
        yield
    except _EXPECTED as exc:
        if isinstance(exc, sushy_errors.ConnectionError | sushy_errors.AccessError):
            CONNECTIONS.forget(info)
        bmc_failed("redfish", _kind(exc))
        raise translate(info, exc, doing) from exc


def _kind(exc: Exception) -> str:
    """The failure's kind, as metrics count it."""
    if isinstance(exc, sushy_errors.ConnectionError):
        return "timeout" if "timed out" in str(exc.__context__ or exc) else "connection"
    if isinstance(exc, sushy_errors.AccessError):
        return "auth"
    if isinstance(exc, sushy_errors.HTTPError):
        return "refused"
    return "protocol"


def _get_system(info: RedfishInfo, root: Any) -> Any:
    try:
        return root.get_system(info.system_id)
    except sushy_errors.ResourceNotFoundError:
        raise DriverError(
            f"Redfish BMC at {info.address} has no system {info.system_id} "
            "(check driver_info.redfish_system_id)"
        ) from None
    except sushy_errors.UnknownDefaultError:
        count = len(root.get_system_collection().members_identities)
        raise DriverError(
            f"Redfish BMC at {info.address} manages {count} systems; "
            "driver_info.redfish_system_id must say which one"
        ) from None


@contextmanager
def system(task: DriverTask, doing: str) -> Iterator[Any]:
    """The node's ``sushy`` System, freshly read; errors in the block become ``DriverError``.

    ``doing`` completes "while trying to ..." in messages, e.g. "power on".
    """
    info = parse_driver_info(task.node.driver_info)
    with GUARD.call("redfish", info.address), redfish_errors(info, doing):
        root = CONNECTIONS.client(info)
        yield _get_system(info, root)


@contextmanager
def root_and_system(task: DriverTask, doing: str) -> Iterator[tuple[Any, Any]]:
    """The BMC's ``sushy`` root and the node's System, for calls that need both (an update
    through the UpdateService, a task monitor); errors in the block become ``DriverError``."""
    info = parse_driver_info(task.node.driver_info)
    with GUARD.call("redfish", info.address), redfish_errors(info, doing):
        root = CONNECTIONS.client(info)
        yield root, _get_system(info, root)


@contextmanager
def event_service(task: DriverTask, doing: str) -> Iterator[Any]:
    """The BMC's ``sushy`` EventService; errors in the block become ``DriverError``.

    A BMC without one (the service root lists no ``EventService``) fails with
    a message saying so, naming the BMC.
    """
    info = parse_driver_info(task.node.driver_info)
    with GUARD.call("redfish", info.address), redfish_errors(info, doing):
        root = CONNECTIONS.client(info)
        try:
            service = root.get_event_service()
        except sushy_errors.MissingAttributeError:
            raise DriverError(
                f"Redfish BMC at {info.address} has no EventService, needed to {doing}"
            ) from None
        yield service


_FAILED_TASK_STATES = ("Exception", "Killed", "Cancelled", "Interrupted")


def task_failure(monitor: Any) -> str | None:
    """Why the BMC's finished task (behind ``monitor``, a sushy ``TaskMonitor``) failed,
    if it did: its state and messages. A monitor the BMC no longer serves is a task that
    finished."""
    try:
        found = monitor.get_task()
    except sushy_errors.ResourceNotFoundError:
        return None
    if found is None:
        return None
    state = getattr(found.task_state, "value", found.task_state)
    status = getattr(found.task_status, "value", found.task_status)
    if state in _FAILED_TASK_STATES or status == "Critical":
        messages = "; ".join(str(m.message) for m in found.messages or () if m.message)
        return f"task {state} ({status}){': ' + messages if messages else ''}"
    return None
