"""The ``metalforge`` command: every role, and schema upgrades.

Settings are read here, once, and passed down to what is built.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

from metalforge.api.app import create_app
from metalforge.api.auth.policy import Policy
from metalforge.api.connections import bounded_protocol
from metalforge.api.inspector.app import InspectorSocketDispatcher, create_inspector_app
from metalforge.api.metrics_port import MetricsPort
from metalforge.api.wiring import ApiServices
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.process import ConductorProcess
from metalforge.conductor.registration import HostnameInUse
from metalforge.config import Settings, load_settings
from metalforge.coordination.hashring import ConductorDirectory
from metalforge.db import queue
from metalforge.db.engine import Database, RetryPolicy
from metalforge.db.models import PxeFilterHost
from metalforge.db.notify import Listener, Notifier
from metalforge.drivers import failures
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.hardware import DriverRegistry
from metalforge.pxe_filter.service import STATUS_EVERY, host_statuses
from metalforge.pxe_filter.setup import FilterHost, build_driver, build_filter_host
from metalforge.redaction import mask_url

LOG = logging.getLogger("metalforge")


class StartupError(SystemExit):
    """A configuration that cannot work: stop with a clear message."""

    def __init__(self, message: str) -> None:
        super().__init__(f"metalforge: {message}")


def build_registry(settings: Settings) -> DriverRegistry:
    unknown = [n for n in settings.conductor.enabled_hardware_types if n not in HARDWARE_TYPES]
    if unknown:
        raise StartupError(
            f"unknown hardware type(s) {', '.join(unknown)}; "
            f"available: {', '.join(sorted(HARDWARE_TYPES))}"
        )
    conductor = settings.conductor
    overrides = {
        "clean": conductor.clean_step_priority_override,
        "deploy": conductor.deploy_step_priority_override,
    }
    try:
        return DriverRegistry(
            (HARDWARE_TYPES[n] for n in conductor.enabled_hardware_types), overrides
        )
    except ValueError as exc:
        raise StartupError(str(exc)) from exc


def open_database(settings: Settings) -> Database:
    chosen = settings.database
    return Database(
        chosen.url,
        pool_size=chosen.pool_size,
        retry=RetryPolicy(chosen.retry_count, chosen.retry_interval),
        connect_timeout=chosen.connect_timeout,
    )


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _check_auth(settings: Settings) -> None:
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


def start_conductor(conductor: ConductorProcess) -> None:
    """Start a conductor of this process; it ends the process if its hostname is taken."""
    conductor.on_fatal = lambda: os.kill(os.getpid(), signal.SIGTERM)
    try:
        conductor.start()
    except HostnameInUse as exc:
        raise StartupError(str(exc)) from exc


def build_conductor(settings: Settings, db: Database, registry: DriverRegistry) -> ConductorProcess:
    ctx = ConductorContext(
        hostname=settings.conductor.hostname, db=db, drivers=registry, settings=settings.conductor
    )
    return ConductorProcess(ctx)


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


def _serve(settings: Settings, app: Any) -> None:
    # Everything built so far lives as long as the process: leave it out of the
    # collector's full passes, which otherwise walk it whenever a big response
    # (a page of a thousand nodes) has allocated enough to trigger one.
    gc.freeze()
    config = server_config(settings, app, log_level=settings.log_level.lower())
    # uvicorn shuts down on SIGTERM, then raises the signal again once it has put
    # the previous handler back: with the default handler the process would die
    # there, before the caller's clean-up (stopping the conductor, leaving the PXE
    # filter blocking). ``_exit_quietly`` turns it into an orderly exit instead.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_quietly)
    server = uvicorn.Server(config)
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


def _exit_quietly(_signum: int, _frame: Any) -> None:
    raise SystemExit(0)


def _banner(settings: Settings) -> None:
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


def _private_state_dir(settings: Settings) -> None:
    """The state directory (the SQLite database by default) is this user's alone."""
    path = settings.state_dir
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid == os.getuid():
        path.chmod(0o700)


