"""Turning a ramdisk's inspection report into node properties and ports.

Pure functions: given the report, the node's properties and ports and the
inspection settings, ``process`` says what to write (or raises
``ReportRejected``); the inspection flow writes it under the node's
reservation. The rules are Ironic's agent inspection with the hooks an
operator of a fleet turns on: the ramdisk's own error fails the inspection;
``cpu_arch``, ``cpus``, ``memory_mb`` and ``local_gb`` are set as integers
(``local_gb`` is the root disk's size in GiB less one for the partition
table, the root disk chosen by the node's ``root_device`` hints, else the
ramdisk's guess, else the smallest disk of at least 4 GiB; 0 without one); ports are
created for the reported NICs as ``add_ports`` says, the booting NIC
PXE-enabled, and pruned as ``keep_ports`` says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from metalforge.config import InspectionSettings
from metalforge.macs import is_stored_mac
from metalforge.redaction import bounded_text

GIB = 1024**3
MIB = 1024**2
MAX_INTERFACES = 1024
"""NICs one report may list: far more than a server has; the MACs are looked up at once."""
SMALLEST_ROOT_DISK = 4 * GIB
"""The ramdisk's own rule for guessing a root disk when it names none."""

_PXELINUX_MAC = re.compile(r"^01-([0-9a-f]{2}(-[0-9a-f]{2}){5})$")
_HINT_KEYS = ("name", "serial", "wwn", "model", "vendor", "by_path", "hctl", "size", "rotational")


class ReportRejected(ValueError):
    """The report cannot be turned into properties and ports; the message says why."""


@dataclass(frozen=True)
class KnownPort:
    """A port as inspection sees it: its MAC, whether it PXE-boots, and whose it is."""

    address: str
    pxe_enabled: bool
    mine: bool = True
    """The port belongs to the node being inspected (otherwise the MAC is taken)."""


@dataclass(frozen=True)
class Outcome:
    """What processing a report writes."""

    properties: dict[str, Any]
    create_ports: tuple[tuple[str, bool], ...] = ()
    """``(mac, pxe_enabled)`` of the ports to create."""
    set_pxe: Mapping[str, bool] = field(default_factory=dict)
    """Existing ports whose ``pxe_enabled`` changes."""
    delete_ports: tuple[str, ...] = ()
    inventory: dict[str, Any] = field(default_factory=dict)
    plugin_data: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def normalise_mac(value: object) -> str | None:
    """A MAC in lower-case colon form, from that form or pxelinux's ``01-aa-bb-...``."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    pxelinux = _PXELINUX_MAC.match(text)
    if pxelinux:
        text = pxelinux.group(1).replace("-", ":")
    return text if is_stored_mac(text) else None


def check_shape(report: object) -> dict[str, Any]:
    """The report if its shape is one processing can read; ``ReportRejected`` otherwise.

    Run by the API before anything is stored, so a malformed report gets its
    400 at once rather than failing the inspection later.
    """
    if not isinstance(report, dict):
        raise ReportRejected("the report must be a JSON object")
    inventory = report.get("inventory")
    if not isinstance(inventory, dict):
        raise ReportRejected("the report has no inventory object")
    interfaces = inventory.get("interfaces")
    if not isinstance(interfaces, list) or not interfaces:
        raise ReportRejected("the inventory lists no interfaces")
    if len(interfaces) > MAX_INTERFACES:
        raise ReportRejected(
            f"the inventory lists {len(interfaces)} interfaces; at most {MAX_INTERFACES} are read"
        )
    for iface in interfaces:
        if not isinstance(iface, dict) or not isinstance(iface.get("mac_address"), str):
            raise ReportRejected("every interface of the inventory needs a mac_address string")
    for key in ("cpu", "memory", "boot", "system_vendor"):
        if key in inventory and not isinstance(inventory[key], dict):
            raise ReportRejected(f"the inventory's {key} must be an object")
    if "disks" in inventory and not isinstance(inventory["disks"], list):
        raise ReportRejected("the inventory's disks must be a list")
    for key in ("bmc_address", "bmc_v6address"):
        if inventory.get(key) is not None and not isinstance(inventory[key], str):
            raise ReportRejected(f"the inventory's {key} must be a string")
    return report


def kept(report: Mapping[str, Any]) -> dict[str, Any]:
    """The report as stored: without its logs (megabytes that are not inventory)."""
    return {key: value for key, value in report.items() if key != "logs"}


def macs_of(report: Mapping[str, Any]) -> list[str]:
    """Every valid MAC the report's inventory lists (for looking the node up)."""
    found = []
    for iface in report.get("inventory", {}).get("interfaces", []):
        mac = normalise_mac(iface.get("mac_address")) if isinstance(iface, dict) else None
        if mac is not None and mac not in found:
            found.append(mac)
    return found


