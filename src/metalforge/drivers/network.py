"""Network interfaces: whether a node's VIFs (tenant network ports) are recorded on it.

metalforge runs without OpenStack Networking, so neither interface binds
switch ports; they differ as Ironic's do without Neutron's help:

``noop`` (the default, as in Ironic without Neutron and in Metal3)
    The node's network is not metalforge's business: attaching a VIF is
    accepted and changes nothing, detaching one too, and the node lists no
    VIFs. What ports recorded earlier is kept, not shown.
``flat``
    Every node shares one network and a VIF is bookkeeping: attaching
    records it on a free port or port group of the node (Ironic's choice of
    which), listing shows it, detaching forgets it (``services.vifs``).
"""

from __future__ import annotations

from typing import ClassVar

from metalforge.drivers.base import DriverTask, Interface


class NetworkInterface(Interface):
    interface_type = "network"

    records_vifs: ClassVar[bool]
    """Attached VIFs are recorded on the node's ports and listed; otherwise attaching and
    detaching are accepted and do nothing, and no VIF is listed."""

    def validate(self, task: DriverTask) -> None:
        return None


class NoopNetwork(NetworkInterface):
    name = "noop"
    records_vifs = False


class FlatNetwork(NetworkInterface):
    name = "flat"
    records_vifs = True


NETWORK_INTERFACES: tuple[type[Interface], ...] = (NoopNetwork, FlatNetwork)
"""What every hardware type offers, ``noop`` the default."""
