"""A node's BIOS settings for the API: what its BMC last reported, and nothing to change.

Settings change only through BIOS steps (``bios.apply_configuration``,
``bios.factory_reset``) in cleaning, servicing or a deployment, which check
values against the BMC's registry before they touch the BMC.
"""

from __future__ import annotations

from metalforge.db import bios_settings
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
