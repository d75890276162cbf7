"""An EventService on the lab's Redfish BMC: event subscriptions as a BMC keeps them.

sushy-tools serves no EventService, so the ``redfish`` vendor methods Metal3
uses for its BMC event subscriptions could only be refused. With
``LAB_EVENT_SERVICE`` in the emulator's config, the service root links
``/redfish/v1/EventService``, which offers the ``Alert`` event type and a
``Subscriptions`` collection: ``POST`` creates one (``Destination``, an
http(s) URL, required; ``Context``, ``Protocol``, ``EventTypes`` of those
offered, ``HttpHeaders`` kept but never shown back, as Redfish requires)
answered 201 with its ``Location``; ``GET`` and ``DELETE`` a member by id.
Subscriptions live in the emulator's process.
"""

from __future__ import annotations

import itertools
from typing import Any
from urllib.parse import urlsplit

SERVICE = "/redfish/v1/EventService"
SUBSCRIPTIONS = f"{SERVICE}/Subscriptions"
EVENT_TYPES = ("Alert",)


class _Routes:
    def __init__(self, app: Any, error: Any, stock_root: Any) -> None:
        self.app, self.error, self.stock_root = app, error, stock_root
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.serial = itertools.count(1)

    @property
    def enabled(self) -> bool:
        return bool(self.app.config.get("LAB_EVENT_SERVICE"))

    def root(self) -> Any:
        import flask

        answer = self.stock_root()
        if not self.enabled:
            return answer
        document = flask.json.loads(answer.get_data())
        document["EventService"] = {"@odata.id": SERVICE}
        return flask.jsonify(document)

    def service(self) -> Any:
        import flask

        if not self.enabled:
            raise self.error.NotFound()
        return flask.jsonify(
            {
                "@odata.type": "#EventService.v1_7_0.EventService",
                "@odata.id": SERVICE,
                "Id": "EventService",
                "Name": "Event Service",
                "ServiceEnabled": True,
                "DeliveryRetryAttempts": 3,
                "DeliveryRetryIntervalSeconds": 30,
                "EventTypesForSubscription": list(EVENT_TYPES),
                "Subscriptions": {"@odata.id": SUBSCRIPTIONS},
                "Actions": {
                    "#EventService.SubmitTestEvent": {
                        "target": f"{SERVICE}/Actions/EventService.SubmitTestEvent"
                    }
                },
            }
        )

    def collection(self) -> Any:
        import flask

        if not self.enabled:
            raise self.error.NotFound()
        if flask.request.method == "POST":
            return self._create(flask.request.get_json(silent=True))
        members = [{"@odata.id": f"{SUBSCRIPTIONS}/{i}"} for i in self.subscriptions]
        return flask.jsonify(
            {
                "@odata.type": "#EventDestinationCollection.EventDestinationCollection",
                "@odata.id": SUBSCRIPTIONS,
                "Name": "Event Subscriptions",
                "Members": members,
                "Members@odata.count": len(members),
            }
        )

    def _create(self, body: Any) -> Any:
        import flask

        if not isinstance(body, dict):
            raise self.error.BadRequest("the request body must be an object")
        destination = body.get("Destination")
        if not isinstance(destination, str) or urlsplit(destination).scheme not in (
            "http",
            "https",
        ):
            raise self.error.BadRequest("Destination must be an http(s) URL")
        types = body.get("EventTypes") or list(EVENT_TYPES)
        if not isinstance(types, list) or set(types) - set(EVENT_TYPES):
            raise self.error.BadRequest(f"EventTypes must be among {list(EVENT_TYPES)}")
        ident = str(next(self.serial))
        self.subscriptions[ident] = {
            "Id": ident,
            "Destination": destination,
            "Context": str(body.get("Context") or ""),
            "Protocol": str(body.get("Protocol") or "Redfish"),
            "EventTypes": types,
            "HttpHeaders": body.get("HttpHeaders") or [],
        }
        return flask.Response(status=201, headers={"Location": f"{SUBSCRIPTIONS}/{ident}"})

    def member(self, ident: str) -> Any:
        import flask

        found = self.subscriptions.get(ident) if self.enabled else None
        if found is None:
            raise self.error.NotFound()
        if flask.request.method == "DELETE":
            del self.subscriptions[ident]
            return flask.Response(status=204)
        shown = {k: v for k, v in found.items() if k != "HttpHeaders"}
        return flask.jsonify(
            {
                "@odata.type": "#EventDestination.v1_8_0.EventDestination",
                "@odata.id": f"{SUBSCRIPTIONS}/{ident}",
                "Name": f"Subscription {ident}",
                "HttpHeaders": [],  # never shown back (Redfish: write-only)
                **shown,
            }
        )

    def headers_of(self, ident: str) -> Any:
        """What the BMC keeps for a subscription's deliveries, for tests."""
        import flask

        found = self.subscriptions.get(ident)
        if found is None:
            raise self.error.NotFound()
        return flask.jsonify({"HttpHeaders": found["HttpHeaders"]})


def install(app: Any, error: Any) -> None:
    """Serve the module docstring's routes on the emulator's ``app`` (in its process)."""
    routes = _Routes(app, error, app.view_functions["root_resource"])
    app.view_functions["root_resource"] = routes.root
    app.add_url_rule(SERVICE, "lab_event_service", routes.service)
    app.add_url_rule(SUBSCRIPTIONS, "lab_subscriptions", routes.collection, methods=["GET", "POST"])
    app.add_url_rule(
        f"{SUBSCRIPTIONS}/<ident>",
        "lab_subscription",
        routes.member,
        methods=["GET", "DELETE"],
    )
    app.add_url_rule("/lab/subscriptions/<ident>/headers", "lab_headers", routes.headers_of)
