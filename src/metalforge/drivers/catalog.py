"""Every hardware type metalforge ships, by name.

A conductor enables some of them (``conductor.enabled_hardware_types``);
the registry built from that list is what flows and the API use.
"""

from __future__ import annotations

from metalforge.drivers.fake import FAKE_HARDWARE
from metalforge.drivers.hardware import HardwareType

HARDWARE_TYPES: dict[str, HardwareType] = {hw.name: hw for hw in (FAKE_HARDWARE,)}
