"""Every kind of work a conductor runs holding a node, by its work items' kind.

The flows' own kinds are declared here (a provision step, an abort, a power
change); the settings, vendor calls and introspection events are declared
beside the code that runs them. The conductor looks an item's kind up in
``BY_KIND``; an item of a kind not listed is dead-lettered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from metalforge.conductor import history, kept_agents, node_settings, vendor, virtual_media
from metalforge.conductor.flows import engine, inspection_events
from metalforge.conductor.task import NodeTask
from metalforge.conductor.work import NodeWork, NoPayload
from metalforge.db import queue


@dataclass(frozen=True)
class PowerChange:
    """An operator's power request: the target state and its timeout in seconds."""

    target: str
    timeout: int | None = None


def _run_provision(task: NodeTask, _payload: NoPayload) -> None:
    engine.advance(task)


def _run_abort(task: NodeTask, _payload: NoPayload) -> None:
    engine.abort(task)
    engine.advance(task)


def _run_power(task: NodeTask, change: PowerChange) -> None:
    engine.set_power(task, change.target, change.timeout)


def _power_failed(task: NodeTask, message: str) -> None:
    """A power request fails alone: the node's flow and provision state are untouched."""
    task.node.target_power_state = None
    task.node.last_error = message
    task.record("power", message, history.ERROR)


PROVISION: NodeWork[NoPayload] = NodeWork(
    queue.PROVISION, NoPayload, _run_provision, engine.fail_flow, lambda d: d.provision
)
"""Continue the node's flow from its state (queued de-duplicated, one per node)."""
ABORT: NodeWork[NoPayload] = NodeWork(
    "abort", NoPayload, _run_abort, engine.fail_flow, lambda d: d.abort
)
POWER: NodeWork[PowerChange] = NodeWork(
    "power", PowerChange, _run_power, _power_failed, lambda d: d.power
)


def _inspection_failed(task: NodeTask, message: str) -> None:
    """An introspection event that raised or was given up on: its record ends in error
    (a reapply or a discovered node's processing too, whose node is not inspecting),
    and the inspection fails like any flow."""
    if not inspection_events.ended_in_error(task, message):
        engine.fail_flow(task, message)


INSPECTION: NodeWork[inspection_events.InspectionEvent] = NodeWork(
    inspection_events.WORK_KIND,
    inspection_events.InspectionEvent,
    inspection_events.run_event,
    _inspection_failed,
    lambda d: d.inspection,
)
"""Apply an introspection event; one given up on fails the inspection like any flow."""

BY_KIND: Mapping[str, NodeWork[Any]] = MappingProxyType(
    {
        work.kind: work
        for work in (
            PROVISION,
            ABORT,
            POWER,
            node_settings.CONSOLE,
            node_settings.BOOT_MODE,
            node_settings.SECURE_BOOT,
            INSPECTION,
            vendor.CALL,
            kept_agents.IDLE,
            virtual_media.ATTACH,
            virtual_media.EJECT,
        )
    }
)
"""Every kind of node work, by the work items' ``kind``."""
