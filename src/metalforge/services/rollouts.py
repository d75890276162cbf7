"""Rollouts: one change (a runbook, a firmware baseline, ``provide`` or ``inspect``) rolled
out over many nodes in waves, with a canary, a failure budget and an operator's hand on it.

Creating one (``create_rollout``) settles everything up front, so bad input
is refused (400, nothing stored) before any node moves: the selector is
resolved into a fixed list of nodes (none matched: 400); for each node the
request its flow will be started with is built (a runbook's steps as the
caller may use them on that node, a baseline's updates for the components
that node has drifted on) and checked as a provision request would be (the
node's state, the steps' arguments), and the caller must be allowed to
change each node's provision state. A project's rollout only ever selects
nodes the project owns. Each node is *claimed* by a unique
column of its row, so two live rollouts never hold one node (409 naming the
other).

A rollout is then advanced by one conductor at a time (``rollout_waves.advance``,
the ``rollouts`` singleton task; its writes check the leader's term), from its
rows alone, so the death of any process loses nothing:

- the canary (wave 0, ``canary`` nodes) starts first; once it has finished
  the rollout pauses for an operator's ``resume``;
- then waves of at most ``batch`` nodes, each once the previous has
  finished, only within the ``window`` of hours when one is set;
- a node succeeds when its flow brings it to the flow's end state
  (``manageable`` after cleaning or inspection, ``active`` after servicing,
  ``available`` after ``provide``); it fails when the flow fails (the node is
  left as the flow leaves it: ``clean failed``, ``service failed``...) or
  it ends anywhere else. A failed node is counted, never retried;
- more than ``max_failures`` failed nodes stop the rollout (``failed``);
  ``abort`` stops it (``stopped``). Either way, no node starts any more and
  the ones under way finish their flow;
- a node whose start was lost (the process died between recording it and
  starting the flow, or the node was locked at that moment) is started again
  on the next round: a node counts as started only once its provision state
  changed after the rollout started it.
"""

from __future__ import annotations

import fnmatch
import logging
import uuid as uuidlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, exists, func, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.db.models import Node, NodeTrait, Rollout, RolloutNode, utcnow
from metalforge.errors import RequestError, bad_request, conflict, not_found
from metalforge.services import firmware_baselines, lookup, provisioning, runbooks
from metalforge.services.bodies import RolloutAction, RolloutCreate, RolloutSelector
from metalforge.services.caller import Caller, NodeTarget
from metalforge.services.context import Services
from metalforge.services.microversion import NEWEST

LOG = logging.getLogger(__name__)

# Rollout states.
PENDING = "pending"
RUNNING = "running"
PAUSED = "paused"
STOPPED = "stopped"
FAILED = "failed"
DONE = "done"
LIVE = (PENDING, RUNNING, PAUSED)
"""States in which nodes may still start."""
ROLLOUT_STATES = (PENDING, RUNNING, PAUSED, STOPPED, FAILED, DONE)

# A node's part in a rollout.
N_PENDING = "pending"
N_RUNNING = "running"
N_SUCCEEDED = "succeeded"
N_FAILED = "failed"
N_SKIPPED = "skipped"
NODE_STATES = (N_PENDING, N_RUNNING, N_SUCCEEDED, N_FAILED, N_SKIPPED)

SET_PROVISION_STATE = "baremetal:node:set_provision_state"
CANARY_DONE = "the canary finished: resume to roll out to the other nodes"


def not_found_error(ident: str) -> RequestError:
    return not_found(f"Rollout {ident} could not be found.")


def _where(ident: str) -> Any:
    if lookup.is_uuid(ident):
        return Rollout.uuid == str(uuidlib.UUID(ident))
    return Rollout.name == ident


def find_rollout(session: Session, ident: str, *, for_update: bool = False) -> Rollout:
    """By UUID or name; 404 otherwise. ``for_update`` takes its row lock (on PostgreSQL),
    so an operator's change and a round of ``advance`` take turns."""
    stmt = select(Rollout).where(_where(ident))
    found = session.scalar(stmt.with_for_update() if for_update else stmt)
    if found is None:
        raise not_found_error(ident)
    return found


def owner_of(connection: Connection, ident: str) -> str | None:
    """The rollout's project (none: the system scope's), for an authorization; 404 if none."""
    row = connection.execute(select(Rollout.owner).where(_where(ident))).first()
    if row is None:
        raise not_found_error(ident)
    owner: str | None = row.owner
    return owner


def listing(state: str | None, project: str | None = None) -> Select[Any]:
    """Every rollout, or the ones ``project`` created."""
    stmt = select(Rollout)
    if project is not None:
        stmt = stmt.where(Rollout.owner == project)
    if state is not None:
        if state not in ROLLOUT_STATES:
            raise bad_request(
                f"Invalid rollout state {state!r}: one of {', '.join(ROLLOUT_STATES)}"
            )
        stmt = stmt.where(Rollout.state == state)
    return stmt


