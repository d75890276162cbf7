"""Who asks, as services need to know it: may it do this, does it see that node.

A service asks at the point Ironic does (a create rule on the node a body
names, whether a node a patch moves a record to is visible, whether a node's
allocation may be read), so it needs the caller's authorization, not just an
answer decided before the transaction read anything. It gets one ``Caller``:
the API implements it once, from the request's identity and its policy
(``api.auth.access.policy_caller``); tests implement it with a rule table.

What the caller may not see is concealed by the service (a hidden node reads
as a missing one); what it may see but not do is refused with ``denied``,
Ironic's 403.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from metalforge.db.models import Node
from metalforge.errors import RequestError

NODE_GET = "baremetal:node:get"
"""The rule that decides whether a caller sees a node at all."""


@dataclass(frozen=True, slots=True)
class NodeTarget:
    """A node rule's target: the node's owner and lessee (none: no project has it)."""

    owner: str | None
    lessee: str | None

    @classmethod
    def of(cls, node: Node | None) -> NodeTarget:
        """``node``'s target; a missing or hidden node (None) is nobody's."""
        return cls(node.owner, node.lessee) if node is not None else cls(None, None)


@dataclass(frozen=True, slots=True)
class AllocationTarget:
    """An allocation rule's target: the allocation's owner."""

    owner: str | None


@dataclass(frozen=True, slots=True)
class RunbookTarget:
    """A runbook rule's target: the runbook's owner (none: the deployment's)."""

    owner: str | None


Target = NodeTarget | AllocationTarget | RunbookTarget


def denied(rule: str) -> RequestError:
    """The policy refused ``rule``: a 403 naming the rule, as Ironic words it."""
    return RequestError(403, f"Access was denied to the following resource: {rule}")


class Caller(Protocol):
    """The caller of a request: the one question ``may``, and the two asked most.

    Implementations subclass it (``sees`` and ``require`` come with it).
    """

    def may(self, rule: str, target: Target) -> bool:
        """Whether the caller passes ``rule`` (``baremetal:port:create``...) on ``target``."""
        ...

    def sees(self, owner: str | None, lessee: str | None) -> bool:
        """Whether the caller sees a node of this owner and lessee (``baremetal:node:get``)."""
        return self.may(NODE_GET, NodeTarget(owner, lessee))

    def require(self, rule: str, target: Target) -> None:
        """Refuse (403, ``denied``) unless the caller passes ``rule`` on ``target``."""
        if not self.may(rule, target):
            raise denied(rule)