def _stop_conductor(conductor: ConductorProcess, db: Database) -> None:
    """Stop within ``conductor.shutdown_timeout``: an item still inside a driver call then
    is not waited for (its conductor is offline, others take its node over); the process
    exits without joining its thread."""
    finished = conductor.stop()
    db.dispose()
    if not finished:
        logging.shutdown()
        os._exit(0)


def cmd_all_in_one(settings: Settings) -> None:
    _check_auth(settings)
    _private_state_dir(settings)
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
        started.append(lambda: _stop_conductor(conductor, db))
        if filter_host is not None:
            filter_host.start()
            started.append(filter_host.stop)
        app = build_api(settings, db, registry, notify=conductor.ctx.waker.notify)
        _banner(settings)
        _serve(settings, app)
    finally:
        # A second SIGTERM must not cut the clean-up short (it is bounded by
        # conductor.shutdown_timeout).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for stop in reversed(started):  # the filter first, the conductor last
            stop()


def cmd_api(settings: Settings) -> None:
    _check_auth(settings)
    db = open_database(settings)
    registry = build_registry(settings)
    # Conductors live in other processes: on PostgreSQL, NOTIFY wakes them at once.
    notify = None if db.is_sqlite else Notifier(db)
    _banner(settings)
    try:
        _serve(settings, build_api(settings, db, registry, notify=notify))
    finally:
        db.dispose()  # this process's last counts go to the totals


def cmd_conductor(settings: Settings) -> None:
    db = open_database(settings)
    registry = build_registry(settings)
    conductor = build_conductor(settings, db, registry)
    stop = _stop_signals()
    start_conductor(conductor)
    listener = None
    if not db.is_sqlite:
        listener = Listener(settings.database.url, conductor.ctx.waker.notify)
        listener.start()
    try:
        _wait_for(stop)
    finally:
        if listener is not None:
            listener.stop()
        _stop_conductor(conductor, db)


def _stop_signals() -> threading.Event:
    """An event SIGTERM or SIGINT sets, installed before anything is started."""
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return stop


def _wait_for(stop: threading.Event) -> None:
    while not stop.wait(1.0):
        pass


def cmd_pxe_filter(settings: Settings, args: argparse.Namespace) -> None:
    """This host's PXE filter (one per host running the inspection DHCP service), or
    every host's status."""
    db = open_database(settings)
    try:
        if args.action == "status":
            print(render_filter_hosts(host_statuses(db), db.now()))
            return
        if args.action == "block":
            _block_filter(settings)
            return
        filter_host = build_filter_host(settings, db)
        if filter_host is None:
            raise StartupError("pxe_filter.driver is noop: there is nothing to run")
        if db.is_sqlite:
            raise StartupError(
                "on SQLite the all-in-one runs the PXE filter itself (set pxe_filter.driver "
                "there): another process would not hear of changes; a separate "
                "pxe-filter process needs PostgreSQL"
            )
        _run_filter_host(filter_host)
    finally:
        db.dispose()


def _block_filter(settings: Settings) -> None:
    """Make this host answer nobody, as a stopped filter leaves it (a unit's stop hook)."""
    driver = build_driver(settings)
    if driver is None:
        raise StartupError("pxe_filter.driver is noop: there is nothing to block")
    driver.block()
    print(f"this host's PXE filter ({driver.name}) now answers nobody")


def _run_filter_host(filter_host: FilterHost) -> None:
    stop = _stop_signals()
    LOG.info("PXE filter starting (blocking until it has synced)")
    filter_host.start()
    try:
        _wait_for(stop)
    finally:
        filter_host.stop()
        LOG.info("PXE filter stopped; this host's DHCP service is blocked")


