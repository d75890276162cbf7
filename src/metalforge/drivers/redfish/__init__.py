"""The ``redfish`` interfaces: a node's BMC driven over DMTF Redfish with sushy.

One module per interface; ``connection`` holds what they share (the
``driver_info`` keys, cached clients, translation of BMC failures into
``DriverError``). A hardware type composes them with interfaces of other
families (deploy, network...).
"""

from metalforge.drivers.redfish.bios import RedfishBios
from metalforge.drivers.redfish.boot import RedfishHttpsBoot, RedfishVirtualMediaBoot
from metalforge.drivers.redfish.inspect import RedfishInspect
from metalforge.drivers.redfish.management import RedfishManagement
from metalforge.drivers.redfish.power import RedfishPower
from metalforge.drivers.redfish.vendor import RedfishVendor

__all__ = [
    "RedfishBios",
    "RedfishHttpsBoot",
    "RedfishInspect",
    "RedfishManagement",
    "RedfishPower",
    "RedfishVendor",
    "RedfishVirtualMediaBoot",
]
