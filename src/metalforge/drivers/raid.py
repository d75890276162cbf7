"""The target RAID configuration: what an operator may ask a RAID interface to build.

``PUT /v1/nodes/{id}/states/raid`` stores it in ``target_raid_config`` and the
``raid.create_configuration`` clean step applies it. It is checked when it is
set, not when the step runs, so a typo is a 400 at the operator's terminal
rather than a ``clean failed`` node half an hour later. The rules are
Ironic's (the same document works on both), written out by hand so each
refusal names the logical disk and the field at fault.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

RAID_LEVELS = ("JBOD", "0", "1", "2", "5", "6", "1+0", "5+0", "6+0")
DISK_TYPES = ("hdd", "ssd")
INTERFACE_TYPES = ("sata", "scsi", "sas")
LOGICAL_DISK_KEYS = frozenset(
    {
        "raid_level",
        "size_gb",
        "volume_name",
        "is_root_volume",
        "share_physical_disks",
        "disk_type",
        "interface_type",
        "number_of_physical_disks",
        "controller",
        "physical_disks",
    }
)

LOGICAL_DISK_PROPERTIES: dict[str, str] = {
    "raid_level": f"RAID level of the logical disk, one of {', '.join(RAID_LEVELS)}. Required.",
    "size_gb": (
        "Size of the logical disk in GiB (a positive integer), or 'MAX' for the space left. "
        "Required."
    ),
    "volume_name": "Name to give the volume; the controller chooses one when absent. Optional.",
    "is_root_volume": (
        "true when the instance is deployed to this logical disk; at most one may be. Optional."
    ),
    "share_physical_disks": (
        "true when other logical disks may use the same physical disks (default false). Optional."
    ),
    "disk_type": (
        f"Kind of physical disk to build it from, one of {', '.join(DISK_TYPES)}; any when "
        "absent. Optional."
    ),
    "interface_type": (
        f"Interface of the physical disks to use, one of {', '.join(INTERFACE_TYPES)}; any when "
        "absent. Optional."
    ),
    "number_of_physical_disks": (
        "How many physical disks to use (a positive integer); the level's minimum when absent. "
        "Optional."
    ),
    "controller": "RAID controller to use; the driver chooses one when absent. Optional.",
    "physical_disks": (
        "The physical disks to use (needs controller): their names, or for software RAID "
        'root device hints ({"name": "/dev/sda"}); the driver chooses when absent. '
        "Optional."
    ),
}
"""What a logical disk of ``target_raid_config`` may hold, for
``GET /v1/drivers/{name}/raid/logical_disk_properties``: the keys the rules
below accept, each with what it means."""


class InvalidRaidConfig(ValueError):
    """The target RAID configuration breaks a rule; the message names the disk and field."""


def _positive_int(value: Any) -> bool:
    # bool is an int to Python, never to a JSON schema.
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _one_of(allowed: tuple[str, ...]) -> Callable[[Any], bool]:
    return lambda value: value in allowed


_OPTIONAL_FIELDS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("volume_name", _is_str, "must be a string"),
    ("controller", _is_str, "must be a string"),
    ("is_root_volume", _is_bool, "must be true or false"),
    ("share_physical_disks", _is_bool, "must be true or false"),
    ("disk_type", _one_of(DISK_TYPES), f"must be one of {', '.join(DISK_TYPES)}"),
    ("interface_type", _one_of(INTERFACE_TYPES), f"must be one of {', '.join(INTERFACE_TYPES)}"),
    ("number_of_physical_disks", _positive_int, "must be a positive integer"),
)
"""The optional fields of a logical disk that stand alone: each with the test
its value must pass and what the refusal says, checked in this order (the first
failure is the one reported)."""


def _check_disk(where: str, disk: Any) -> None:
    if not isinstance(disk, dict):
        raise InvalidRaidConfig(f"{where} must be an object")
    unknown = sorted(set(disk) - LOGICAL_DISK_KEYS)
    if unknown:
        raise InvalidRaidConfig(f"{where} has unknown key(s) {', '.join(unknown)}")
    for key in ("raid_level", "size_gb"):
        if key not in disk:
            raise InvalidRaidConfig(f"{where} needs {key}")
    if disk["raid_level"] not in RAID_LEVELS:
        raise InvalidRaidConfig(
            f"{where}: raid_level {disk['raid_level']!r} is not one of {', '.join(RAID_LEVELS)}"
        )
    size = disk["size_gb"]
    if size != "MAX" and not _positive_int(size):
        raise InvalidRaidConfig(f"{where}: size_gb must be a positive integer or 'MAX'")
    for key, valid, refusal in _OPTIONAL_FIELDS:
        if key in disk and not valid(disk[key]):
            raise InvalidRaidConfig(f"{where}: {key} {refusal}")
    if "physical_disks" in disk:
        _check_physical_disks(where, disk)


def _check_physical_disks(where: str, disk: dict[str, Any]) -> None:
    """``physical_disks`` apart from the other fields: it depends on another (controller)."""
    physical = disk["physical_disks"]
    names = isinstance(physical, list) and all(isinstance(p, str) for p in physical)
    # Software RAID names its disks by root device hints ({"name": "/dev/sda"}), two at least.
    hints = isinstance(physical, list) and all(isinstance(p, dict) for p in physical)
    if not names and not hints:
        raise InvalidRaidConfig(
            f"{where}: physical_disks must be a list of names, or of root device hints"
        )
    if hints and len(physical) < 2:
        raise InvalidRaidConfig(f"{where}: physical_disks given as hints must name two or more")
    if "controller" not in disk:
        raise InvalidRaidConfig(f"{where}: physical_disks needs controller to be set")


def check_target_raid_config(config: Mapping[str, Any]) -> None:
    """Raise ``InvalidRaidConfig`` unless ``config`` is a valid target RAID configuration.

    An empty mapping is valid: it clears the target.
    """
    if not config:
        return
    unknown = sorted(set(config) - {"logical_disks"})
    if unknown:
        raise InvalidRaidConfig(f"unknown key(s) {', '.join(unknown)}; only logical_disks")
    disks = config.get("logical_disks")
    if not isinstance(disks, list) or not disks:
        raise InvalidRaidConfig("logical_disks must be a list of at least one logical disk")
    for index, disk in enumerate(disks):
        _check_disk(f"logical_disks[{index}]", disk)
    roots = sum(1 for disk in disks if disk.get("is_root_volume") is True)
    if roots > 1:
        raise InvalidRaidConfig(f"only one logical disk may be the root volume; {roots} are")
