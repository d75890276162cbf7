"""``redfish`` RAID: the target RAID configuration built as Redfish Storage volumes.

``raid.create_configuration`` (a clean step) and ``raid.apply_configuration``
(a deploy and service step, given the configuration) turn each logical disk
of ``target_raid_config`` into one ``POST`` to a controller's ``Volumes``:
``RAIDType`` from ``raid_level``, ``CapacityBytes`` from ``size_gb`` (left
out for ``MAX``: the controller makes it as large as the drives allow),
``Links.Drives`` and ``Name`` from ``volume_name``. ``raid.delete_configuration``
(clean, deploy and service step) deletes every volume that has a RAID
level. All are out of band (no ramdisk) and at priority 0: they run when
asked for, by manual cleaning (Metal3 asks for delete, then create), a
deploy template or servicing. Unlike Ironic's, ``delete_existing`` is
honoured: the volumes go first.

Drives are chosen as Ironic chooses them: a logical disk's
``physical_disks`` (Redfish Drive ``Id``\\s) when it names them, else drives
of its ``disk_type`` (the drive's ``MediaType``) and ``interface_type``
(its ``Protocol``), ``number_of_physical_disks`` of them or the level's
fewest, not used by another volume unless ``share_physical_disks``; disks
naming their drives are placed first and those asking for ``MAX`` last. A
configuration that cannot be placed fails the step before anything is sent.

A controller that applies changes only at the next boot answers with a task
monitor (HTTP 202; its ``@Redfish.OperationApplyTimeSupport`` lists
``OnReset`` and not ``Immediate``): the node is rebooted and the step waits
(``check_step``) until the monitor reports the task finished, then sends
the next request. Where the step is, is kept in
``driver_internal_info.raid_job``, so a conductor that takes the node over
carries on. When the step ends, ``raid_config`` holds what the BMC reports:
each volume with a RAID level as ``{id, name, controller, size_gb,
raid_level}``, as Ironic reads it back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sushy import exceptions as sushy_errors
from sushy.taskmonitor import TaskMonitor

from metalforge.db.models import utcnow
from metalforge.drivers.base import (
    REBOOT,
    DriverError,
    DriverTask,
    PowerInterface,
    RaidInterface,
    StepFailed,
    StepOutcome,
    interface_of,
    set_info,
)
from metalforge.drivers.raid import InvalidRaidConfig, check_target_raid_config
from metalforge.drivers.redfish import connection
from metalforge.drivers.step_declarations import clean_step, deploy_step, service_step

GIB = 1024**3
LEVELS: dict[str, tuple[str, int]] = {
    "0": ("RAID0", 1),
    "1": ("RAID1", 2),
    "5": ("RAID5", 3),
    "6": ("RAID6", 4),
    "1+0": ("RAID10", 4),
    "5+0": ("RAID50", 6),
    "6+0": ("RAID60", 8),
}
"""Each RAID level the interface builds: its Redfish ``RAIDType`` and fewest drives."""
_LEVEL_OF = {raid_type: level for level, (raid_type, _) in LEVELS.items()}
_STATE = "raid_job"

_CREATE_ARGS = {
    "create_root_volume": {
        "description": "Create the logical disk marked is_root_volume (default true).",
        "required": False,
    },
    "create_nonroot_volumes": {
        "description": "Create the other logical disks (default true).",
        "required": False,
    },
    "delete_existing": {
        "description": "Delete the volumes the controllers have first (default false).",
        "required": False,
    },
}
_APPLY_ARGS = {
    "raid_config": {
        "description": 'The RAID configuration to build ({"logical_disks": [...]}); it '
        "becomes the node's target_raid_config.",
        "required": True,
    },
    **_CREATE_ARGS,
}


def data_drives(raid_type: str, count: int) -> int:
    """How many of ``count`` drives hold data at ``raid_type`` (the rest is redundancy)."""
    if raid_type in ("RAID1", "RAID10"):
        return count // 2
    spent = {"RAID5": 1, "RAID6": 2, "RAID50": 2, "RAID60": 4}.get(raid_type, 0)
    return count - spent


@dataclass(frozen=True)
class Drive:
    """One physical drive as the BMC reports it."""

    storage: str
    identity: str
    path: str
    capacity: int
    media: str
    protocol: str


@dataclass
class _Placement:
    """The drives handed out so far while placing a configuration."""

    drives: list[Drive]
    used: dict[str, bool] = field(default_factory=dict)
    """Drive path -> whether its volume lets others share it."""

    def free(self, drive: Drive, sharing: bool) -> bool:
        return drive.path not in self.used or (sharing and self.used[drive.path])

    def take(self, drives: Iterable[Drive], sharing: bool) -> None:
        for drive in drives:
            self.used[drive.path] = sharing


def _wanted(disk: Mapping[str, Any]) -> tuple[str, int, int | None]:
    """A logical disk's RAID type, fewest drives and size in bytes (None: ``MAX``)."""
    level = str(disk["raid_level"])
    if level not in LEVELS:
        raise StepFailed(
            f"RAID level {level} is not supported by the redfish RAID interface; "
            f"supported: {', '.join(LEVELS)}"
        )
    raid_type, fewest = LEVELS[level]
    size = disk["size_gb"]
    return raid_type, fewest, None if size == "MAX" else int(size) * GIB


