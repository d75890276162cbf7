"""Calls to BMCs and ramdisk agents (failed ones, power changes, agent boots), counted
for ``GET /metrics``.

The protocol clients have no database and serve every flow, periodic task
and request alike, so they count into this process's ``FAILURES``; the
conductor hands it to its ``Database`` (``Database.also_flush``), which adds
it to the cluster's totals with its own counts. Kinds are a few fixed words,
never the BMC's message.
"""

from __future__ import annotations

from metalforge import states
from metalforge.tallies import (
    AGENT_BOOTS,
    AGENT_ERRORS,
    BMC_BREAKER_TRIPS,
    BMC_CALL_DURATION,
    BMC_ERRORS,
    POWER_ACTIONS,
    Tally,
)

FAILURES = Tally()
"""This process's failed BMC and agent calls (and BMC call durations) since the last flush."""


def bmc_failed(protocol: str, kind: str) -> None:
    """A call to a BMC failed: ``protocol`` is ``redfish`` or ``ipmi``; ``kind`` one of
    ``timeout``, ``connection``, ``auth``, ``refused`` (the BMC answered with an error)
    or ``protocol`` (an answer that could not be used); ``busy`` and ``circuit_open`` when
    the BMC guard refused the call (``bmc_guard``)."""
    FAILURES.count(BMC_ERRORS, (protocol, kind))


def bmc_breaker_opened(protocol: str) -> None:
    """A BMC's circuit breaker opened: calls to it are refused for a cooling period."""
    FAILURES.count(BMC_BREAKER_TRIPS, (protocol,))


def agent_failed(kind: str) -> None:
    """A call to a ramdisk agent failed: ``unreachable``, ``busy`` or ``refused``."""
    FAILURES.count(AGENT_ERRORS, (kind,))


def bmc_call_took(protocol: str, seconds: float) -> None:
    """A call to a BMC ended (answered or not) after ``seconds``."""
    FAILURES.observe(BMC_CALL_DURATION, (protocol,), seconds)


def flow_label(provision_state: str) -> str:
    """The flow a node in ``provision_state`` runs, as the counters name it (``none``)."""
    return states.FLOW_OF.get(provision_state, "none")


def power_switched(provision_state: str, target: str) -> None:
    """metalforge asked a BMC to move a node in ``provision_state`` to ``target``."""
    FAILURES.count(POWER_ACTIONS, (flow_label(provision_state), target))


def agent_started(provision_state: str, how: str) -> None:
    """A flow has its agent: ``booted`` (a power cycle into the ramdisk) or ``kept``."""
    FAILURES.count(AGENT_BOOTS, (flow_label(provision_state), how))
