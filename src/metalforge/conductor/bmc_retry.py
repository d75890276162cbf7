"""Riding out a BMC that does not answer, for the actions that are safe to repeat.

A BMC that times out or drops the connection is often busy or rebooting and
answers a little later; one that answers "no" (refused credentials, an
unsupported request) will answer the same way every time. Drivers tell the
two apart (``BmcUnavailable`` versus any other ``DriverError``), and the
conductor repeats only what is idempotent (switching power, booting a flow's
ramdisk, starting an inspection, rescue and unrescue), within
``conductor.bmc_retry_budget``, on the task's clock. Steps are never
repeated here: one may have started before its BMC stopped
answering, and running it twice could do harm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from metalforge.conductor import history
from metalforge.conductor.task import NodeTask
from metalforge.drivers.base import BmcUnavailable

T = TypeVar("T")

LONGEST_PAUSE = 30.0
"""Seconds between attempts never grow beyond this, however long the budget."""


def retried(task: NodeTask, doing: str, call: Callable[[], T]) -> T:
    """``call()``, tried again while the BMC does not answer and the budget lasts.

    Each retry is written to the node's history, so an operator sees why a
    power change took a minute. The last ``BmcUnavailable`` is raised once
    the next attempt would start past the budget.
    """
    settings = task.ctx.settings
    give_up_at = task.now() + settings.bmc_retry_budget
    pause = settings.bmc_retry_interval
    attempt = 1
    while True:
        try:
            return call()
        except BmcUnavailable as exc:
            if task.now() + pause > give_up_at:
                raise
            task.record(
                "bmc_retry",
                f"{doing}: {exc}; trying again in {pause:g}s (attempt {attempt + 1})",
                history.WARNING,
            )
            task.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE)
            attempt += 1
