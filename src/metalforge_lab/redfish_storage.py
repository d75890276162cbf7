"""A RAID controller behind the lab's Redfish BMC: Storage, Drives and Volumes as a BMC serves them.

sushy-tools serves Storage only from static settings, creates volumes only
through libvirt (its fake driver answers 501), keeps no ``RAIDType`` and
has no way to delete one, so a RAID interface could not be tried against
it. These routes replace its Storage routes for the lab's fake systems.

A fake system may carry ``storage``: ``{"id", "name", "drives": [{"Id",
"Name", "CapacityBytes", "MediaType", "Protocol"}], "volumes": [...],
"apply_time": None | "Immediate" | "OnReset"}``:

* ``GET .../Storage``, ``.../Storage/<id>`` (the controller, with the RAID
  types it supports), ``.../Drives/<id>``, ``.../Volumes`` (with
  ``@Redfish.OperationApplyTimeSupport`` when ``apply_time`` is set) and
  ``.../Volumes/<id>``;
* ``POST .../Volumes`` creates a volume from ``RAIDType``, ``Links.Drives``,
  ``CapacityBytes`` (absent: as large as the drives allow) and ``Name``,
  refusing what a controller refuses (an unknown level, too few or unknown
  drives, more than they hold): 201 with ``Location``;
* ``DELETE .../Volumes/<id>`` removes it: 204;
* with ``apply_time`` ``OnReset`` a request that asks for it
  (``@Redfish.OperationApplyTime``) is only queued: 202 with a task monitor
  (``/redfish/v1/TaskService/TaskMonitors/<n>``) that answers 202 until the
  system is next reset (powered on or restarted), when the queued changes
  are made and the monitor answers with the finished task, as a BMC whose
  controller applies RAID jobs at boot does.

The state lives in the fake system's dict (the driver's ``_get`` and
``_update``), so it survives an emulator restart with the same state dir.
"""

from __future__ import annotations

import itertools
from typing import Any

RAID_TYPES = {
    "RAID0": (1, 0),
    "RAID1": (2, 1),
    "RAID5": (3, 1),
    "RAID6": (4, 2),
    "RAID10": (4, 0),
    "RAID50": (6, 2),
    "RAID60": (8, 4),
}
"""Levels the lab's controller builds: the fewest drives, and the drives' worth spent on
redundancy (a mirror of two halves counts as half of them, below)."""

_MONITORS = "/redfish/v1/TaskService/TaskMonitors"
_serial = itertools.count(1)


def storage_document(identity: str, storage: dict[str, Any]) -> dict[str, Any]:
    base = f"/redfish/v1/Systems/{identity}/Storage/{storage['id']}"
    return {
        "@odata.type": "#Storage.v1_10_1.Storage",
        "@odata.id": base,
        "Id": storage["id"],
        "Name": storage.get("name", "RAID controller"),
        "StorageControllers": [
            {
                "@odata.id": f"{base}#/StorageControllers/0",
                "MemberId": "0",
                "Name": storage.get("name", "RAID controller"),
                "SupportedRAIDTypes": sorted(RAID_TYPES),
                "SpeedGbps": 12,
            }
        ],
        "Drives": [{"@odata.id": f"{base}/Drives/{d['Id']}"} for d in storage["drives"]],
        "Volumes": {"@odata.id": f"{base}/Volumes"},
    }


def drive_document(identity: str, storage: dict[str, Any], drive: dict[str, Any]) -> dict[str, Any]:
    base = f"/redfish/v1/Systems/{identity}/Storage/{storage['id']}"
    return {
        "@odata.type": "#Drive.v1_9_0.Drive",
        "@odata.id": f"{base}/Drives/{drive['Id']}",
        **{k: drive[k] for k in ("Id", "Name", "CapacityBytes", "MediaType", "Protocol")},
        "Status": {"State": "Enabled", "Health": "OK"},
    }


def volumes_document(identity: str, storage: dict[str, Any]) -> dict[str, Any]:
    base = f"/redfish/v1/Systems/{identity}/Storage/{storage['id']}/Volumes"
    document: dict[str, Any] = {
        "@odata.type": "#VolumeCollection.VolumeCollection",
        "@odata.id": base,
        "Name": "Volumes",
        "Members": [{"@odata.id": f"{base}/{v['Id']}"} for v in storage.get("volumes", [])],
        "Members@odata.count": len(storage.get("volumes", [])),
    }
    if storage.get("apply_time"):
        document["@Redfish.OperationApplyTimeSupport"] = {
            "@odata.type": "#Settings.v1_3_3.OperationApplyTimeSupport",
            "SupportedValues": [storage["apply_time"]],
        }
    return document


