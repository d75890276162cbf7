"""Where a VIF (a tenant network port's id) is recorded on a port or a port group.

Ironic records an attached VIF in the port-like object's
``internal_info["tenant_vif_port_id"]``; older clients wrote
``extra["vif_port_id"]``, which Ironic still reads. Rules that depend on a
port carrying a VIF (a bond that forbids standalone ports) ask here.
"""

from __future__ import annotations

from typing import Any, Protocol

TENANT_VIF_KEY = "tenant_vif_port_id"
LEGACY_VIF_KEY = "vif_port_id"


class PortLike(Protocol):
    """A port or a port group: both record a VIF the same way."""

    @property
    def internal_info(self) -> dict[str, Any]: ...

    @property
    def extra(self) -> dict[str, Any]: ...


def vif_of(port: PortLike) -> str | None:
    """The VIF attached to ``port``, if any."""
    vif = (port.internal_info or {}).get(TENANT_VIF_KEY) or (port.extra or {}).get(LEGACY_VIF_KEY)
    return str(vif) if vif else None
