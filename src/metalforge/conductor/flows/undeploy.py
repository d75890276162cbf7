"""Undeployment (``deleted``): remove the instance, then hand the node to cleaning."""

from __future__ import annotations

from metalforge import states
from metalforge.conductor import allocation_work
from metalforge.conductor.flows import cleaning
from metalforge.conductor.flows.common import fail
from metalforge.conductor.flows.guards import not_protected
from metalforge.conductor.flows.spec import FlowSpec, FlowState, Verb
from metalforge.conductor.task import NodeTask
from metalforge.drivers.base import DeployInterface, DriverError


def tear_down(task: NodeTask) -> None:
    """deleting: remove the instance (and its allocation), then on to cleaning."""
    try:
        task.ctx.drivers.interface_of(task.node, DeployInterface, "tear down").tear_down(task)
    except DriverError as exc:
        fail(task, f"Failed to tear down: {exc}", str(exc))
        return
    allocation_id = task.node.allocation_id
    if allocation_id is not None:
        # The instance is gone, so is the node's allocation: in this very
        # transaction, so no one sees a node without instance but still allocated.
        task.with_next_transition(lambda s: allocation_work.delete_allocation(s, allocation_id))
    task.transition(
        states.DONE,
        instance_info={},
        instance_uuid=None,
        instance_name=None,
        allocation_id=None,
        deploy_step={},
        last_error=None,
    )


SPEC = FlowSpec(
    name="undeploy",
    verbs=(
        Verb(
            states.UNDEPLOY,
            guards=(not_protected,),
            intent=cleaning.forget_cleaning,
            clears_last_error=False,
        ),
    ),
    states={states.DELETING: FlowState(hook=tear_down)},
)
