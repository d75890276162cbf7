"""What every role of the ``metalforge`` command builds first: the drivers, the database
and, where one runs, the conductor; and the stop signals a role waits on.

Apart from the command itself so that a conductor starts without loading the
HTTP API it does not serve (``metalforge.serving``): a restarted conductor
is back sooner and costs half the CPU to start.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from metalforge.conductor.context import ConductorContext
from metalforge.conductor.leadership import LeaderTerm, SingletonTask
from metalforge.conductor.process import ConductorProcess
from metalforge.conductor.registration import HostnameInUse
from metalforge.config import Settings
from metalforge.coordination.hashring import ConductorDirectory
from metalforge.db.engine import Database, RetryPolicy
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.hardware import DriverRegistry
from metalforge.drivers.redfish.connection import CONNECTIONS
from metalforge.services import rollout_waves
from metalforge.services.context import Services


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
    # Rollouts start flows as provision requests do: through the services, from a
    # singleton task of the conductors.
    svc = Services(
        settings=settings,
        db=db,
        drivers=registry,
        directory=ConductorDirectory(db, settings.conductor.heartbeat_timeout),
        notify=ctx.waker.notify,
    )
    advancing = [_rollout_task(svc)] if settings.conductor.rollout_interval > 0 else []
    return ConductorProcess(ctx, tasks=advancing)


def _rollout_task(svc: Services) -> SingletonTask:
    """The conductors' singleton task that advances rollouts, its writes under the term
    (the service knows rollouts; the conductor's process knows how to lead)."""

    def run(term: LeaderTerm) -> None:
        rollout_waves.advance(svc, term.write)

    return SingletonTask("rollouts", lambda ctx: ctx.settings.rollout_interval, run, log_runs=False)


def private_state_dir(settings: Settings) -> None:
    """The state directory (the SQLite database by default) is this user's alone."""
    path = settings.state_dir
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid == os.getuid():
        path.chmod(0o700)


SESSION_LOGOUT_WAIT = 5.0
"""Seconds a stopping process gives its BMC sessions' logouts."""


def stop_conductor(conductor: ConductorProcess, db: Database) -> None:
    """Stop within ``conductor.shutdown_timeout``: an item still inside a driver call then
    is not waited for (its conductor is offline, others take its node over); the process
    exits without joining its thread."""
    finished = conductor.stop()
    # BMCs serve few sessions: log this process's out rather than leave them to expire.
    CONNECTIONS.close_all(SESSION_LOGOUT_WAIT)
    db.dispose()
    if not finished:
        logging.shutdown()
        os._exit(0)


def stop_signals() -> threading.Event:
    """An event SIGTERM or SIGINT sets, installed before anything is started."""
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return stop


def wait_for(stop: threading.Event) -> None:
    while not stop.wait(1.0):
        pass
