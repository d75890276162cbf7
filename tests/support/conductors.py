"""Conductor services built by hand on a database, for tests below the process level."""

from __future__ import annotations

from metalforge.conductor.context import ConductorContext
from metalforge.conductor.process import ConductorProcess
from metalforge.config import ConductorSettings
from metalforge.db.engine import Database
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.hardware import DriverRegistry


def registered_conductor(db: Database, host: str) -> ConductorProcess:
    """A fake-hardware conductor named ``host``, registered (alive) but not started."""
    ctx = ConductorContext(
        hostname=host,
        db=db,
        drivers=DriverRegistry([HARDWARE_TYPES["fake-hardware"]]),
        settings=ConductorSettings(hostname=host, heartbeat_timeout=30),
    )
    service = ConductorProcess(ctx)
    service.register()
    return service
