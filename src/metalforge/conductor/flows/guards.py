"""Checks several flows' verbs share."""

from __future__ import annotations

from metalforge.conductor.flows.spec import Admission
from metalforge.errors import RequestError, bad_request


def not_in_maintenance(admission: Admission) -> None:
    node = admission.node
    if node.maintenance:
        raise bad_request(
            f'The requested action "{admission.request.target}" could not be performed '
            f'on node "{node.uuid}" while it is in maintenance mode.'
        )


def not_protected(admission: Admission) -> None:
    node = admission.node
    if node.protected:
        # Ironic answers a protected node with 403, for this as for DELETE.
        raise RequestError(
            403, f"Node {node.uuid} is protected and cannot be undeployed, rebuilt or deleted"
        )