def rows_of(session: Session, rollout_ids: Sequence[int]) -> dict[int, list[RolloutNode]]:
    """Each rollout's nodes, in their order."""
    found: dict[int, list[RolloutNode]] = {i: [] for i in rollout_ids}
    if not rollout_ids:
        return found
    stmt = (
        select(RolloutNode)
        .where(RolloutNode.rollout_id.in_(rollout_ids))
        .order_by(RolloutNode.rollout_id, RolloutNode.position)
    )
    for row in session.scalars(stmt):
        found[row.rollout_id].append(row)
    return found


def node_names(session: Session, rows: Sequence[RolloutNode]) -> dict[int, str | None]:
    """The current name of each row's node, by node id (for the views)."""
    ids = sorted({r.node_id for r in rows})
    if not ids:
        return {}
    found = session.execute(select(Node.id, Node.name).where(Node.id.in_(ids)))
    return {row.id: row.name for row in found}


def node_counts(session: Session) -> dict[str, int]:
    """Nodes of live rollouts by their state in it, for ``GET /metrics``."""
    counts = dict.fromkeys(NODE_STATES, 0)
    live = select(Rollout.id).where(Rollout.state.in_(LIVE))
    for state, count in session.execute(
        select(RolloutNode.state, func.count())
        .where(RolloutNode.rollout_id.in_(live))
        .group_by(RolloutNode.state)
    ):
        counts[state] = int(count)
    return counts


# -- creating ---------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """The request one node's flow will be started with (none: nothing to do there)."""

    node: Node
    verbs: tuple[str, ...]
    """The flows it goes through in turn (none: it is skipped)."""
    steps: list[dict[str, Any]]
    disable_ramdisk: bool
    skipped: str | None = None
    """Why nothing is to be done on the node."""


def _matched(session: Session, selector: RolloutSelector, project: str | None) -> list[Node]:
    """The nodes ``selector`` picks, in its order (the listed ones as listed, else by id)."""
    criteria = selector.model_dump(exclude_none=True)
    if not criteria:
        raise bad_request("Invalid rollout: the selector must name at least one criterion")
    stmt = select(Node)
    if project is not None:  # a project rolls out over the nodes it owns, never others
        stmt = stmt.where(Node.owner == project)
    for column in ("resource_class", "conductor_group", "owner", "provision_state"):
        value = criteria.get(column)
        if value is not None:
            stmt = stmt.where(getattr(Node, column) == value)
    for trait in selector.traits or []:
        stmt = stmt.where(exists().where(NodeTrait.node_id == Node.id, NodeTrait.trait == trait))
    if selector.drifted_from is not None:
        report = firmware_baselines.drift_report_in(session, selector.drifted_from)
        stmt = stmt.where(Node.uuid.in_([n.node_uuid for n in report.nodes]))
    if selector.nodes is not None:
        stmt = stmt.where(_named(selector.nodes))
    found = list(session.scalars(stmt.order_by(Node.id)))
    if selector.name_pattern is not None:
        found = [n for n in found if n.name and fnmatch.fnmatchcase(n.name, selector.name_pattern)]
    if selector.nodes is not None:
        found = _in_listed_order(session, selector.nodes, found, project)
    if not found:
        raise bad_request("Invalid rollout: the selector matches no node")
    return found


def _named(idents: Sequence[str]) -> ColumnElement[bool]:
    return or_(Node.uuid.in_(idents), Node.name.in_(idents))


def _in_listed_order(
    session: Session, listed: Sequence[str], found: Sequence[Node], project: str | None
) -> list[Node]:
    """The listed nodes the other criteria matched, in the listed order, read in two
    statements whatever the list's length (a list naming a node many times is refused
    before: ``check_listed``); a listed node that does not exist (for the project) is a
    400."""
    by_ident = {n.uuid: n for n in found} | {n.name: n for n in found if n.name}
    unmatched = [ident for ident in listed if ident not in by_ident]
    if unmatched:
        existing = select(Node.uuid, Node.name).where(_named(unmatched))
        if project is not None:
            existing = existing.where(Node.owner == project)
        known = {key for row in session.execute(existing) for key in row if key}
        missing = next((ident for ident in unmatched if ident not in known), None)
        if missing is not None:
            raise bad_request(f"Invalid rollout: node {missing} could not be found")
    ordered: list[Node] = []
    for ident in listed:
        node = by_ident.get(ident)
        if node is not None and node not in ordered:
            ordered.append(node)
    return ordered


def check_listed(listed: Sequence[str] | None) -> None:
    """Refuse a list that names a node twice (400): each node is rolled out once."""
    if listed is None:
        return
    seen: set[str] = set()
    for ident in listed:
        if ident in seen:
            raise bad_request(f"Invalid rollout: node {ident} is listed more than once")
        seen.add(ident)


