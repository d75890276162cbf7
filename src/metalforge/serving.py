"""The roles that serve HTTP: the API alone, and the all-in-one (API, conductor and PXE
filter in one process).

Loaded only by the commands that serve (``metalforge.cli``), so that a
conductor or a one-off command never pays for importing the web stack.
"""

from __future__ import annotations

import gc
import ipaddress
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

import uvicorn

from metalforge.api.app import create_app
from metalforge.api.auth.policy import Policy
from metalforge.api.connections import bounded_protocol
from metalforge.api.inspector.app import InspectorSocketDispatcher, create_inspector_app
from metalforge.api.metrics_port import MetricsPort
from metalforge.api.wiring import ApiServices
from metalforge.config import Settings
from metalforge.coordination.hashring import ConductorDirectory
from metalforge.db.bmc_breakers import BreakerRecorder
from metalforge.db.engine import Database
from metalforge.db.notify import Notifier
from metalforge.drivers import failures
from metalforge.drivers.bmc_guard import GUARD
from metalforge.drivers.hardware import DriverRegistry
from metalforge.drivers.redfish.connection import CONNECTIONS
from metalforge.pxe_filter.dhcp import DhcpError
from metalforge.pxe_filter.setup import build_filter_host
from metalforge.redaction import mask_url
from metalforge.startup import (
    SESSION_LOGOUT_WAIT,
    StartupError,
    build_conductor,
    build_registry,
    open_database,
    private_state_dir,
    start_conductor,
    stop_conductor,
)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_auth(settings: Settings) -> None:
    if settings.api.auth_strategy != "noauth":
        return
    hosts = [settings.api.host]
    if settings.inspector.enabled:
        hosts.append(settings.inspector.host)
    for host in hosts:
        if not _is_loopback(host):
            raise StartupError(f"noauth is only allowed on a loopback address, not {host}")


def build_api(
    settings: Settings, db: Database, registry: DriverRegistry, notify: Any = None
) -> Any:
    directory = ConductorDirectory(db, settings.conductor.heartbeat_timeout)
    try:
        policy = Policy(settings.api.policy_file)
    except (OSError, ValueError) as exc:
        raise StartupError(f"cannot load the policy: {exc}") from exc
    services = ApiServices(
        settings=settings, db=db, drivers=registry, directory=directory, policy=policy
    )
    if notify is not None:
        services.notify = notify
    # An API process calls BMCs too (the boot device): its failures count with the rest.
    db.also_flush(failures.FAILURES)
    GUARD.configure(settings.conductor.bmc_guard, BreakerRecorder(db, settings.conductor.hostname))
    try:
        return create_app(services)
    except ValueError as exc:
        raise StartupError(str(exc)) from exc


def served_app(settings: Settings, app: Any) -> Any:
    """What the server runs: the API, and the inspector API on its own socket if enabled."""
    if not settings.inspector.enabled:
        return app
    inspector = create_inspector_app(app.state.services)
    return InspectorSocketDispatcher(app, inspector, settings.inspector.port)


def listening_sockets(settings: Settings) -> list[socket.socket]:
    """The API's socket and, when configured, the agents' endpoint and the inspector API's
    (one server serves them all)."""
    api = settings.api
    wanted = [(api.host, api.port)]
    if api.agent_host is not None:
        wildcard = api.agent_host in ("0.0.0.0", "::", "")
        if api.agent_port == api.port and (wildcard or api.agent_host == api.host):
            raise StartupError(
                "api.agent_host/agent_port must be another address than api.host/port "
                "(a wildcard agent_host needs its own agent_port)"
            )
        wanted.append((api.agent_host, api.agent_port))
    inspector = settings.inspector
    if inspector.enabled:
        if inspector.port in (api.port, api.agent_port if api.agent_host else None):
            raise StartupError("inspector.port must differ from the API's and the agents' ports")
        wanted.append((inspector.host, inspector.port))
    sockets = []
    for host, port in wanted:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise StartupError(f"cannot listen on {host}:{port}: {exc}") from exc
        sockets.append(sock)
    return sockets


def tls_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's HTTPS options for ``api.tls_cert_file``/``api.tls_key_file`` (none: HTTP)."""
    api = settings.api
    if api.tls_cert_file is None or api.tls_key_file is None:
        return {}
    for path in (api.tls_cert_file, api.tls_key_file):
        if not path.is_file():
            raise StartupError(f"TLS file {path} does not exist")
    return {"ssl_certfile": str(api.tls_cert_file), "ssl_keyfile": str(api.tls_key_file)}


def server_config(settings: Settings, app: Any, *, log_level: str) -> uvicorn.Config:
    """How every socket of this process serves ``app``: TLS when configured, and the
    bounds on each connection (``api.connections``)."""
    return uvicorn.Config(
        served_app(settings, app),
        host=settings.api.host,
        port=settings.api.port,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
        http=bounded_protocol(settings.api.header_timeout),
        limit_concurrency=settings.api.max_connections,
        **tls_options(settings),
    )