def _fits(raid_type: str, drives: list[Drive], size: int | None) -> bool:
    if not drives or data_drives(raid_type, len(drives)) < 1:
        return False
    return (
        size is None
        or min(d.capacity for d in drives) * data_drives(raid_type, len(drives)) >= size
    )


def _named(disk: Mapping[str, Any], placement: _Placement, where: str) -> list[Drive]:
    if not all(isinstance(name, str) for name in disk["physical_disks"]):
        raise StepFailed(f"{where}: physical_disks must be drive Ids for hardware RAID")
    by_id = {d.identity: d for d in placement.drives}
    missing = [name for name in disk["physical_disks"] if name not in by_id]
    if missing:
        raise StepFailed(f"{where}: the BMC reports no drive {', '.join(map(str, missing))}")
    chosen = [by_id[name] for name in disk["physical_disks"]]
    if len({d.storage for d in chosen}) > 1:
        raise StepFailed(f"{where}: its physical_disks are on more than one controller")
    sharing = bool(disk.get("share_physical_disks"))
    busy = [d.identity for d in chosen if not placement.free(d, sharing)]
    if busy:
        raise StepFailed(f"{where}: drive(s) {', '.join(busy)} already hold another volume")
    return chosen


def _chosen(disk: Mapping[str, Any], placement: _Placement, where: str) -> list[Drive]:
    """Drives for a logical disk that names none: the smallest that fit, on one controller."""
    raid_type, fewest, size = _wanted(disk)
    count = int(disk.get("number_of_physical_disks") or fewest)
    sharing = bool(disk.get("share_physical_disks"))
    candidates = [
        d
        for d in placement.drives
        if placement.free(d, sharing)
        and d.media.lower() == str(disk.get("disk_type", d.media)).lower()
        and d.protocol.lower() == str(disk.get("interface_type", d.protocol)).lower()
    ]
    for storage in sorted({d.storage for d in candidates}):
        mine = sorted((d for d in candidates if d.storage == storage), key=lambda d: d.capacity)
        for start in range(len(mine) - count + 1):
            picked = mine[start : start + count]
            if len(picked) == count and _fits(raid_type, picked, size):
                return picked
    raise StepFailed(f"{where}: no {count} free drives of one controller can hold it")


def plan(disks: list[Mapping[str, Any]], drives: list[Drive], used: Iterable[str]) -> list[Any]:
    """Each logical disk with the drives it gets, in the order Ironic places them (disks
    naming their drives, then the others, then those naming drives and asking for
    ``MAX``); ``used``: drives of volumes that stay. ``StepFailed`` when one cannot be
    placed."""
    placement = _Placement(drives, dict.fromkeys(used, False))
    named = [d for d in disks if "physical_disks" in d and d["size_gb"] != "MAX"]
    chosen = [d for d in disks if "physical_disks" not in d]
    last = [d for d in disks if "physical_disks" in d and d["size_gb"] == "MAX"]
    if any(d["size_gb"] == "MAX" for d in chosen):
        raise StepFailed("a logical disk of size MAX must name its physical_disks")
    placed = []
    for disk in [*named, *chosen, *last]:
        where = f"logical disk {disk.get('volume_name') or disks.index(disk)}"
        raid_type, _, size = _wanted(disk)
        picked = (_named if "physical_disks" in disk else _chosen)(disk, placement, where)
        if not _fits(raid_type, picked, size):
            raise StepFailed(f"{where}: its drives cannot hold {disk['size_gb']} GiB")
        placement.take(picked, bool(disk.get("share_physical_disks")))
        placed.append((disk, picked))
    return placed


