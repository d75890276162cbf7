"""Adoption (``adopt``): take over a node already running a workload, without touching it."""

from __future__ import annotations

from metalforge import states
from metalforge.conductor.flows.common import fail
from metalforge.conductor.flows.spec import FlowSpec, FlowState, Verb
from metalforge.conductor.task import NodeTask
from metalforge.drivers.base import DriverError


def adopt(task: NodeTask) -> None:
    """adopting: the interfaces a deployed node needs must accept its settings."""
    try:
        for family in ("power", "deploy", "management"):
            task.ctx.drivers.family(task.node, family).validate(task)
    except DriverError as exc:
        fail(task, f"Adoption failed: {exc}", str(exc))
        return
    task.transition(states.DONE, last_error=None)


SPEC = FlowSpec(
    name="adopt",
    verbs=(Verb(states.ADOPT, since=(1, 17)),),
    states={states.ADOPTING: FlowState(hook=adopt)},
)
