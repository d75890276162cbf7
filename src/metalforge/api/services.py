"""What the API needs, built once by the entry point and stored on the app."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request

from metalforge.conductor.hashring import ConductorDirectory
from metalforge.config import Settings
from metalforge.db.engine import Database
from metalforge.drivers.hardware import DriverRegistry


@dataclass
class ApiServices:
    settings: Settings
    db: Database
    drivers: DriverRegistry
    directory: ConductorDirectory
    notify: Callable[[], None] = field(default=lambda: None)
    """Wakes the conductors after work was queued (in-process or NOTIFY)."""

    def preferred_conductor(self, node_uuid: str, driver: str, group: str) -> str | None:
        return self.directory.owner(node_uuid, driver, group)


def services(request: Request) -> ApiServices:
    svc: ApiServices = request.app.state.services
    return svc


def base_url(request: Request) -> str:
    """The externally visible base URL, for links and ``next``."""
    configured: str | None = request.app.state.services.settings.api.public_endpoint
    if configured:
        return configured.rstrip("/")
    return str(request.base_url).rstrip("/")