def render_filter_hosts(hosts: list[PxeFilterHost], now: dt.datetime) -> str:
    """Every filter host's last known state, one line each; a host silent for three
    status periods is marked gone (its mode is what it last said, not what it does)."""
    if not hosts:
        return "no PXE filter host has reported"
    lines = [
        f"{'HOST':<24}  {'DRIVER':<8}  {'MODE':<8}  {'ALLOWED':>7}  {'DENIED':>7}  "
        f"{'UNKNOWN':<7}  {'SEEN':>9}  {'SYNCED':<25}  ERROR"
    ]
    for host in hosts:
        synced = host.synced_at.isoformat(timespec="seconds") if host.synced_at else "-"
        silent = (now - host.updated_at).total_seconds()
        seen = f"{silent:.0f}s ago" if silent < 3 * STATUS_EVERY else "gone?"
        lines.append(
            f"{host.hostname:<24}  {host.driver:<8}  {host.mode:<8}  {host.allowed:>7}  "
            f"{host.denied:>7}  {'allow' if host.unknown_allowed else 'deny':<7}  "
            f"{seen:>9}  {synced:<25}  {host.error or ''}"
        )
    return "\n".join(lines)


def cmd_db_upgrade(settings: Settings) -> None:
    db = open_database(settings)
    db.upgrade()
    db.dispose()
    print("database schema is up to date")


def cmd_work(settings: Settings, args: argparse.Namespace) -> None:
    """The operator's view of the work queue: the backlog, dead-lettered items, replay."""
    db = open_database(settings)
    try:
        if args.action == "list":
            with db.read() as session:
                found = queue.entries(session, dead=args.dead)
            print(render_work_items(found, dead=args.dead))
            return
        with db.write() as session:
            replayed = queue.replay(session, args.item)
        if not replayed:
            raise StartupError(f"work item {args.item} is not dead-lettered")
        print(f"work item {args.item} is queued again")
    finally:
        db.dispose()


def render_work_items(found: list[queue.QueueEntry], *, dead: bool) -> str:
    """A table an operator reads at a glance (reasons were scrubbed when stored)."""
    if not found:
        return "no dead-lettered work items" if dead else "no unfinished work items"
    lines = [f"{'ID':>6}  {'KIND':<10}  {'NODE':<36}  {'STATE':<8}  {'FAILURES':>8}  REASON"]
    for item in found:
        lines.append(
            f"{item.id:>6}  {item.kind:<10}  {item.node_uuid or '-':<36}  {item.state:<8}  "
            f"{item.failures:>8}  {item.reason or ''}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="metalforge", description=__doc__)
    parser.add_argument("--config", type=Path, help="TOML configuration file")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("all-in-one", help="API and conductor in one process (the default setup)")
    sub.add_parser("api", help="the HTTP API only")
    sub.add_parser("conductor", help="a conductor only")
    db_parser = sub.add_parser("db", help="database schema management")
    db_parser.add_argument("action", choices=["upgrade"])
    work_parser = sub.add_parser("work", help="the work queue: dead-lettered items")
    work_sub = work_parser.add_subparsers(dest="action", required=True)
    listing = work_sub.add_parser("list", help="list work items")
    listing.add_argument(
        "--dead", action="store_true", help="the dead-lettered items (default: unfinished ones)"
    )
    replaying = work_sub.add_parser("replay", help="queue a dead-lettered item again")
    replaying.add_argument("item", type=int, help="the work item's id")
    filter_parser = sub.add_parser(
        "pxe-filter", help="this host's PXE filter (beside the inspection DHCP service)"
    )
    filter_parser.add_argument(
        "action",
        nargs="?",
        default="run",
        choices=["run", "status", "block"],
        help="run the filter (default), show every filter host's status, or make this "
        "host answer nobody (after its service was killed)",
    )
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
    except (FileNotFoundError, ValueError) as exc:
        raise StartupError(str(exc)) from exc
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    commands: dict[str, Callable[[Settings], None]] = {
        "all-in-one": cmd_all_in_one,
        "api": cmd_api,
        "conductor": cmd_conductor,
        "db": cmd_db_upgrade,
        "work": lambda chosen: cmd_work(chosen, args),
        "pxe-filter": lambda chosen: cmd_pxe_filter(chosen, args),
    }
    commands[args.command](settings)


if __name__ == "__main__":
    main()