def volume_document(
    identity: str, storage: dict[str, Any], volume: dict[str, Any]
) -> dict[str, Any]:
    base = f"/redfish/v1/Systems/{identity}/Storage/{storage['id']}"
    return {
        "@odata.type": "#Volume.v1_6_2.Volume",
        "@odata.id": f"{base}/Volumes/{volume['Id']}",
        "Id": volume["Id"],
        "Name": volume["Name"],
        "RAIDType": volume["RAIDType"],
        "CapacityBytes": volume["CapacityBytes"],
        "VolumeType": "Mirrored" if volume["RAIDType"] == "RAID1" else "StripedWithParity",
        "Links": {"Drives": [{"@odata.id": f"{base}/Drives/{d}"} for d in volume["Drives"]]},
        "Status": {"State": "Enabled", "Health": "OK"},
    }


class Refused(ValueError):
    """What the controller answers 400 with."""


def usable_bytes(raid_type: str, sizes: list[int]) -> int:
    """What ``sizes`` hold at ``raid_type``: the smallest drive times the drives not spent
    on redundancy (half of them for a mirror)."""
    least, spent = RAID_TYPES[raid_type]
    if len(sizes) < least:
        raise Refused(f"{raid_type} needs at least {least} drives, not {len(sizes)}")
    count = len(sizes)
    data = count // 2 if raid_type in ("RAID1", "RAID10") else count - spent
    return min(sizes) * data


def planned_volume(storage: dict[str, Any], body: Any) -> dict[str, Any]:
    """The volume ``body`` asks for, checked as a controller checks it (``Refused``)."""
    if not isinstance(body, dict):
        raise Refused("the request body must be an object")
    raid_type = body.get("RAIDType")
    if raid_type not in RAID_TYPES:
        raise Refused(f"RAIDType {raid_type!r} is not supported; supported: {sorted(RAID_TYPES)}")
    links = (body.get("Links") or {}).get("Drives") or []
    drives = {d["Id"]: d for d in storage["drives"]}
    names = [str(link.get("@odata.id", "")).rsplit("/", 1)[-1] for link in links]
    unknown = [n for n in names if n not in drives]
    if unknown or not names:
        raise Refused(f"Links.Drives must name drives of this controller; unknown: {unknown}")
    used = {d for v in storage.get("volumes", []) for d in v["Drives"]}
    busy = sorted(used & set(names))
    if busy:
        raise Refused(f"drive(s) {', '.join(busy)} already belong to a volume")
    room = usable_bytes(raid_type, [int(drives[n]["CapacityBytes"]) for n in names])
    size = body.get("CapacityBytes")
    if size is None:
        size = room
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0 or size > room:
        raise Refused(f"CapacityBytes {size!r} does not fit: the drives hold {room} bytes")
    volume_id = f"Volume{next(_serial)}"
    return {
        "Id": volume_id,
        "Name": str(body.get("Name") or volume_id),
        "RAIDType": raid_type,
        "CapacityBytes": size,
        "Drives": names,
    }


def new_monitor() -> str:
    return f"{_MONITORS}/{next(_serial)}"


def task_document(monitor: str, done: bool) -> dict[str, Any]:
    task_id = monitor.rsplit("/", 1)[-1]
    return {
        "@odata.type": "#Task.v1_4_3.Task",
        "@odata.id": f"/redfish/v1/TaskService/Tasks/{task_id}",
        "Id": task_id,
        "Name": "RAID configuration",
        "TaskState": "Completed" if done else "New",
        "TaskStatus": "OK",
        "Messages": [],
    }


_RESETS = ("On", "ForceOn", "ForceRestart", "GracefulRestart", "PowerCycle")
"""Resets after which a controller has applied the changes queued for a reset."""


def applied_at_reset(storage: dict[str, Any], state: str) -> dict[str, Any] | None:
    """``storage`` with its queued changes made, when ``state`` resets the system (None:
    nothing changes)."""
    pending = storage.get("pending") or []
    if state not in _RESETS or not pending:
        return None
    volumes = list(storage.get("volumes", []))
    for change in pending:
        if change["op"] == "create":
            volumes.append(change["volume"])
        else:
            volumes = [v for v in volumes if v["Id"] != change["id"]]
    done = [*storage.get("done", []), *(c["monitor"] for c in pending)]
    return {**storage, "volumes": volumes, "pending": [], "done": done}


