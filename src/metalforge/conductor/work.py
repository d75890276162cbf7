"""The declaration of a kind of work a conductor runs while holding a node.

Each kind (a provision step of the node's flow, an abort, a power change, a
console or firmware setting, a vendor call, an introspection event) is one
frozen ``NodeWork`` value: the work item's kind, the type of its payload,
what running it does and what the node keeps when the request is given up.
The services queue a typed payload through the declaration, the conductor
reads the stored JSON back into that type before it takes the node (a
payload that does not fit is dead-lettered, never half-run), and nothing
matches kind strings by hand. ``node_work`` lists every kind.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pydantic

from metalforge.conductor.task import NodeTask
from metalforge.config import WorkDeadlines

P = TypeVar("P")


class PayloadError(ValueError):
    """A stored payload does not fit its kind's declaration (written by other code)."""


@dataclass(frozen=True)
class NoPayload:
    """The payload of work whose node's state says everything (a provision step, an abort)."""


@dataclass(frozen=True)
class NodeWork(Generic[P]):
    """One kind of work run under a node's reservation."""

    kind: str
    """The work items' ``kind`` column."""
    payload_type: type[P]
    """A frozen dataclass: what the service queues and ``run`` receives."""
    run: Callable[[NodeTask, P], None]
    on_give_up: Callable[[NodeTask, str], None]
    """What the node keeps when the request is given up or broke unexpectedly, with the
    message: a power or setting change fails alone, a flow's step fails the flow."""
    deadline: Callable[[WorkDeadlines], float]
    """Seconds an item may run, from the settings (``running.run_with_deadline``)."""

    def payload(self, value: P) -> dict[str, Any]:
        """The JSON stored in the work item."""
        if not isinstance(value, self.payload_type):
            raise TypeError(f"{self.kind} work takes a {self.payload_type.__name__}")
        return dataclasses.asdict(value)  # type: ignore[call-overload, no-any-return]

    def read(self, stored: Any) -> P:
        """The typed payload of a stored item; ``PayloadError`` when it does not fit."""
        try:
            # Strict JSON validation: a JSON object may make the dataclass, but no
            # field is coerced ("5" stays a string and is refused where a number is due).
            text = json.dumps(stored)
            return _adapter(self.payload_type).validate_json(text, strict=True)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'payload'}: {error['msg']}"
                for error in exc.errors()[:3]
            )
            raise PayloadError(f"not a {self.kind} payload ({problems})") from None


_ADAPTERS: dict[type[Any], pydantic.TypeAdapter[Any]] = {}


def _adapter(payload_type: type[P]) -> pydantic.TypeAdapter[P]:
    adapter = _ADAPTERS.get(payload_type)
    if adapter is None:
        adapter = _ADAPTERS[payload_type] = pydantic.TypeAdapter(payload_type)
    return adapter
