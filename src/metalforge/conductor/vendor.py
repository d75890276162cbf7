"""Asynchronous vendor methods, run by the node's conductor under its reservation.

The API answered 202 once it had checked the call (method, verb, arguments)
and queued a ``vendor`` work item; here the method runs as Ironic's
conductor runs a spawned vendor method: holding the node. What it returned,
or why it failed, goes to the node's history -- the caller has long had its
answer, and a vendor method failing is no reason to touch the node's state,
its flow or ``last_error``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from metalforge.conductor import history
from metalforge.conductor.task import NodeTask
from metalforge.conductor.work import NodeWork
from metalforge.drivers.base import DriverError, VendorInterface, optional_interface_of

EVENT_TYPE = "vendor"
_SHOWN = 200
"""Characters of a return value kept in the history entry."""


@dataclass(frozen=True)
class VendorCall:
    """One accepted call of a node's vendor method."""

    method: str
    http_method: str
    args: dict[str, Any] = field(default_factory=dict)


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 3]}..."


def run(task: NodeTask, call: VendorCall) -> None:
    """Run the queued vendor method on ``task.node``; record what came of it."""
    method, verb, args = call.method, call.http_method, call.args
    vendor = optional_interface_of(task, VendorInterface)
    decl = vendor.node_methods().get(method) if vendor is not None else None
    if vendor is None or decl is None:
        # The node's vendor interface changed after the call was accepted.
        fail(task, f"vendor method {method} is no longer offered by the node's vendor interface")
        return
    try:
        returned = vendor.call(task, decl, verb, args)
    except DriverError as exc:
        fail(task, f"vendor method {method} ({verb}) failed: {exc}")
        return
    task.record(EVENT_TYPE, f"vendor method {method} ({verb}) returned {_shown(returned)}")


def fail(task: NodeTask, message: str) -> None:
    """A vendor call that could not run or broke: said in the node's history, nothing else."""
    task.record(EVENT_TYPE, message, history.ERROR)


CALL: NodeWork[VendorCall] = NodeWork("vendor", VendorCall, run, fail, lambda d: d.vendor)
