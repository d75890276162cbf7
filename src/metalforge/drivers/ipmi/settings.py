"""A node's IPMI settings, read from ``driver_info`` with operator-readable errors.

``driver_info`` arrives as JSON an operator typed, so numbers may be strings
(``"623"``) as the Ironic client sends them; anything that is not a number,
or is out of range, is refused naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metalforge.db.models import Node
from metalforge.drivers.base import DriverError
from metalforge.drivers.ipmi.client import (
    DEFAULT_PORT,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    BmcAddress,
)

DEFAULT_POWER_TIMEOUT = 60.0
"""Seconds a power change may take when the request names none (Ironic's default too)."""
BOOT_MODES = ("uefi", "bios")


@dataclass(frozen=True)
class IpmiSettings:
    bmc: BmcAddress
    retries: int
    timeout: float
    power_timeout: float
    boot_mode: str


MAX_RETRIES = 10
"""Tries after the first: each waits out ``ipmi_timeout``, and a worker waits for them all."""
MAX_TIMEOUT = 60.0
"""Seconds one IPMI request may wait for an answer."""
MAX_POWER_TIMEOUT = 3600.0
"""Seconds a power change may take."""


def _number(
    info: Mapping[str, Any], key: str, default: float, *, minimum: float, maximum: float
) -> float:
    """A finite number from ``minimum`` to ``maximum``: a stored setting never keeps a
    conductor's worker longer than the bound says (``nan``, ``inf`` and 10**8 retries
    are refused naming the key)."""
    raw = info.get(key)
    if raw is None or raw == "":
        return default
    if isinstance(raw, bool):
        raise DriverError(f"driver_info.{key} must be a number, not {raw!r}")
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise DriverError(f"driver_info.{key} must be a number, not {raw!r}") from None
    if not math.isfinite(value) or not minimum <= value <= maximum:
        raise DriverError(
            f"driver_info.{key} must be a number from {minimum:g} to {maximum:g}, not {raw!r}"
        )
    return value


def _integer(info: Mapping[str, Any], key: str, default: int, *, minimum: int, maximum: int) -> int:
    value = _number(info, key, default, minimum=minimum, maximum=maximum)
    if value != int(value):
        raise DriverError(f"driver_info.{key} must be a whole number, not {info[key]!r}")
    return int(value)


def _capability(properties: Mapping[str, Any], name: str) -> str | None:
    """A value from ``properties.capabilities`` (``"k:v,k2:v2"`` as Ironic, or a mapping)."""
    raw = properties.get("capabilities")
    if isinstance(raw, Mapping):
        value = raw.get(name)
        return None if value is None else str(value)
    if isinstance(raw, str):
        for item in raw.split(","):
            key, sep, value = item.partition(":")
            if sep and key.strip() == name:
                return value.strip()
    return None


def boot_mode(node: Node) -> str:
    """``uefi`` or ``bios``: driver_info, then the node's field, then its capabilities."""
    for source, value in (
        ("driver_info.ipmi_boot_mode", node.driver_info.get("ipmi_boot_mode")),
        ("boot_mode", node.boot_mode),
        ("properties.capabilities boot_mode", _capability(node.properties, "boot_mode")),
    ):
        if value:
            mode = str(value).lower()
            if mode not in BOOT_MODES:
                raise DriverError(f"{source} must be uefi or bios, not {value!r}")
            return mode
    return "uefi"


def check_settings(info: Mapping[str, Any]) -> None:
    """Each IPMI setting ``info`` holds is of its type and within its range (a missing
    one is not an error here: a node may be enrolled before its BMC is known)."""
    _integer(info, "ipmi_port", DEFAULT_PORT, minimum=1, maximum=65535)
    _integer(info, "ipmi_retries", DEFAULT_RETRIES, minimum=0, maximum=MAX_RETRIES)
    _number(info, "ipmi_timeout", DEFAULT_TIMEOUT, minimum=0.1, maximum=MAX_TIMEOUT)
    _number(info, "ipmi_power_timeout", DEFAULT_POWER_TIMEOUT, minimum=1, maximum=MAX_POWER_TIMEOUT)
    address = info.get("ipmi_address")
    if address is not None and not isinstance(address, str):
        raise DriverError(f"driver_info.ipmi_address must be a string, not {address!r}")
    mode = info.get("ipmi_boot_mode")
    if mode and str(mode).lower() not in BOOT_MODES:
        raise DriverError(f"driver_info.ipmi_boot_mode must be uefi or bios, not {mode!r}")


def parse_settings(node: Node) -> IpmiSettings:
    """The node's settings; ``DriverError`` naming the first key that is missing or wrong."""
    info = node.driver_info
    address = info.get("ipmi_address")
    if not address or not isinstance(address, str):
        raise DriverError("driver_info.ipmi_address is required by the ipmitool interfaces")
    port = _integer(info, "ipmi_port", DEFAULT_PORT, minimum=1, maximum=65535)
    return IpmiSettings(
        bmc=BmcAddress(
            host=address,
            port=port,
            username=str(info.get("ipmi_username") or ""),
            password=str(info.get("ipmi_password") or ""),
        ),
        retries=_integer(info, "ipmi_retries", DEFAULT_RETRIES, minimum=0, maximum=MAX_RETRIES),
        timeout=_number(info, "ipmi_timeout", DEFAULT_TIMEOUT, minimum=0.1, maximum=MAX_TIMEOUT),
        power_timeout=_number(
            info, "ipmi_power_timeout", DEFAULT_POWER_TIMEOUT, minimum=1, maximum=MAX_POWER_TIMEOUT
        ),
        boot_mode=boot_mode(node),
    )
