"""A node's BIOS settings and firmware versions for the API: what its BMC last reported.

Both change only through steps (``bios.apply_configuration``,
``bios.factory_reset``, ``firmware.update``) in cleaning, servicing or a
deployment, which check their arguments before they touch the BMC.
"""

from __future__ import annotations

from metalforge.db import bios_settings, firmware_components
from metalforge.db.bios_settings import Stored
from metalforge.errors import not_found
from metalforge.services import lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version


def settings_of(svc: Services, ident: str, version: Version) -> list[Stored]:
    """The node's settings by name (none if its BIOS was never read)."""
    with svc.db.read() as session:
        node = lookup.find_node(session, ident, version)
        return bios_settings.listed(session, node.id)


def setting_of(svc: Services, ident: str, version: Version, name: str) -> tuple[str, Stored]:
    """The node's UUID and its setting ``name``; 404 if the node has no such setting."""
    with svc.db.read() as session:
        node = lookup.find_node(session, ident, version)
        stored = bios_settings.found(session, node.id, name)
    if stored is None:
        raise not_found(f"The BIOS setting {name} for node {node.uuid} could not be found.")
    return node.uuid, stored


def firmware_of(svc: Services, ident: str, version: Version) -> list[firmware_components.Stored]:
    """The node's firmware components by name (none if they were never read)."""
    with svc.db.read() as session:
        node = lookup.find_node(session, ident, version)
        return firmware_components.listed(session, node.id)