STEPS_FLOWS = {
    states.MANAGEABLE: (states.CLEAN,),
    states.ACTIVE: (states.SERVICE,),
    # Ironic cleans only manageable nodes by hand: an available one is taken there and
    # back, and ``provide`` runs its automated cleaning as every return to the pool does.
    states.AVAILABLE: (states.MANAGE, states.CLEAN, states.PROVIDE),
}
"""How steps run on a node, by the state it is in when the rollout is created."""


def _steps_verbs(node: Node, what: str) -> tuple[str, ...]:
    found = STEPS_FLOWS.get(node.provision_state)
    if found is None:
        raise bad_request(
            f"Invalid rollout: node {node.uuid} is {node.provision_state}; {what} runs on "
            "manageable or available nodes (manual cleaning) or active ones (servicing)"
        )
    return found


def _plan(
    session: Session, node: Node, action: RolloutAction, caller: Caller, updates: _Updates
) -> _Plan:
    if action.verb is not None:
        return _Plan(node, (action.verb,), [], False)
    if action.runbook is not None:
        verbs = _steps_verbs(node, f"runbook {action.runbook}")
        expansion = runbooks.expand(session, action.runbook, node, NEWEST, caller)
        return _Plan(node, verbs, [dict(s) for s in expansion.steps], expansion.disable_ramdisk)
    if node.uuid not in updates.covered:
        why = f"firmware baseline {updates.baseline} is for another vendor or model"
        return _Plan(node, (), [], False, why)
    settings = updates.for_node(node.uuid)
    if not settings:
        return _Plan(node, (), [], False, "already at the baseline")
    verbs = _steps_verbs(node, f"firmware baseline {updates.baseline}")
    step = {"interface": "firmware", "step": "update", "args": {"settings": settings}}
    return _Plan(node, verbs, [step], True)


@dataclass(frozen=True)
class _Updates:
    """A baseline's updates per node: only the components that node has drifted on."""

    baseline: str
    by_node: dict[str, list[dict[str, Any]]]
    covered: frozenset[str] = frozenset()

    def for_node(self, node_uuid: str) -> list[dict[str, Any]]:
        return self.by_node.get(node_uuid, [])

    @classmethod
    def of(cls, session: Session, ident: str | None) -> _Updates:
        if ident is None:
            return cls("", {})
        report = firmware_baselines.drift_report_in(session, ident)
        settings = {s["component"]: s for s in firmware_baselines.update_settings(report.baseline)}
        return cls(
            report.baseline.name,
            {
                node.node_uuid: [settings[d.component] for d in node.components]
                for node in report.nodes
            },
            report.covered,
        )


def flow_request(
    verb: str, steps: Sequence[dict[str, Any]], disable_ramdisk: bool
) -> provisioning.FlowRequest:
    """The provision request a rollout makes for one node at one of its flows (only
    ``clean`` and ``service`` take the steps)."""
    steps_field = provisioning.verb_of(verb).requires
    if steps_field is None or not steps_field.holds_steps:
        return provisioning.FlowRequest(verb=verb, target=verb)
    named = {steps_field.name, "disable_ramdisk"} if disable_ramdisk else {steps_field.name}
    return provisioning.FlowRequest(
        verb,
        verb,
        frozenset(named),
        steps={steps_field: tuple(steps)},
        disable_ramdisk=disable_ramdisk,
    )


def _holders(session: Session, node_ids: Sequence[int]) -> list[str]:
    rows = session.execute(
        select(Rollout.uuid, RolloutNode.node_uuid)
        .join(Rollout, Rollout.id == RolloutNode.rollout_id)
        .where(RolloutNode.claim.in_(node_ids))
    ).all()
    return [f"node {node} is in rollout {rollout}" for rollout, node in rows]


