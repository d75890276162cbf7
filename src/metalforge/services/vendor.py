"""Vendor passthru: calling the methods a node's (or a driver's) vendor interface declares.

Which method, which HTTP verbs it takes, whether it runs in the background
and whether it holds the node come from the method's declaration
(``drivers/vendor.py``); refusals are Ironic's: no method given, a method
the interface does not offer, a verb the method does not take, arguments
the interface's ``validate_call`` refuses (all 400), and a node that is held
(409, after the API's short wait).

A node method runs as Ironic's conductor runs it, holding the node:

* **asynchronous** (202): the arguments are validated now, and a ``vendor``
  work item is queued in the same transaction for the node's conductor,
  which runs the method under the node's reservation like any other queued
  node work (``conductor.vendor``). This is the queue and not a hold by the
  API because the caller does not wait for the method: a hold would have to
  outlive the request, and only the queue survives the API process dying
  (the item is claimed again when its lease expires).
* **synchronous** (200 with the method's return value): the caller waits for
  the BMC's answer, so the API process takes the node's reservation for the
  length of the call (``fencing.api_hold``, as setting the boot device does:
  a hold a dead API process left is taken over at once by conductors and
  after ``api.call_hold_seconds`` by requests). A method declared without the
  exclusive lock runs without the reservation on a read-only copy of the node.

Driver methods have no node: they run in the API process (asynchronous ones
in a thread of their own), as Ironic runs them on any conductor without a lock.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metalforge.conductor import vendor as conductor_vendor
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.reservations import acquire
from metalforge.conductor.task import LockLost, NodeGone
from metalforge.db.models import Node
from metalforge.drivers.base import (
    DriverError,
    DriverTask,
    ReadOnlyTask,
    VendorInterface,
    VendorNotFound,
)
from metalforge.drivers.vendor import PassthruDecl
from metalforge.errors import RequestError, bad_request, conflict, not_found
from metalforge.services import fencing, lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version

LOG = logging.getLogger(__name__)

MAX_ARGS_BYTES = 16 * 1024
"""Largest argument object (as JSON) a vendor call may carry: it is queued and logged."""
MAX_METHOD_NAME = 255


@dataclass(frozen=True)
class PassthruAnswer:
    """What the API answers: 202 and nothing when ``asynchronous``, else 200 and ``value``."""

    asynchronous: bool
    value: Any
    attach: bool


def _vendor(svc: Services, node: Node) -> VendorInterface | None:
    """The node's vendor interface; ``None`` for ``no-vendor`` (no methods)."""
    return svc.drivers.optional_interface_of(node, VendorInterface)


def driver_not_found(name: str) -> RequestError:
    return not_found(f"Could not find the following driver(s) or hardware type(s): {name}.")


def _methods(vendor: VendorInterface | None, scope: str) -> dict[str, PassthruDecl]:
    if vendor is None:
        return {}  # no-vendor: nothing to offer, as Ironic's NoVendor
    return vendor.node_methods() if scope == "node" else vendor.driver_methods()


def _listing(vendor: VendorInterface | None, scope: str) -> dict[str, dict[str, Any]]:
    return {name: decl.metadata() for name, decl in _methods(vendor, scope).items()}


def _chosen(
    vendor: VendorInterface | None, scope: str, method: str, http_method: str
) -> PassthruDecl:
    decl = _methods(vendor, scope).get(method)
    if decl is None:
        raise bad_request(f"No handler for method {method}")
    if http_method not in decl.http_methods:
        raise bad_request(f"The method {method} does not support HTTP {http_method}")
    return decl


def check_call(method: str | None, args: Mapping[str, Any]) -> str:
    """The method's name, once the request's shape is acceptable (else 400)."""
    if not method:
        raise bad_request("Method not specified")
    if len(method) > MAX_METHOD_NAME:
        raise bad_request(f"No handler for method {method[:MAX_METHOD_NAME]}...")
    size = len(json.dumps(args, separators=(",", ":")).encode())
    if size > MAX_ARGS_BYTES:
        raise bad_request(
            f"The arguments of vendor method {method} take {size} bytes; "
            f"at most {MAX_ARGS_BYTES} are accepted"
        )
    return method


def _refusal(exc: DriverError) -> RequestError:
    if isinstance(exc, VendorNotFound):
        return not_found(str(exc))
    return bad_request(str(exc))


# -- node methods --------------------------------------------------------------


def node_methods(svc: Services, ident: str, version: Version) -> dict[str, dict[str, Any]]:
    """``GET /v1/nodes/{node}/vendor_passthru/methods``."""
    with svc.db.read() as session:
        node = lookup.load_node(session, ident, version)
    return _listing(_vendor(svc, node), "node")


def call_node(
    svc: Services,
    ident: str,
    version: Version,
    method: str,
    http_method: str,
    args: Mapping[str, Any],
    actor: str | None,
) -> PassthruAnswer:
    """Call the node's vendor method ``method`` (see the module's docstring)."""
    with svc.db.read() as session:
        node = lookup.load_node(session, ident, version)
    decl = _chosen(_vendor(svc, node), "node", method, http_method)
    if decl.asynchronous:
        _queue(svc, ident, version, decl, http_method, args, actor)
        return PassthruAnswer(True, None, decl.attach)
    if not decl.exclusive_lock:
        vendor = _vendor(svc, node)
        value = _run(vendor, ReadOnlyTask(node), decl, http_method, args)
        return PassthruAnswer(False, value, decl.attach)
    return PassthruAnswer(False, _run_held(svc, node, ident, decl, http_method, args), decl.attach)


