"""Conductor services built by hand on a database, for tests below the process level."""

from __future__ import annotations

from metalforge.conductor.context import ConductorContext
from metalforge.conductor.leadership import LeaderTerm
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


def term_of(process: ConductorProcess, role: str) -> LeaderTerm:
    """``process``'s term in ``role``, won or renewed now (it must be free or its own)."""
    elector = process.leadership.elector
    epoch = elector.campaign(role)
    assert epoch is not None, f"{process.ctx.hostname} could not win the {role} role"
    return LeaderTerm(process.ctx, role, elector.member_id, epoch)