def serve(settings: Settings, app: Any) -> None:
    # Everything built so far lives as long as the process: leave it out of the
    # collector's full passes, which otherwise walk it whenever a big response
    # (a page of a thousand nodes) has allocated enough to trigger one.
    gc.freeze()
    config = server_config(settings, app, log_level=settings.log_level.lower())
    server = uvicorn.Server(config)
    # uvicorn shuts down on SIGTERM, then raises the signal again once it has put
    # the previous handler back. That handler must not raise: the signal may land
    # while the interpreter runs a weakref or finaliser callback, where an exception
    # is printed and dropped, and the process would then serve on forever. It only
    # asks the server to stop, and ``run`` returns to the caller's clean-up
    # (stopping the conductor, leaving the PXE filter blocking).
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, _exit_quietly):
        signal.signal(signal.SIGTERM, lambda _signum, _frame: _stop_serving(server))
    if _termination.is_set():  # a SIGTERM during start-up whose exit was dropped
        server.should_exit = True
    end_streams_when_stopping(app, server)
    metrics_port = open_metrics_port(settings, app)
    try:
        server.run(sockets=listening_sockets(settings))
    finally:
        if metrics_port is not None:
            metrics_port.stop()


def open_metrics_port(settings: Settings, app: Any) -> MetricsPort | None:
    """The unauthenticated ``/metrics`` port, started, if ``api.metrics_port`` asks for one."""
    if settings.api.metrics_port is None:
        return None
    port = MetricsPort(app.state.services, settings.api.metrics_host, settings.api.metrics_port)
    port.start()
    return port


def end_streams_when_stopping(app: Any, server: uvicorn.Server) -> None:
    """Event streams end once the server is told to stop: an open stream never finishes
    on its own, and would hold the shutdown for its whole grace period."""
    state = getattr(app, "state", None)
    if state is not None:
        state.stopping = lambda: server.should_exit


_termination = threading.Event()
"""Set by the first SIGTERM, so that it is honoured even if its ``SystemExit`` is dropped."""


def _exit_quietly(_signum: int, _frame: Any) -> None:
    """SIGTERM before the server runs: unwind through the caller's clean-up."""
    _termination.set()
    raise SystemExit(0)


def _stop_serving(server: uvicorn.Server) -> None:
    """SIGTERM while (or after) the server runs: its main loop sees the flag within a tick."""
    _termination.set()
    server.should_exit = True


def banner(settings: Settings) -> None:
    api = settings.api
    scheme = "https" if api.tls_cert_file else "http"
    url = f"{scheme}://{api.host}:{api.port}"
    database = mask_url(settings.database.url)
    if api.auth_strategy == "noauth":
        how = f"export OS_AUTH_TYPE=none OS_ENDPOINT={url}"
        sdk = f"openstack.connect(auth_type='none', baremetal_endpoint_override='{url}')"
    elif api.auth_strategy == "http_basic":
        how = f"export OS_AUTH_TYPE=http_basic OS_ENDPOINT={url} OS_USERNAME=... OS_PASSWORD=..."
        sdk = f"openstack.connect(auth_type='http_basic', endpoint='{url}', username=..., ...)"
    else:
        how = "use your Keystone credentials (OS_AUTH_URL, OS_USERNAME, ...)"
        sdk = "openstack.connect(cloud=...)"
    print(
        f"metalforge is serving {url} ({api.auth_strategy}, database {database})\n"
        f"  baremetal CLI:  {how}; baremetal node list\n"
        f"  openstacksdk:   {sdk}\n"
        f"  dashboard:      {url}/dashboard/\n"
        + (
            f"  ramdisk agents: {scheme}://{api.agent_host}:{api.agent_port} "
            "(lookup, heartbeat and inspection reports only)\n"
            if api.agent_host
            else ""
        )
        + (
            f"  inspector API:  {scheme}://{settings.inspector.host}:{settings.inspector.port} "
            "(openstack baremetal introspection ... with INSPECTOR_URL set to it)\n"
            if settings.inspector.enabled
            else ""
        ),
        flush=True,
    )


def cmd_all_in_one(settings: Settings) -> None:
    check_auth(settings)
    private_state_dir(settings)
    db = open_database(settings)
    db.upgrade()
    registry = build_registry(settings)
    conductor = build_conductor(settings, db, registry)
    filter_host = build_filter_host(settings, db)
    # From here a SIGTERM, even before the server is up, ends in the clean-up below.
    signal.signal(signal.SIGTERM, _exit_quietly)
    started: list[Callable[[], None]] = []
    try:
        start_conductor(conductor)
        started.append(lambda: stop_conductor(conductor, db))
        if filter_host is not None:
            try:
                filter_host.start()
            except DhcpError as exc:
                raise StartupError(str(exc)) from exc
            started.append(filter_host.stop)
        app = build_api(settings, db, registry, notify=conductor.ctx.waker.notify)
        banner(settings)
        serve(settings, app)
    finally:
        # A second SIGTERM must not cut the clean-up short (it is bounded by
        # conductor.shutdown_timeout).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for stop in reversed(started):  # the filter first, the conductor last
            stop()


def cmd_api(settings: Settings) -> None:
    check_auth(settings)
    db = open_database(settings)
    registry = build_registry(settings)
    # Conductors live in other processes: on PostgreSQL, NOTIFY wakes them at once.
    notify = None if db.is_sqlite else Notifier(db)
    banner(settings)
    try:
        serve(settings, build_api(settings, db, registry, notify=notify))
    finally:
        CONNECTIONS.close_all(SESSION_LOGOUT_WAIT)  # BMCs serve few sessions
        db.dispose()  # this process's last counts go to the totals
