"""An iDRAC's OEM extensions on the lab's Redfish BMC, for the ``idrac`` hardware type.

sushy-tools serves no Dell OEM resource, so the paths Ironic's ``idrac``
interfaces take (through sushy's ``sushy.oem.dell``) could not be tried.
For a fake system with ``dell`` set, its manager (the emulator's manager of
a fake system has the system's UUID) gains what an iDRAC 9 serves:

* ``Links.Oem.Dell.DellJobService`` with ``DellJobService.DeleteJobQueue``
  (``{"JobID": "JID_CLEARALL"}`` empties the system's ``dell_jobs``);
* ``Links.Oem.Dell.DelliDRACCardService`` with ``DelliDRACCardService.iDRACReset``
  (``Force`` ``Graceful`` or ``Force``): the iDRAC then answers "not ready"
  to ``dell_reset_polls`` status requests before it is ready again;
* ``Links.Oem.Dell.DellLCService`` with ``DellLCService.GetRemoteServicesAPIStatus``
  (``LCStatus``, ``RTStatus``: ``Ready`` or ``NotReady``);
* ``Actions.Oem["#OemManager.ImportSystemConfiguration"]``: a system
  configuration whose ``ServerBoot.1#FirstBootDevice`` is ``VCD-DVD``
  (``VFDD``) makes the system boot its virtual CD (floppy), once when
  ``ServerBoot.1#BootOnce`` is ``Enabled``; answered 202 with a finished
  task, as an iDRAC's job that completed.

What was asked is kept in the fake system's dict (``dell_jobs``,
``dell_resets``, ``dell_boot``) and shown in the manager's ``Oem.Dell.Lab``,
for tests to check.
"""

from __future__ import annotations

import re
from typing import Any

RESET_POLLS = 2
"""Status requests an iDRAC answers "not ready" after a reset (the lab's default)."""
_BOOT_DEVICES = {"VCD-DVD": "Cd", "VFDD": "Floppy"}
_SERVICES = ("DellJobService", "DelliDRACCardService", "DellLCService")
_IMPORT = "EID_674_Manager.ImportSystemConfiguration"


def dell_links(manager_path: str) -> dict[str, Any]:
    """The ``Links.Oem.Dell`` an iDRAC's manager carries."""
    base = f"{manager_path}/Oem/Dell"
    links: dict[str, Any] = {name: {"@odata.id": f"{base}/{name}"} for name in _SERVICES}
    links["Jobs"] = {"@odata.id": f"{base}/Jobs"}
    return links


def dell_actions(manager_path: str) -> dict[str, Any]:
    return {
        "#OemManager.ImportSystemConfiguration": {
            "target": f"{manager_path}/Actions/Oem/{_IMPORT}",
            "ShutdownType@Redfish.AllowableValues": ["Graceful", "Forced", "NoReboot"],
        }
    }


def service_document(manager_path: str, name: str) -> dict[str, Any]:
    base = f"{manager_path}/Oem/Dell/{name}"
    every: dict[str, dict[str, dict[str, Any]]] = {
        "DellJobService": {"#DellJobService.DeleteJobQueue": {}},
        "DelliDRACCardService": {
            "#DelliDRACCardService.iDRACReset": {
                "Force@Redfish.AllowableValues": ["Graceful", "Force"]
            }
        },
        "DellLCService": {"#DellLCService.GetRemoteServicesAPIStatus": {}},
    }
    actions = every[name]
    for action, body in actions.items():
        body["target"] = f"{base}/Actions/{action.lstrip('#')}"
    return {"@odata.id": base, "Id": name, "Name": name, "Actions": actions}


def boot_from(import_buffer: Any) -> tuple[str, bool] | None:
    """The boot device and once-ness a system configuration asks for (None: none)."""
    if not isinstance(import_buffer, str):
        return None
    device = re.search(r'Name="ServerBoot\.1#FirstBootDevice">([^<]*)<', import_buffer)
    once = re.search(r'Name="ServerBoot\.1#BootOnce">([^<]*)<', import_buffer)
    if device is None or device.group(1) not in _BOOT_DEVICES:
        return None
    return _BOOT_DEVICES[device.group(1)], bool(once and once.group(1) == "Enabled")


