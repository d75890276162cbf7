"""Singleton upkeep of the tables that only grow: run by one conductor at a time.

The node event log gets a row for every watched change of every node; the
event stream needs only the last ``conductor.event_retention`` seconds of it
(what a client that reconnects may have missed), so older rows are dropped
every minute whether or not anyone is listening. Step run times are kept
for estimates, the newest ``db.step_runs.KEPT`` of each step on each
hardware type; conductors add runs without trimming (they write under the
write lock), and the same minute's upkeep drops the older ones. Each
node's history keeps its newest ``history_max_entries`` entries (and all
of the last ``history_minimum_days``); the upkeep drops the rest, a batch a
minute.
"""

from __future__ import annotations

import datetime as dt
import logging

from metalforge.conductor.leadership import LeaderTerm, SingletonTask
from metalforge.db import events, history_prune, step_runs

LOG = logging.getLogger(__name__)

PRUNE_PERIOD = 60.0


def prune_node_events(term: LeaderTerm) -> int:
    """Drop node events older than the retention; how many."""
    before = term.ctx.db.now().timestamp() - term.ctx.settings.event_retention
    with term.write() as session:
        pruned = events.prune(session.connection(), before)
    if pruned:
        LOG.debug("node events pruned: %d", pruned)
    return pruned


def prune_step_runs(term: LeaderTerm) -> int:
    """Drop the step runs estimates no longer use; how many."""
    with term.write() as session:
        pruned = step_runs.prune(session.connection())
    if pruned:
        LOG.debug("step runs pruned: %d", pruned)
    return pruned


def prune_history(term: LeaderTerm) -> int:
    """Drop the oldest history of nodes that have more than their share; how many."""
    settings = term.ctx.settings
    before = term.ctx.db.now() - dt.timedelta(days=settings.history_minimum_days)
    with term.write() as session:
        pruned = history_prune.prune(
            session.connection(),
            keep=settings.history_max_entries,
            before=before,
            batch=settings.history_prune_batch,
        )
    if pruned:
        LOG.debug("node history entries pruned: %d", pruned)
    return pruned


def prune(term: LeaderTerm) -> None:
    prune_node_events(term)
    prune_step_runs(term)
    prune_history(term)


TASKS = (SingletonTask("table-prune", lambda _ctx: PRUNE_PERIOD, prune),)
"""The upkeep tasks, beside the inspection service's."""