def create_rollout(
    svc: Services, body: RolloutCreate, caller: Caller, project: str | None, actor: str | None
) -> Rollout:
    """Resolve, plan and check everything, then store the rollout (see the module docstring).

    ``project``: the caller's project when it is not of the system scope; the
    rollout is then that project's, over nodes it owns only."""
    action = body.action
    if sum(x is not None for x in (action.runbook, action.baseline, action.verb)) != 1:
        raise bad_request("Invalid rollout: the action must name one of runbook, baseline, verb")
    if body.name is not None:
        lookup.check_name(body.name)
    check_listed(body.selector.nodes)
    try:
        with svc.db.write() as session:
            if body.name is not None and session.scalar(
                select(Rollout.id).where(Rollout.name == body.name)
            ):
                raise conflict(f"A rollout with name {body.name} already exists.")
            if action.runbook is not None:
                runbooks.find_runbook(session, action.runbook)  # named wrongly: said first
            nodes = _matched(session, body.selector, project)
            updates = _Updates.of(session, action.baseline)
            plans = []
            for node in nodes:
                caller.require(SET_PROVISION_STATE, NodeTarget.of(node))
                plan = _plan(session, node, action, caller, updates)
                if plan.verbs:  # the first flow can be checked now; the others need its end
                    request = flow_request(plan.verbs[0], plan.steps, plan.disable_ramdisk)
                    provisioning.check(svc, session, node, request)
                plans.append(plan)
            if not any(p.verbs for p in plans):
                reasons = sorted({p.skipped or "" for p in plans})
                raise bad_request(
                    "Invalid rollout: no selected node has anything to do ("
                    + "; ".join(reasons)
                    + ")"
                )
            held = _holders(session, [n.id for n in nodes])
            if held:
                raise conflict("Nodes are already in a live rollout: " + "; ".join(held))
            rollout = _store(session, body, plans, project, actor)
    except IntegrityError:  # a concurrent create claimed one of the nodes first
        raise conflict("Nodes are already in a live rollout created at the same time") from None
    except RequestError as exc:
        if exc.status not in (403, 404):
            raise
        # A runbook or baseline the body names that does not exist, or that the caller may
        # not use on a node it selects, or such a node: the body is wrong, nothing ran.
        raise bad_request(f"Invalid rollout: {exc.message}") from None
    return rollout


def _store(
    session: Session,
    body: RolloutCreate,
    plans: Sequence[_Plan],
    project: str | None,
    actor: str | None,
) -> Rollout:
    rollout = Rollout(
        uuid=str(uuidlib.uuid4()),
        name=body.name,
        state=PENDING,
        action=body.action.model_dump(exclude_none=True),
        selector=body.selector.model_dump(exclude_none=True),
        canary=body.canary,
        batch=body.batch,
        max_failures=body.max_failures,
        canary_approved=False,
        window_start=body.window.start_hour if body.window else None,
        window_end=body.window.end_hour if body.window else None,
        owner=project,
        created_by=actor,
    )
    session.add(rollout)
    session.flush()
    to_run = [p for p in plans if p.verbs]
    waves = _waves(len(to_run), body.canary, body.batch)
    now = utcnow()
    for position, plan in enumerate(plans):
        row = RolloutNode(
            rollout_id=rollout.id,
            node_id=plan.node.id,
            node_uuid=plan.node.uuid,
            position=position,
            verbs=",".join(plan.verbs),
            stage=0,
            steps=plan.steps,
            disable_ramdisk=plan.disable_ramdisk,
        )
        if not plan.verbs:
            row.state, row.wave, row.finished_at = N_SKIPPED, -1, now
            row.error = plan.skipped
        else:
            row.state, row.wave, row.claim = N_PENDING, next(waves), plan.node.id
        session.add(row)
    session.flush()
    return rollout


def _waves(count: int, canary: int, batch: int) -> Iterator[int]:
    """The wave of each node in turn: 0 for the canary, then 1, 2... of ``batch`` each."""
    for index in range(count):
        if index < canary:
            yield 0
        else:
            yield 1 + (index - canary) // batch


# -- the operator's hand ----------------------------------------------------


def pause(svc: Services, ident: str) -> Rollout:
    """No node starts until ``resume``; the ones under way finish."""
    return _change(svc, ident, (PENDING, RUNNING), PAUSED, "paused by an operator")


def resume(svc: Services, ident: str) -> Rollout:
    """Carry on (after the canary: start the waves)."""
    return _change(svc, ident, (PAUSED,), RUNNING, None)


def abort(svc: Services, ident: str) -> Rollout:
    """Stop for good: no node starts any more; the ones under way finish their flow."""
    return _change(svc, ident, LIVE, STOPPED, None)


def _change(
    svc: Services,
    ident: str,
    allowed: Sequence[str],
    new: str,
    reason: str | None,
) -> Rollout:
    with svc.db.write() as session:
        rollout = find_rollout(session, ident, for_update=True)
        if rollout.state not in allowed:
            raise conflict(
                f"Rollout {rollout.uuid} is {rollout.state}; it can be made {new} only when "
                f"{' or '.join(allowed)}"
            )
        if rollout.state == PAUSED and new == RUNNING and rollout.paused_reason == CANARY_DONE:
            rollout.canary_approved = True
        rollout.state = new
        rollout.paused_reason = reason
        rollout.updated_at = utcnow()
        if new == STOPPED:
            skip_pending(session, rollout, "the rollout was aborted")
        session.flush()
    svc.notify()
    return rollout


def skip_pending(session: Session, rollout: Rollout, why: str) -> None:
    session.execute(
        update(RolloutNode)
        .where(RolloutNode.rollout_id == rollout.id, RolloutNode.state == N_PENDING)
        .values(state=N_SKIPPED, claim=None, error=why, finished_at=utcnow())
    )
