"""``redfish`` vendor methods: the BMC's event subscriptions, as Ironic offers them.

Metal3's baremetal-operator creates a subscription for a host
(``POST ?method=create_subscription`` with ``Destination``, ``Context`` and
``HttpHeaders``) and deletes it (``DELETE ?method=delete_subscription`` with
``id``); the two reads list them. All four are synchronous: the answer is
what the BMC said, and each runs under the node's reservation like any other
call to the node's BMC.

Arguments are checked before the BMC is contacted: ``Destination`` must be an
http(s) URL with a host; a subscription ``id`` is one path segment of plain
characters, because it is appended to the BMC's subscriptions path (an id
like ``../../Systems/1`` would otherwise delete something else).
``EventTypes`` are checked against the types the BMC says it offers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from sushy import exceptions as sushy_errors

from metalforge.drivers.base import (
    DriverError,
    DriverTask,
    VendorInterface,
    VendorNotFound,
    check_vendor_args,
)
from metalforge.drivers.redfish import connection
from metalforge.drivers.vendor import passthru

SHOWN_FIELDS = ("Id", "Context", "Protocol", "Destination", "EventTypes")
"""The fields of a subscription the methods answer with (those every BMC reports)."""

MAX_TEXT = 2048
MAX_ITEMS = 64
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")

_CREATE_ARGS: dict[str, type | tuple[type, ...]] = {
    "Destination": str,
    "EventTypes": list,
    "Context": str,
    "Protocol": str,
    "HttpHeaders": list,
}
_ID_ARGS: dict[str, type | tuple[type, ...]] = {"id": str}


def _shown(subscription: Any) -> dict[str, Any]:
    return {k: v for k, v in dict(subscription.json).items() if k in SHOWN_FIELDS}


def _check_destination(value: str) -> None:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise DriverError(f"Destination {value!r} is not a valid http(s) URL")


def _check_create(args: Mapping[str, Any]) -> None:
    check_vendor_args("create_subscription", args, _CREATE_ARGS, required=("Destination",))
    for name in ("Destination", "Context", "Protocol"):
        if len(args.get(name) or "") > MAX_TEXT:
            raise DriverError(f"{name} is longer than {MAX_TEXT} characters")
    _check_destination(args["Destination"])
    types = args.get("EventTypes")
    if types is not None and (
        len(types) > MAX_ITEMS or not all(isinstance(t, str) and len(t) <= 64 for t in types)
    ):
        raise DriverError(f"EventTypes must be a list of at most {MAX_ITEMS} event type names")
    headers = args.get("HttpHeaders")
    if headers is not None and (
        len(headers) > MAX_ITEMS or not all(isinstance(h, dict) for h in headers)
    ):
        raise DriverError(f"HttpHeaders must be a list of at most {MAX_ITEMS} header objects")


def _check_id(method: str, args: Mapping[str, Any]) -> str:
    check_vendor_args(method, args, _ID_ARGS, required=("id",))
    ident = str(args["id"])
    if not _ID.fullmatch(ident) or ident in (".", ".."):
        raise DriverError(f"id {ident!r} is not a subscription id (letters, digits, '.', '_', '-')")
    return ident


def _member(subscriptions: Any, ident: str, info: str) -> Any:
    path = str(subscriptions.path)
    separator = "" if path.endswith("/") else "/"
    try:
        return subscriptions.get_member(path + separator + ident)
    except sushy_errors.ResourceNotFoundError:
        raise VendorNotFound(f"The BMC has no subscription {ident!r} ({info})") from None


class RedfishVendor(VendorInterface):
    """Event subscriptions through the BMC's ``EventService``."""

    name = "redfish"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)

    def properties(self) -> dict[str, str]:
        return dict(connection.PROPERTIES)

    def validate_call(
        self, task: DriverTask, method: str, http_method: str, args: Mapping[str, Any]
    ) -> None:
        connection.parse_driver_info(task.node.driver_info)
        if method == "create_subscription":
            _check_create(args)
        elif method in ("delete_subscription", "get_subscription"):
            _check_id(method, args)
        else:
            check_vendor_args(method, args, {})

    @passthru(
        ["POST"],
        asynchronous=False,
        description=(
            "Subscribe a URL to the BMC's events. Arguments: Destination (the URL, required), "
            "EventTypes, Context, Protocol (default Redfish), HttpHeaders."
        ),
    )
    def create_subscription(
        self, task: DriverTask, http_method: str, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "Destination": args["Destination"],
            "Protocol": args.get("Protocol") or "Redfish",
            "Context": args.get("Context") or "",
            "EventTypes": args.get("EventTypes") or ["Alert"],
        }
        if args.get("HttpHeaders"):
            payload["HttpHeaders"] = args["HttpHeaders"]
        with connection.event_service(task, "create an event subscription") as service:
            types = service.get_event_types_for_subscription()
            offered = {str(getattr(t, "value", t)) for t in types}
            unknown = sorted(set(payload["EventTypes"]) - offered)
            if unknown:
                raise DriverError(
                    f"EventTypes {', '.join(unknown)} are not offered by the BMC; "
                    f"it offers {', '.join(sorted(offered))}"
                )
            created = service.subscriptions.create(payload)
            if created is None:
                raise DriverError("The BMC did not say where the new subscription is")
            return _shown(created)

    @passthru(
        ["DELETE"],
        asynchronous=False,
        description="Delete one of the BMC's event subscriptions. Argument: id (required).",
    )
    def delete_subscription(
        self, task: DriverTask, http_method: str, args: Mapping[str, Any]
    ) -> None:
        ident = str(args["id"])
        with connection.event_service(task, f"delete event subscription {ident}") as service:
            _member(service.subscriptions, ident, f"node {task.node.uuid}").delete()

    @passthru(
        ["GET"],
        asynchronous=False,
        description="The BMC's event subscriptions collection.",
    )
    def get_all_subscriptions(
        self, task: DriverTask, http_method: str, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        with connection.event_service(task, "list event subscriptions") as service:
            return dict(service.subscriptions.json)

    @passthru(
        ["GET"],
        asynchronous=False,
        description="One of the BMC's event subscriptions. Argument: id (required).",
    )
    def get_subscription(
        self, task: DriverTask, http_method: str, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        ident = str(args["id"])
        with connection.event_service(task, f"read event subscription {ident}") as service:
            return _shown(_member(service.subscriptions, ident, f"node {task.node.uuid}"))
