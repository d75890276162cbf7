"""The introspection state machine, one declarative table.

Beside a node's provision state (``inspecting``, ``inspect wait``, ...),
each inspected node has an introspection record whose state says how far
its inspection has got, in ironic-inspector's words: ``starting`` (setting
up, powering the node into the ramdisk), ``waiting`` (for the ramdisk's
report), ``processing`` (the report is being turned into properties and
ports), ``finished`` and ``error``, plus ``reapplying`` (stored data processed
again) and ``enrolling`` (a machine no node matched reported, and was
enrolled: discovery). Every event that moves it goes through ``advance``, which consults
this table and nothing else; the workers that apply events, the API's
up-front checks, the documentation's table and the exhaustive tests all
read it.

Delivery is at least once, so the table must make a repeated event safe.
``continue`` (the ramdisk's report) is *strict*: a report that arrives
again once processing began is never processed twice; the record goes to
``error`` instead (a worker that died after processing but before it
acknowledged the report leaves exactly this). Every other event that is not
allowed where the record stands is refused: the request is consumed and the
record goes to ``error`` as well, except for ``timeout``, which is *stale*
when the record moved on since the sweep saw it waiting and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

STARTING: Final = "starting"
WAITING: Final = "waiting"
PROCESSING: Final = "processing"
FINISHED: Final = "finished"
ERROR: Final = "error"
REAPPLYING: Final = "reapplying"
ENROLLING: Final = "enrolling"
"""A report from a machine no node matched, enrolled as a new node (discovery)."""

STATES: Final = (STARTING, WAITING, PROCESSING, FINISHED, ERROR, REAPPLYING, ENROLLING)
NOT_STARTED: Final = None
"""A node with no introspection record yet."""

START: Final = "start"
"""The operator asks for an inspection (either API)."""
WAIT: Final = "wait"
"""Automatic: the node is booting the ramdisk."""
TIMEOUT: Final = "timeout"
"""Automatic: the ramdisk did not report in time (the singleton sweep)."""
ABORT: Final = "abort"
"""The operator stops the inspection."""
CONTINUE: Final = "continue"
"""The ramdisk reported its data (strict)."""
FINISH: Final = "finish"
"""Automatic: the data was processed."""
FAIL: Final = "fail"
"""Automatic: setting up or processing failed."""
REAPPLY: Final = "reapply"
"""The operator asks for the stored data to be processed again."""
ENROLL: Final = "enroll"
"""An unknown machine reported (discovery enabled): its new node's record begins."""

EVENTS: Final = (START, WAIT, TIMEOUT, ABORT, CONTINUE, FINISH, FAIL, REAPPLY, ENROLL)

STALE_WHEN_OUT_OF_PLACE: Final = frozenset({TIMEOUT})
"""Events that, out of place, only tell that the record moved on: nothing changes."""

BOOTING_RAMDISK: Final = frozenset({STARTING, WAITING})
"""States in which the node boots, or runs, the inspection ramdisk: the PXE filter
lets exactly these nodes reach the inspection DHCP service."""

ACTIVE: Final = frozenset({STARTING, WAITING, PROCESSING, REAPPLYING, ENROLLING})
"""States in which the inspection is under way (``finished`` is false)."""

_TABLE: Final[dict[tuple[str | None, str], str]] = {
    (NOT_STARTED, START): STARTING,
    (STARTING, START): STARTING,
    (STARTING, WAIT): WAITING,
    (STARTING, FAIL): ERROR,
    (STARTING, ABORT): ERROR,
    (STARTING, TIMEOUT): ERROR,
    (WAITING, WAIT): WAITING,
    (WAITING, TIMEOUT): ERROR,
    (WAITING, ABORT): ERROR,
    (WAITING, CONTINUE): PROCESSING,
    (WAITING, FAIL): ERROR,
    (PROCESSING, CONTINUE): ERROR,
    (PROCESSING, FINISH): FINISHED,
    (PROCESSING, FAIL): ERROR,
    (FINISHED, START): STARTING,
    (FINISHED, ABORT): ERROR,
    (FINISHED, REAPPLY): REAPPLYING,
    (ERROR, START): STARTING,
    (ERROR, ABORT): ERROR,
    (ERROR, REAPPLY): REAPPLYING,
    (REAPPLYING, FINISH): FINISHED,
    (REAPPLYING, FAIL): ERROR,
    (NOT_STARTED, ENROLL): ENROLLING,
    (ENROLLING, CONTINUE): PROCESSING,
    (ENROLLING, FAIL): ERROR,
}
"""``(state, event) -> target``. ``processing -continue-> error`` is the seed's "déjà vu"."""


@dataclass(frozen=True)
class Step:
    """What one event does to a record in a given state."""

    source: str | None
    event: str
    target: str | None
    """The new state; ``None``: the event is stale and nothing changes."""
    refused: bool = False
    """The event was out of place (the record goes to ``error``, the request is consumed)."""

    def reason(self) -> str:
        """Why the event was refused, for the record's ``error`` and the node's history."""
        where = self.source or "not started"
        if self.event == CONTINUE and self.source in (PROCESSING, FINISHED, REAPPLYING):
            return (
                f"the ramdisk's report arrived again while the inspection was {where}; "
                "it is not processed twice"
            )
        if self.event == CONTINUE:
            return f"a ramdisk report arrived while the inspection was {where}"
        return f"{self.event} is not allowed while the inspection is {where}"


def after(source: str | None, event: str) -> str:
    """The state ``event`` leads to from ``source``, where the table must allow it (an
    automatic event the flow applies itself); ``ValueError`` where it does not."""
    step = advance(source, event)
    if step.refused or step.target is None:
        raise ValueError(step.reason())
    return step.target


def allowed(source: str | None, event: str) -> bool:
    return (source, event) in _TABLE


def advance(source: str | None, event: str) -> Step:
    """Apply ``event`` to a record in ``source`` as the table says."""
    if event not in EVENTS:
        raise ValueError(f"unknown introspection event {event!r}")
    if source is not None and source not in STATES:
        raise ValueError(f"unknown introspection state {source!r}")
    found = _TABLE.get((source, event))
    if found is not None:
        return Step(source, event, found)
    if event in STALE_WHEN_OUT_OF_PLACE:
        return Step(source, event, None)
    return Step(source, event, ERROR, refused=True)


def transitions() -> list[tuple[str | None, str, str]]:
    """Every allowed ``(source, event, target)``, in table order (for docs and tests)."""
    return [(source, event, dest) for (source, event), dest in _TABLE.items()]