def bmc_addresses_of(report: Mapping[str, Any]) -> list[str]:
    """The BMC addresses the ramdisk saw (missing and all-zero values left out)."""
    inventory = report.get("inventory", {})
    found = []
    for key in ("bmc_address", "bmc_v6address"):
        value = inventory.get(key)
        if isinstance(value, str) and value.strip() not in ("", "0.0.0.0", "::/0", "::"):
            found.append(value.strip())
    return found


def _pxe_mac(report: Mapping[str, Any]) -> str | None:
    boot = report["inventory"].get("boot") or {}
    return normalise_mac(boot.get("pxe_interface")) or normalise_mac(report.get("boot_interface"))


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _cpu(inventory: Mapping[str, Any]) -> tuple[str, int | None]:
    cpu = inventory.get("cpu") or {}
    arch = cpu.get("architecture")
    if not isinstance(arch, str) or not arch.strip():
        raise ReportRejected("the inventory does not name the CPU architecture")
    count = _int(cpu.get("count"))
    return arch.strip(), count if count and count > 0 else None


def _memory_mb(inventory: Mapping[str, Any]) -> int:
    memory = inventory.get("memory") or {}
    physical = _int(memory.get("physical_mb"))
    if physical and physical > 0:
        return physical
    total = _int(memory.get("total"))
    if total and total > 0:
        return total // MIB
    raise ReportRejected("the inventory reports no memory size")


def _matches(disk: Mapping[str, Any], hints: Mapping[str, Any]) -> bool:
    for key, wanted in hints.items():
        if key not in _HINT_KEYS:
            continue
        have = disk.get(key)
        if key == "size":
            size = _int(have)
            if size is None or _int(wanted) != size // GIB:
                return False
        elif key == "rotational":
            if bool(have) != (str(wanted).lower() in ("1", "true", "yes", "on")):
                return False
        elif str(have) != str(wanted):
            return False
    return True


def _root_disk(report: Mapping[str, Any], properties: Mapping[str, Any]) -> dict[str, Any] | None:
    disks = [d for d in report["inventory"].get("disks") or [] if isinstance(d, dict)]
    hints = properties.get("root_device")
    if isinstance(hints, dict) and hints:
        for disk in disks:
            if _matches(disk, hints):
                return disk
        raise ReportRejected(f"no disk matches the node's root_device hints {hints}")
    named = report.get("root_disk")
    if isinstance(named, dict) and _int(named.get("size")) is not None:
        return named
    sized = [d for d in disks if (_int(d.get("size")) or 0) >= SMALLEST_ROOT_DISK]
    return min(sized, key=lambda d: (_int(d.get("size")), str(d.get("name")))) if sized else None


def _local_gb(disk: Mapping[str, Any], spacing: bool) -> int:
    gib = (_int(disk.get("size")) or 0) // GIB
    return gib - 1 if spacing and gib > 0 else gib