class _Routes:
    """The views, bound to the emulator's app and its error classes."""

    def __init__(self, app: Any, error: Any, stock_manager: Any) -> None:
        self.app, self.error, self.stock_manager = app, error, stock_manager

    def system(self, identity: str) -> tuple[Any, dict[str, Any]]:
        """The driver and the fake system behind manager ``identity`` (404 unless Dell)."""
        driver = self.app.systems
        system = driver._get(identity)
        if not system.get("dell"):
            raise self.error.NotFound()
        return driver, system

    def manager(self, identity: str) -> Any:
        import flask

        answer = self.stock_manager(identity=identity)
        if flask.request.method != "GET" or not self.app.systems._get(identity).get("dell"):
            return answer
        document = flask.json.loads(answer.get_data())
        path = document["@odata.id"]
        document.setdefault("Links", {})["Oem"] = {"Dell": dell_links(path)}
        document.setdefault("Actions", {})["Oem"] = dell_actions(path)
        system = self.app.systems._get(identity)
        document["Oem"] = {
            "Dell": {
                "@odata.type": "#DellOem.v1_3_0.DellOemResources",
                # The lab's own record of what the iDRAC was asked, for tests to read.
                "Lab": {
                    "Jobs": len(system.get("dell_jobs", [])),
                    "Resets": int(system.get("dell_resets", 0)),
                    "LastImport": system.get("dell_boot"),
                },
            }
        }
        document["Model"] = "16G Monolithic"
        document["FirmwareVersion"] = "7.10.30.00"
        return flask.jsonify(document)

    def service(self, identity: str, name: str) -> Any:
        import flask

        self.system(identity)
        if name not in _SERVICES:
            raise self.error.NotFound()
        return flask.jsonify(service_document(f"/redfish/v1/Managers/{identity}", name))

    def action(self, identity: str, name: str, action: str) -> Any:
        import flask

        driver, system = self.system(identity)
        body = flask.request.get_json(silent=True) or {}
        if (name, action) == ("DellJobService", "DellJobService.DeleteJobQueue"):
            if body.get("JobID") != "JID_CLEARALL" and body.get("JobID") not in system.get(
                "dell_jobs", []
            ):
                raise self.error.BadRequest(f"unknown job {body.get('JobID')!r}")
            driver._update(system, dell_jobs=[])
            return flask.Response(status=200)
        if (name, action) == ("DelliDRACCardService", "DelliDRACCardService.iDRACReset"):
            if body.get("Force") not in ("Graceful", "Force"):
                raise self.error.BadRequest("Force must be Graceful or Force")
            polls = int(system.get("dell_reset_polls", RESET_POLLS))
            driver._update(
                system, dell_resets=int(system.get("dell_resets", 0)) + 1, dell_not_ready=polls
            )
            return flask.Response(status=200)
        if (name, action) == ("DellLCService", "DellLCService.GetRemoteServicesAPIStatus"):
            waiting = int(system.get("dell_not_ready", 0))
            if waiting:
                driver._update(system, dell_not_ready=waiting - 1)
            state = "NotReady" if waiting else "Ready"
            return flask.jsonify({"LCStatus": state, "RTStatus": state, "Status": state})
        raise self.error.NotFound()

    def import_configuration(self, identity: str) -> Any:
        import flask

        driver, system = self.system(identity)
        body = flask.request.get_json(silent=True) or {}
        wanted = boot_from(body.get("ImportBuffer"))
        if wanted is None:
            raise self.error.BadRequest("ImportBuffer names no boot device this lab knows")
        device, once = wanted
        driver._update(system, boot_device=device, dell_boot={"device": device, "once": once})
        task = f"/redfish/v1/TaskService/Tasks/JID_{len(system.get('dell_jobs', [])) + 1}"
        return flask.Response(status=202, headers={"Location": task})


def install(app: Any, error: Any) -> None:
    """Serve the routes of the module's docstring on the emulator's ``app`` (in its process)."""
    routes = _Routes(app, error, app.view_functions["manager_resource"])
    app.view_functions["manager_resource"] = routes.manager
    base = "/redfish/v1/Managers/<identity>"
    app.add_url_rule(f"{base}/Oem/Dell/<name>", "lab_dell_service", routes.service)
    app.add_url_rule(
        f"{base}/Oem/Dell/<name>/Actions/<action>",
        "lab_dell_action",
        routes.action,
        methods=["POST"],
    )
    app.add_url_rule(
        f"{base}/Actions/Oem/{_IMPORT}",
        "lab_dell_import",
        routes.import_configuration,
        methods=["POST"],
    )
