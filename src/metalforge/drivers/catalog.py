"""Every hardware type metalforge ships, by name.

A conductor enables some of them (``conductor.enabled_hardware_types``);
the registry built from that list is what flows and the API use. Real
hardware types deploy and clean through ironic-python-agent (``direct``),
boot it from the network (``pxe``, or ``ipxe`` with the scripts and images
metalforge serves) or, on Redfish, from virtual media.
"""

from __future__ import annotations

from metalforge.drivers.agent.deploy import AgentDeploy, CustomAgentDeploy
from metalforge.drivers.agent.inspect import AgentInspect
from metalforge.drivers.agent.ramdisk_deploy import RamdiskDeploy
from metalforge.drivers.agent.rescue import AgentRescue
from metalforge.drivers.base import STORAGE_INTERFACES, Interface, noop_interface
from metalforge.drivers.fake import FAKE_HARDWARE, FakeManagement, FakePower
from metalforge.drivers.hardware import HardwareType
from metalforge.drivers.ipmi import IpmiManagement, IpmiPower
from metalforge.drivers.ipmi import settings as ipmi_settings
from metalforge.drivers.ipxe import IpxeBoot, IpxeHttpBoot
from metalforge.drivers.manual import NoopManagement
from metalforge.drivers.network import NETWORK_INTERFACES
from metalforge.drivers.pxe import HttpBoot, PxeBoot
from metalforge.drivers.redfish.bios import RedfishBios
from metalforge.drivers.redfish.boot import RedfishHttpsBoot, RedfishVirtualMediaBoot
from metalforge.drivers.redfish.firmware import RedfishFirmware
from metalforge.drivers.redfish.idrac import (
    IdracBios,
    IdracInspect,
    IdracManagement,
    IdracPower,
    IdracRaid,
    IdracVendor,
    IdracVirtualMediaBoot,
)
from metalforge.drivers.redfish.inspect import RedfishInspect
from metalforge.drivers.redfish.management import RedfishManagement
from metalforge.drivers.redfish.power import RedfishPower
from metalforge.drivers.redfish.raid import RedfishRaid
from metalforge.drivers.redfish.vendor import RedfishVendor


def _none(family: str) -> tuple[type[Interface], ...]:
    return (noop_interface(family, f"no-{family}"),)


_COMMON: dict[str, tuple[type[Interface], ...]] = {
    "deploy": (AgentDeploy, CustomAgentDeploy, RamdiskDeploy),
    "raid": _none("raid"),
    "rescue": (*_none("rescue"), AgentRescue),
    "console": _none("console"),
    "network": NETWORK_INTERFACES,
    "storage": STORAGE_INTERFACES,
    "vendor": _none("vendor"),
    "firmware": _none("firmware"),
}
"""Families real hardware types share: the agent deploys and rescues (``no-rescue`` stays
the default, as in Ironic); the rest is not offered yet."""

REDFISH = HardwareType(
    name="redfish",
    supported={
        **_COMMON,
        "power": (RedfishPower,),
        "management": (RedfishManagement,),
        "boot": (
            PxeBoot,
            IpxeBoot,
            HttpBoot,
            IpxeHttpBoot,
            RedfishVirtualMediaBoot,
            RedfishHttpsBoot,
        ),
        "inspect": (RedfishInspect, AgentInspect, *_none("inspect")),
        "bios": (RedfishBios, *_none("bios")),
        "firmware": (RedfishFirmware, *_none("firmware")),
        "vendor": (RedfishVendor, *_none("vendor")),
        "raid": (RedfishRaid, *_none("raid")),
    },
)

IDRAC = HardwareType(
    name="idrac",
    supported={
        **_COMMON,
        "power": (IdracPower, RedfishPower),
        "management": (IdracManagement,),
        "boot": (
            PxeBoot,
            IpxeBoot,
            HttpBoot,
            IpxeHttpBoot,
            IdracVirtualMediaBoot,
            RedfishHttpsBoot,
        ),
        "inspect": (IdracInspect, RedfishInspect, AgentInspect, *_none("inspect")),
        "bios": (IdracBios, RedfishBios, *_none("bios")),
        "firmware": (RedfishFirmware, *_none("firmware")),
        "vendor": (IdracVendor, RedfishVendor, *_none("vendor")),
        "raid": (IdracRaid, *_none("raid")),
    },
)
"""Dell servers through their iDRAC (``drivers.redfish.idrac``): Ironic's ``idrac`` type,
whose interfaces Metal3 names for ``idrac-redfish://`` and ``idrac-virtualmedia://``."""

IPMI = HardwareType(
    name="ipmi",
    supported={
        **_COMMON,
        "power": (IpmiPower,),
        "management": (IpmiManagement,),
        "boot": (PxeBoot, IpxeBoot, HttpBoot, IpxeHttpBoot),
        "inspect": (AgentInspect, *_none("inspect")),
        "bios": _none("bios"),
    },
    check_settings=ipmi_settings.check_settings,
)

MANUAL_MANAGEMENT = HardwareType(
    name="manual-management",
    supported={
        **_COMMON,
        "power": (FakePower,),
        "management": (NoopManagement, FakeManagement),
        "boot": (PxeBoot, IpxeBoot, HttpBoot, IpxeHttpBoot),
        "inspect": (AgentInspect, *_none("inspect")),
        "bios": _none("bios"),
    },
)
"""A machine an operator powers and whose boot order is network first (``drivers.manual``)."""

HARDWARE_TYPES: dict[str, HardwareType] = {
    hw.name: hw for hw in (FAKE_HARDWARE, REDFISH, IDRAC, IPMI, MANUAL_MANAGEMENT)
}
