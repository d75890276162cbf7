"""Checks several flows' verbs share."""

from __future__ import annotations

from metalforge.conductor.flows.spec import Admission
from metalforge.db.models import Node
from metalforge.errors import RequestError, bad_request


def not_in_maintenance(admission: Admission) -> None:
    node = admission.node
    if node.maintenance:
        raise bad_request(
            f'The requested action "{admission.request.target}" could not be performed '
            f'on node "{node.uuid}" while it is in maintenance mode.'
        )


def refuse_if_protected(node: Node) -> None:
    """A protected node is not undeployed, rebuilt or deleted.

    403 as in Ironic, for the provision verbs as for DELETE (a 409 would make
    clients retry for ~10 s).
    """
    if node.protected:
        raise RequestError(
            403, f"Node {node.uuid} is protected and cannot be undeployed, rebuilt or deleted"
        )


def not_protected(admission: Admission) -> None:
    refuse_if_protected(admission.node)
