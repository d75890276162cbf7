"""A client of ironic-python-agent's command API (``{agent_url}/v1/commands/``).

The agent token travels in the query string, as IPA expects. With IPA's
auto-TLS the agent serves HTTPS with a self-signed certificate it sent in its
heartbeat; requests are verified against exactly that certificate. The
session ignores the environment (``trust_env``): ``REQUESTS_CA_BUNDLE`` would
otherwise replace the certificate silently and fail every call.

Errors: ``AgentUnreachable`` (no answer: the agent may be rebooting or dead,
the caller decides from the heartbeats), ``AgentBusy`` (409, another command
runs), ``AgentCommandError`` (any other refusal, with the agent's message).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from metalforge.drivers.base import DriverError
from metalforge.drivers.failures import agent_failed


class AgentError(DriverError):
    """The agent could not be asked, or refused."""


class AgentUnreachable(AgentError):
    """No answer from the agent's API (connection refused, timed out, TLS failure)."""


class AgentBusy(AgentError):
    """The agent is running another asynchronous command."""


class AgentCommandError(AgentError):
    """The agent answered with an error."""


@dataclass(frozen=True, slots=True)
class CommandResult:
    """One entry of the agent's command history."""

    id: str
    name: str
    status: str
    """``RUNNING``, ``SUCCEEDED``, ``FAILED`` or ``CLEAN_VERSION_MISMATCH``."""
    error: Any
    result: Any

    @classmethod
    def parse(cls, body: Any) -> CommandResult:
        if not isinstance(body, dict) or "command_status" not in body:
            raise AgentCommandError(
                f"the agent answered with something that is not a command: {body!r}"
            )
        return cls(
            id=str(body.get("id", "")),
            name=str(body.get("command_name", "")),
            status=str(body["command_status"]),
            error=body.get("command_error"),
            result=body.get("command_result"),
        )

    def error_message(self) -> str:
        error = self.error
        if isinstance(error, dict):
            # IPA: a generic ``message`` ("Deploy step failed") and the real cause in ``details``.
            parts = [str(error[key]) for key in ("message", "details") if error.get(key)]
            return ": ".join(parts) if parts else str(error)
        return str(error)


_CA_DIR: list[Path] = []
_CA_LOCK = threading.Lock()


def _ca_file(pem: str) -> str:
    """A file holding ``pem``, so requests can verify the agent against exactly it.

    The files live in a directory this process created (``mkdtemp``: mode
    0700, a name no one could have chosen in advance), so no other local user
    can plant a certificate there. Files are named by the certificate's
    digest and written once.
    """
    digest = hashlib.sha256(pem.encode()).hexdigest()[:32]
    with _CA_LOCK:
        if not _CA_DIR:
            _CA_DIR.append(Path(tempfile.mkdtemp(prefix="metalforge-agent-ca-")))
        path = _CA_DIR[0] / f"{digest}.pem"
        if not path.exists():
            handle, partial = tempfile.mkstemp(dir=_CA_DIR[0], suffix=".tmp")
            with os.fdopen(handle, "w") as out:
                out.write(pem)
            os.replace(partial, path)
    return str(path)


class AgentClient:
    """Talks to one agent, with its token and, for HTTPS, its own certificate."""

    def __init__(self, url: str, token: str, verify_ca: str | None, timeout: float) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._verify: bool | str = _ca_file(verify_ca) if verify_ca else True
        self._timeout = timeout
        self._http = requests.Session()
        self._http.trust_env = False

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        params = {**kwargs.pop("params", {}), "agent_token": self._token}
        try:
            response = self._http.request(
                method,
                f"{self.url}{path}",
                params=params,
                timeout=self._timeout,
                verify=self._verify,
                **kwargs,
            )
        except requests.RequestException as exc:
            agent_failed("unreachable")
            raise AgentUnreachable(
                f"the agent at {self.url} did not answer {what}: {_reason(exc)}"
            ) from None
        if response.status_code == 409:
            agent_failed("busy")
            raise AgentBusy(f"the agent at {self.url} is busy with another command ({what})")
        if response.status_code >= 400:
            agent_failed("refused")
            raise AgentCommandError(
                f"the agent at {self.url} refused {what} with HTTP {response.status_code}: "
                f"{scrub(_fault(response))}"
            )
        try:
            return response.json()
        except ValueError as exc:
            agent_failed("refused")
            raise AgentCommandError(
                f"the agent at {self.url} sent invalid JSON for {what}"
            ) from exc

    def run(self, name: str, params: dict[str, Any], *, wait: bool = False) -> CommandResult:
        """Start command ``name`` (``clean.execute_clean_step``...); ``wait``: until it ends."""
        body = self._call(
            "POST",
            "/v1/commands/",
            name,
            params={"wait": "true" if wait else "false"},
            json={"name": name, "params": params},
        )
        return CommandResult.parse(body)

    def commands(self) -> list[CommandResult]:
        """The agent's command history, oldest first."""
        body = self._call("GET", "/v1/commands/", "the command status request")
        items = body.get("commands") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise AgentCommandError(f"the agent at {self.url} sent no command list: {body!r}")
        return [CommandResult.parse(item) for item in items]

    def command(self, command_id: str) -> CommandResult | None:
        """Command ``command_id`` from the history; ``None`` if the agent does not know it."""
        for item in self.commands():
            if item.id == command_id:
                return item
        return None


_TOKEN_IN_TEXT = re.compile(r"agent_token=[^&\s'\"]*")


def scrub(text: str) -> str:
    """``text`` without the agent token (requests puts the whole URL in its errors)."""
    return _TOKEN_IN_TEXT.sub("agent_token=***", text)


_REASONS: tuple[tuple[type[requests.RequestException], str], ...] = (
    (
        requests.exceptions.SSLError,
        "its TLS certificate does not match the one it sent in its heartbeat",
    ),
    (requests.exceptions.ConnectTimeout, "connection timed out"),
    (requests.exceptions.ReadTimeout, "no answer within the timeout"),
)
"""Failures whose kind says why, first match wins: an ``SSLError`` and a
``ConnectTimeout`` are also ``ConnectionError``s, which ``_connection_failure`` reads."""

_CONNECTION_FAILURES = (
    ("Connection refused", "connection refused"),
    ("No route to host", "no route to host"),
)
"""What the OS said, found in the text requests wraps it in, and how to put it."""


def _reason(exc: requests.RequestException) -> str:
    """Why a request failed, in words an operator can act on, never with the token."""
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    if isinstance(exc, requests.exceptions.ConnectionError):
        return _connection_failure(str(exc))
    return scrub(type(exc).__name__)


def _connection_failure(text: str) -> str:
    """Why a connection failed: requests names only its own error, the cause is in the text."""
    for marker, reason in _CONNECTION_FAILURES:
        if marker in text:
            return reason
    return "connection failed"


def _fault(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict):
        return str(body.get("faultstring") or body.get("message") or body)[:500]
    return str(body)[:500]