def _validate(
    vendor: VendorInterface | None,
    task: DriverTask,
    decl: PassthruDecl,
    http_method: str,
    args: Mapping[str, Any],
) -> VendorInterface:
    assert vendor is not None  # _chosen found the method on it
    try:
        vendor.validate_call(task, decl.name, http_method, args)
    except DriverError as exc:
        raise _refusal(exc) from None
    return vendor


def _run(
    vendor: VendorInterface | None,
    task: DriverTask,
    decl: PassthruDecl,
    http_method: str,
    args: Mapping[str, Any],
) -> Any:
    checked = _validate(vendor, task, decl, http_method, args)
    try:
        return checked.call(task, decl, http_method, args)
    except DriverError as exc:
        raise _refusal(exc) from None


def _queue(
    svc: Services,
    ident: str,
    version: Version,
    decl: PassthruDecl,
    http_method: str,
    args: Mapping[str, Any],
    actor: str | None,
) -> None:
    with svc.db.write() as session:
        node = lookup.load_node(session, ident, version)
        vendor = _vendor(svc, node)
        decl = _chosen(vendor, "node", decl.name, http_method)  # as of this transaction
        if decl.exclusive_lock:
            fencing.check_unlocked(session, node)
        _validate(vendor, ReadOnlyTask(node), decl, http_method, args)
        svc.queue_for(
            session,
            node,
            conductor_vendor.CALL,
            conductor_vendor.VendorCall(decl.name, http_method, dict(args)),
        )
        fencing.record(
            session,
            node,
            conductor_vendor.EVENT_TYPE,
            f"vendor method {decl.name} ({http_method}) requested",
            actor,
        )
    svc.notify()


def _run_held(
    svc: Services,
    node: Node,
    ident: str,
    decl: PassthruDecl,
    http_method: str,
    args: Mapping[str, Any],
) -> Any:
    with svc.db.write() as session:
        fencing.check_unlocked(session, lookup.load_node(session, node.uuid, (1, 1)))
    conductor = svc.settings.conductor
    until = svc.db.now() + dt.timedelta(seconds=svc.settings.api.call_hold_seconds)
    holder = fencing.api_hold(conductor.hostname, until)
    ctx = ConductorContext(hostname=holder, db=svc.db, drivers=svc.drivers, settings=conductor)
    try:
        with acquire(ctx, node.id, f"vendor method {decl.name}") as task:
            vendor = _vendor(svc, task.node)
            held = _chosen(vendor, "node", decl.name, http_method)
            value = _run(vendor, task, held, http_method, args)
            task.record(
                conductor_vendor.EVENT_TYPE, f"vendor method {held.name} ({http_method}) called"
            )
            return value
    except LockLost:
        raise conflict(
            f"Node {node.uuid} was taken over by a conductor while vendor method {decl.name} "
            "ran; check the node and retry"
        ) from None
    except NodeGone:
        raise lookup.node_not_found(ident) from None


# -- driver methods ------------------------------------------------------------


def _driver_vendor(svc: Services, driver: str) -> VendorInterface | None:
    if driver not in svc.drivers.types:
        raise driver_not_found(driver)
    return svc.drivers.default_interface_of(driver, VendorInterface)


def driver_methods(svc: Services, driver: str) -> dict[str, dict[str, Any]]:
    """``GET /v1/drivers/{driver}/vendor_passthru/methods``: the default vendor interface's."""
    return _listing(_driver_vendor(svc, driver), "driver")


def call_driver(
    svc: Services, driver: str, method: str, http_method: str, args: Mapping[str, Any]
) -> PassthruAnswer:
    """Call the driver method ``method`` of the hardware type's default vendor interface."""
    vendor = _driver_vendor(svc, driver)
    decl = _chosen(vendor, "driver", method, http_method)
    assert vendor is not None  # _chosen found the method on it
    try:
        vendor.validate_driver_call(decl.name, http_method, args)
    except DriverError as exc:
        raise _refusal(exc) from None
    if decl.asynchronous:
        threading.Thread(
            target=_driver_in_background,
            args=(vendor, decl, http_method, dict(args)),
            name=f"vendor-{driver}",
            daemon=True,
        ).start()
        return PassthruAnswer(True, None, decl.attach)
    try:
        return PassthruAnswer(False, vendor.call_driver(decl, http_method, args), decl.attach)
    except DriverError as exc:
        raise _refusal(exc) from None


def _driver_in_background(
    vendor: VendorInterface, decl: PassthruDecl, http_method: str, args: dict[str, Any]
) -> None:
    try:
        vendor.call_driver(decl, http_method, args)
    except Exception:  # nobody waits for the answer: the log is where it goes
        LOG.exception("driver vendor method %s (%s) failed", decl.name, http_method)