def _payload(disk: Mapping[str, Any], drives: list[Drive]) -> dict[str, Any]:
    raid_type, _, size = _wanted(disk)
    body: dict[str, Any] = {
        "RAIDType": raid_type,
        "Links": {"Drives": [{"@odata.id": d.path} for d in drives]},
    }
    if size is not None:
        body["CapacityBytes"] = size
    if disk.get("volume_name"):
        body["Name"] = str(disk["volume_name"])
    return body


def _drives(system: Any) -> tuple[list[Drive], list[str]]:
    """Every drive of every controller, and the paths of those holding a RAID volume."""
    found: list[Drive] = []
    used: list[str] = []
    for storage in system.storage.get_members():
        for drive in storage.drives:
            found.append(
                Drive(
                    storage.identity,
                    drive.identity,
                    drive.path,
                    int(drive.capacity_bytes or 0),
                    str(drive.media_type or ""),
                    str(getattr(drive.protocol, "value", drive.protocol) or ""),
                )
            )
        for volume in _volumes(storage):
            if volume.raid_type:
                used.extend(_drive_links(volume))
    return found, used


def _drive_links(volume: Any) -> list[str]:
    links = volume.json.get("Links", {}).get("Drives", [])
    return [str(link.get("@odata.id")) for link in links if isinstance(link, dict)]


def _volumes(storage: Any) -> list[Any]:
    try:
        return list(storage.volumes.get_members())
    except sushy_errors.MissingAttributeError:
        return []


def _apply_time(collection: Any) -> str | None:
    """``Immediate`` when the controller offers it, else ``OnReset``, else none asked."""
    support = collection.operation_apply_time_support
    offered = set(support.supported_values or ()) if support else set()
    for choice in ("Immediate", "OnReset"):
        if choice in offered:
            return choice
    return None


def read_back(system: Any) -> dict[str, Any]:
    """``raid_config`` as the BMC reports it (every volume with a RAID level)."""
    disks = []
    for storage in system.storage.get_members():
        for volume in _volumes(storage):
            raid_type = getattr(volume.raid_type, "value", volume.raid_type)
            if raid_type not in _LEVEL_OF:
                continue
            disks.append(
                {
                    "id": volume.identity,
                    "name": volume.name,
                    "controller": storage.identity,
                    "size_gb": int(volume.capacity_bytes or 0) // GIB,
                    "raid_level": _LEVEL_OF[raid_type],
                }
            )
    return {"logical_disks": disks, "last_updated": utcnow().isoformat()}


def _keep(task: DriverTask, state: dict[str, Any] | None) -> None:
    set_info(task, **{_STATE: state})


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise StepFailed(f"invalid argument {name}: {value!r} is not true or false")
    return value