class _Routes:
    """The views, bound to the emulator's app and its error classes."""

    def __init__(self, app: Any, error: Any) -> None:
        self.app, self.error = app, error

    def found(self, identity: str, storage_id: str | None = None) -> tuple[Any, Any, Any]:
        """The system's driver, the system and its controller (404 without one)."""
        driver = self.app.systems
        system = driver._get(identity)
        storage = system.get("storage")
        if not isinstance(storage, dict) or storage_id not in (None, storage["id"]):
            raise self.error.NotFound()
        return driver, system, storage

    def storage_collection(self, identity: str) -> Any:
        import flask

        _, _, storage = self.found(identity)
        base = f"/redfish/v1/Systems/{identity}/Storage"
        return flask.jsonify(
            {
                "@odata.type": "#StorageCollection.StorageCollection",
                "@odata.id": base,
                "Name": "Storage",
                "Members": [{"@odata.id": f"{base}/{storage['id']}"}],
                "Members@odata.count": 1,
            }
        )

    def storage(self, identity: str, storage_id: str) -> Any:
        import flask

        _, _, storage = self.found(identity, storage_id)
        return flask.jsonify(storage_document(identity, storage))

    def drive(self, identity: str, stg_id: str, drv_id: str) -> Any:
        import flask

        _, _, storage = self.found(identity, stg_id)
        for drive in storage["drives"]:
            if drive["Id"] == drv_id:
                return flask.jsonify(drive_document(identity, storage, drive))
        raise self.error.NotFound()

    def volumes(self, identity: str, storage_id: str) -> Any:
        import flask

        driver, system, storage = self.found(identity, storage_id)
        if flask.request.method == "GET":
            return flask.jsonify(volumes_document(identity, storage))
        body = flask.request.get_json(silent=True)
        try:
            volume = planned_volume(storage, body)
        except Refused as exc:
            raise self.error.BadRequest(str(exc)) from None
        if _queued(storage, body):
            return _queue(driver, system, storage, {"op": "create", "volume": volume})
        driver._update(
            system, storage={**storage, "volumes": [*storage.get("volumes", []), volume]}
        )
        location = f"/redfish/v1/Systems/{identity}/Storage/{storage['id']}/Volumes/{volume['Id']}"
        return flask.Response(status=201, headers={"Location": location})

    def volume(self, identity: str, stg_id: str, vol_id: str) -> Any:
        import flask

        driver, system, storage = self.found(identity, stg_id)
        volume = next((v for v in storage.get("volumes", []) if v["Id"] == vol_id), None)
        if volume is None:
            raise self.error.NotFound()
        if flask.request.method == "GET":
            return flask.jsonify(volume_document(identity, storage, volume))
        if _queued(storage, flask.request.get_json(silent=True)):
            return _queue(driver, system, storage, {"op": "delete", "id": vol_id})
        kept = [v for v in storage.get("volumes", []) if v["Id"] != vol_id]
        driver._update(system, storage={**storage, "volumes": kept})
        return flask.Response(status=204)

    def monitor(self, monitor_id: str) -> Any:
        import flask

        monitor = f"{_MONITORS}/{monitor_id}"
        for system in list(self.app.systems._systems.values()):
            storage = system.get("storage") or {}
            if any(c["monitor"] == monitor for c in storage.get("pending", [])):
                return _task_answer(monitor, done=False)
            if monitor in storage.get("done", []):
                return flask.jsonify(task_document(monitor, done=True))
        raise self.error.NotFound()


def _queued(storage: dict[str, Any], body: Any) -> bool:
    """Whether a request is only queued until the next reset (module doc)."""
    asked = body.get("@Redfish.OperationApplyTime") if isinstance(body, dict) else None
    return storage.get("apply_time") == "OnReset" and asked == "OnReset"


def _queue(driver: Any, system: dict[str, Any], storage: dict[str, Any], change: Any) -> Any:
    monitor = new_monitor()
    pending = [*storage.get("pending", []), {**change, "monitor": monitor}]
    driver._update(system, storage={**storage, "pending": pending})
    answer = _task_answer(monitor, done=False)
    answer.headers["Location"] = monitor
    return answer


def _task_answer(monitor: str, *, done: bool) -> Any:
    import flask

    return flask.Response(
        flask.json.dumps(task_document(monitor, done=done)),
        status=200 if done else 202,
        mimetype="application/json",
    )


def install(app: Any, error: Any) -> None:
    """Serve the routes of the module's docstring on the emulator's ``app`` (in its process)."""
    routes = _Routes(app, error)
    app.view_functions.update(
        storage_collection=routes.storage_collection,
        storage=routes.storage,
        drive_resource=routes.drive,
        volumes_collection=routes.volumes,
        volume=routes.volume,
    )
    volume_url = "/redfish/v1/Systems/<identity>/Storage/<stg_id>/Volumes/<vol_id>"
    app.add_url_rule(volume_url, "lab_volume_delete", routes.volume, methods=["DELETE"])
    app.add_url_rule(f"{_MONITORS}/<monitor_id>", "lab_task_monitor", routes.monitor)