def _interfaces(
    report: Mapping[str, Any], pxe_mac: str | None
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """All interfaces by name, and the MACs worth a port as ``add_ports`` will filter them."""
    everything: dict[str, dict[str, Any]] = {}
    for iface in report["inventory"]["interfaces"]:
        mac = normalise_mac(iface.get("mac_address"))
        name = iface.get("name")
        if mac is None or not isinstance(name, str) or not name or name == "lo":
            continue
        ip = iface.get("ipv4_address") or iface.get("ipv6_address")
        everything[name] = {
            "mac": mac,
            "ip": ip if isinstance(ip, str) and not ip.startswith("127.") else None,
            "client_id": iface.get("client_id"),
            "pxe_enabled": mac == pxe_mac,
        }
    return everything, [i["mac"] for i in everything.values()]


def _valid(
    everything: Mapping[str, Mapping[str, Any]], mode: str, pxe_mac: str | None
) -> dict[str, Mapping[str, Any]]:
    if mode == "disabled":
        return {}
    if mode == "active":
        return {n: i for n, i in everything.items() if i["ip"]}
    if mode == "pxe" and pxe_mac is not None:
        return {n: i for n, i in everything.items() if i["mac"] == pxe_mac}
    return dict(everything)


def process(
    report: Mapping[str, Any],
    properties: Mapping[str, Any],
    ports: Sequence[KnownPort],
    settings: InspectionSettings,
) -> Outcome:
    """What the report means for the node, or ``ReportRejected`` with the reason."""
    check_shape(report)
    error = report.get("error")
    if error:
        # Unauthenticated text: bounded before it becomes last_error, history and the record.
        raise ReportRejected(f"the ramdisk reported an error: {bounded_text(str(error))}")
    inventory = report["inventory"]
    arch, cpus = _cpu(inventory)
    new_props = {**properties, "cpu_arch": arch, "memory_mb": _memory_mb(inventory)}
    if cpus is not None:
        new_props["cpus"] = cpus
    root = _root_disk(report, properties)
    # No disk large enough to install on: a diskless node, as Ironic records it.
    local_gb = 0 if root is None else _local_gb(root, settings.disk_partitioning_spacing)
    new_props["local_gb"] = local_gb

    pxe_mac = _pxe_mac(report)
    everything, all_macs = _interfaces(report, pxe_mac)
    if not everything:
        raise ReportRejected("the inventory has no interface with a valid MAC address")
    valid = _valid(everything, settings.add_ports, pxe_mac)
    known = {p.address: p for p in ports}
    warnings = []
    # A node that already boots from a port is found by it on agent lookup: a report
    # (unauthenticated) naming a boot interface the node has no port for must not make
    # a new PXE port of it, or whoever sent it could take the node's lookup over.
    # Moving the PXE flag among the node's own ports (registered by an operator) stays.
    booting = {p.address for p in ports if p.mine and p.pxe_enabled}
    own = {p.address for p in ports if p.mine}
    trusted = not booting or pxe_mac is None or pxe_mac in own
    if not trusted:
        warnings.append(
            f"the reported boot interface {pxe_mac} is not a port of the node, which "
            "already boots from one: no port is made a PXE port"
        )
    create = []
    for iface in valid.values():
        port = known.get(iface["mac"])
        if port is None:
            pxe = iface["pxe_enabled"] if pxe_mac else not booting
            create.append((iface["mac"], pxe and trusted))
        elif not port.mine:
            warnings.append(f"MAC {iface['mac']} already belongs to another node's port")
    set_pxe: dict[str, bool] = {}
    if settings.update_pxe_enabled and pxe_mac is not None and trusted:
        for port in ports:
            if port.mine and port.pxe_enabled != (port.address == pxe_mac):
                set_pxe[port.address] = port.address == pxe_mac
    keep = {
        "all": None,
        "present": set(all_macs),
        "added": {i["mac"] for i in valid.values()},
    }[settings.keep_ports]
    delete = tuple(
        p.address for p in ports if p.mine and keep is not None and p.address not in keep
    )

    plugin_data = {k: v for k, v in report.items() if k not in ("inventory", "logs")}
    plugin_data.update(
        all_interfaces=everything,
        valid_interfaces=valid,
        macs=[i["mac"] for i in valid.values()],
        root_disk=root,
        local_gb=local_gb,
        boot_interface=pxe_mac,
    )
    return Outcome(
        properties=new_props,
        create_ports=tuple(create),
        set_pxe=set_pxe,
        delete_ports=delete,
        inventory=inventory,
        plugin_data=plugin_data,
        warnings=tuple(warnings),
    )