class RedfishRaid(RaidInterface):
    """RAID volumes through the BMC's Redfish Storage (see the module's docstring)."""

    name = "redfish"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)

    def properties(self) -> dict[str, str]:
        return dict(connection.PROPERTIES)

    def validate_raid_config(self, task: DriverTask, config: Mapping[str, Any]) -> None:
        super().validate_raid_config(task, config)
        for disk in config.get("logical_disks", []):
            if disk.get("interface_type") == "scsi":
                raise DriverError(
                    "interface_type scsi is not supported by the redfish RAID interface"
                )
            if any(not isinstance(p, str) for p in disk.get("physical_disks", [])):
                raise DriverError(
                    "physical_disks given as root device hints are for software RAID "
                    "(raid_interface agent); the redfish RAID interface takes drive Ids"
                )

    @clean_step(priority=0, argsinfo=_CREATE_ARGS, requires_ramdisk=False, asynchronous=True)
    def create_configuration(
        self,
        task: DriverTask,
        create_root_volume: bool = True,
        create_nonroot_volumes: bool = True,
        delete_existing: bool = False,
    ) -> StepOutcome:
        """Build ``target_raid_config`` as volumes (see the module's docstring)."""
        roots = _flag("create_root_volume", create_root_volume)
        others = _flag("create_nonroot_volumes", create_nonroot_volumes)
        target = task.node.target_raid_config.get("logical_disks")
        if not target:
            raise StepFailed("the node has no target_raid_config to apply")
        wanted = [disk for disk in target if (roots if disk.get("is_root_volume") else others)]
        return self._start(task, wanted, _flag("delete_existing", delete_existing))

    @deploy_step(priority=0, argsinfo=_APPLY_ARGS, asynchronous=True)
    @service_step(argsinfo=_APPLY_ARGS, requires_ramdisk=False, asynchronous=True)
    def apply_configuration(
        self,
        task: DriverTask,
        raid_config: Any,
        create_root_volume: bool = True,
        create_nonroot_volumes: bool = False,
        delete_existing: bool = False,
    ) -> StepOutcome:
        """Build ``raid_config``, given with the step, which becomes the target too."""
        if not isinstance(raid_config, dict):
            raise StepFailed(f"invalid argument raid_config: {raid_config!r} is not an object")
        try:
            check_target_raid_config(raid_config)
            self.validate_raid_config(task, raid_config)
        except (InvalidRaidConfig, DriverError) as exc:
            raise StepFailed(f"invalid argument raid_config: {exc}") from None
        task.node.target_raid_config = raid_config
        return self.create_configuration(
            task, create_root_volume, create_nonroot_volumes, delete_existing
        )

    @clean_step(priority=0, requires_ramdisk=False, asynchronous=True)
    @service_step(requires_ramdisk=False, asynchronous=True)
    @deploy_step(priority=0, asynchronous=True)
    def delete_configuration(self, task: DriverTask) -> StepOutcome:
        """Delete every volume that has a RAID level."""
        return self._start(task, [], delete_existing=True)

    def _start(
        self, task: DriverTask, disks: list[Mapping[str, Any]], delete_existing: bool
    ) -> StepOutcome:
        with connection.system(task, "read the RAID controllers") as system:
            drives, used = _drives(system)
            doomed = [
                {"op": "delete", "storage": storage.identity, "volume": volume.path}
                for storage in system.storage.get_members()
                for volume in _volumes(storage)
                if delete_existing and volume.raid_type
            ]
        placed = plan(disks, drives, () if delete_existing else used)
        creates = [
            {"op": "create", "storage": picked[0].storage, "body": _payload(disk, picked)}
            for disk, picked in placed
        ]
        _keep(task, {"left": doomed + creates})
        return self._next(task)

    def check_step(self, task: DriverTask, method: str) -> StepOutcome:
        state = task.node.driver_internal_info.get(_STATE)
        if not isinstance(state, dict):
            return "done"
        monitor = state.get("monitor")
        if monitor:
            with connection.root_and_system(task, "check the RAID job") as (root, _system):
                found = root.get_task_monitor(monitor)
                if found.is_processing:
                    return "wait"
                problem = connection.task_failure(found)
            if problem:
                _keep(task, None)
                raise StepFailed(f"the BMC failed the RAID job: {problem}")
            _keep(task, {"left": state.get("left", [])})
        return self._next(task)

    def _next(self, task: DriverTask) -> StepOutcome:
        state = task.node.driver_internal_info.get(_STATE) or {}
        left = list(state.get("left", []))
        reboot = False
        with connection.system(task, "change the RAID volumes") as system:
            while left:
                change = left.pop(0)
                monitor, reboot = _send(system, change)
                if monitor is not None:
                    _keep(task, {"left": left, "monitor": monitor})
                    break
            else:
                task.node.raid_config = read_back(system)
                _keep(task, None)
                return "done"
        if reboot:
            task.record("raid", "the RAID controller applies its changes at boot: rebooting")
            interface_of(task, PowerInterface, "reboot to apply RAID").set_power_state(task, REBOOT)
        return "wait"


def _send(system: Any, change: Mapping[str, Any]) -> tuple[str | None, bool]:
    """One request: the task monitor it answered with (None: done at once), and whether
    the change waits for a reboot."""
    storage = next(
        (s for s in system.storage.get_members() if s.identity == change["storage"]), None
    )
    if storage is None:
        raise StepFailed(f"the BMC no longer reports RAID controller {change['storage']}")
    collection = storage.volumes
    apply_time = _apply_time(collection)
    if change["op"] == "create":
        answer = collection.create(dict(change["body"]), apply_time=apply_time)
    else:
        answer = collection.get_member(change["volume"]).delete(apply_time=apply_time)
    if isinstance(answer, TaskMonitor):
        return answer.task_monitor_uri, apply_time == "OnReset"
    return None, False
