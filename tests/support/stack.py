"""An in-process metalforge (API + conductor) for tests, on any database."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi.testclient import TestClient

from metalforge.conductor.process import ConductorProcess
from metalforge.config import InspectorSettings, Settings, load_settings
from metalforge.db.engine import Database, RetryPolicy
from metalforge.db.models import utcnow
from metalforge.drivers.hardware import DriverRegistry
from metalforge.serving import (
    build_api,
    end_streams_when_stopping,
    listening_sockets,
    server_config,
    tls_options,
)
from metalforge.startup import build_conductor, build_registry
from metalforge_lab.ports import free_port
from tests.support.migrated import prepare

FAST_CONDUCTOR = {
    "heartbeat_interval": 0.5,
    "heartbeat_timeout": 5.0,
    "poll_interval": 0.2,
    "async_poll_interval": 0.1,
    "takeover_interval": 1.0,
    "affinity_grace": 0.5,
    "workers": 8,
    # A BMC that does not answer is retried as in production, on a shorter budget.
    "bmc_retry_budget": 1.0,
    "bmc_retry_interval": 0.2,
    # The tests' nodes are fake unless a test enables a real protocol itself.
    "enabled_hardware_types": ["fake-hardware"],
}


def test_settings(db_url: str, **conductor: Any) -> Settings:
    return load_settings(
        database={"url": db_url},
        conductor={**FAST_CONDUCTOR, "hostname": "test-conductor", **conductor},
        # Each served stack's inspector API on a port of its own.
        inspector={"port": free_port()},
    )


test_settings.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@dataclass
class Stack:
    settings: Settings
    db: Database
    conductor: ConductorProcess
    app: Any
    client: TestClient

    def close_client(self) -> None:
        """End the test client and the event loop its requests ran on."""
        self.client.__exit__(None, None, None)

    def stop(self) -> None:
        self.close_client()
        self.conductor.stop()
        self.db.dispose()


class AdjustableClock:
    """A host clock a test moves forward: timeouts of minutes pass at once."""

    def __init__(self) -> None:
        self.ahead = dt.timedelta(0)

    def __call__(self) -> dt.datetime:
        return utcnow() + self.ahead

    def advance(self, seconds: float) -> None:
        self.ahead += dt.timedelta(seconds=seconds)


def start_stack(
    settings: Settings,
    *,
    start_conductor: bool = True,
    registry: DriverRegistry | None = None,
    clock: AdjustableClock | None = None,
) -> Stack:
    chosen = settings.database
    prepare(chosen.url)
    db = Database(
        chosen.url,
        local_clock=clock or utcnow,
        retry=RetryPolicy(chosen.retry_count, chosen.retry_interval),
        connect_timeout=chosen.connect_timeout,
    )
    db.upgrade()
    registry = registry or build_registry(settings)
    conductor = build_conductor(settings, db, registry)
    if start_conductor:
        conductor.start()
    else:
        conductor.register()
    app = build_api(settings, db, registry, notify=conductor.ctx.waker.notify)
    # With an agents' endpoint configured only the operator API's own socket
    # serves the whole API: the test client then calls as if on that socket.
    base = "http://testserver"
    if settings.api.agent_host is not None:
        base = f"http://{settings.api.host}:{settings.api.port}"
    client = TestClient(app, base_url=base, raise_server_exceptions=True)
    # Entered, the client keeps one event loop for all its requests rather than
    # starting a thread and a loop for each (a quarter of a request's cost).
    client.__enter__()
    return Stack(settings, db, conductor, app, client)


DEFAULT_INSPECTOR_PORT = InspectorSettings().port


class LiveServer:
    """The all-in-one service on a real port, for real clients (CLI, openstacksdk).

    Served over HTTPS when the settings name a certificate and key
    (``api.tls_cert_file``, ``api.tls_key_file``), as ``metalforge`` serves
    them; ``url`` then starts with ``https://``.
    """

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        inspector = stack.settings.inspector
        # Parallel workers would fight over the default port: each served stack needs its own.
        assert not inspector.enabled or inspector.port != DEFAULT_INSPECTOR_PORT, (
            "a served stack needs an inspector port of its own: inspector={'port': free_port()}"
        )
        api = stack.settings.api
        # With an agents' endpoint the app knows its operator port (see
        # AgentEndpointFilter): serve there; the test picked a free one.
        agent_endpoint = api.agent_host is not None
        self.port = api.port if agent_endpoint else free_port()
        tls = tls_options(stack.settings)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        # As the service serves it (TLS, connection bounds), on the port the test picked.
        on_port = stack.settings.model_copy(
            update={"api": stack.settings.api.model_copy(update={"port": self.port})}
        )
        config = server_config(on_port, stack.app, log_level="warning")
        self.server = uvicorn.Server(config)
        end_streams_when_stopping(stack.app, self.server)
        # The agents' endpoint, when configured, is served by the same server.
        self.sockets = listening_sockets(
            stack.settings.model_copy(
                update={"api": stack.settings.api.model_copy(update={"port": self.port})}
            )
        )
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": self.sockets}, daemon=True
        )

    def start(self) -> None:
        self.thread.start()
        import time

        deadline = time.monotonic() + 15
        while not self.server.started:
            # A server that cannot start (a bad certificate) ends its thread at once.
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@contextmanager
def serving(settings: Settings) -> Iterator[LiveServer]:
    """A stack (API and conductor) for ``settings`` on a real port, stopped afterwards."""
    stack = start_stack(settings)
    try:
        server = LiveServer(stack)
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        stack.stop()
