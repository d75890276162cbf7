"""Provision requests: the only way the API starts, continues or aborts a flow.

``start`` checks the request against the verb's flow spec (the fields it
takes, its guards and checks), and in one transaction moves the node through
the state table and queues the conductor's work, so the next GET already
shows the change (ironicclient's ``--wait`` relies on it) and the request
cannot be lost.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy.orm import Session

from metalforge import states
from metalforge.conductor import node_work, transitions
from metalforge.conductor.flows import catalog
from metalforge.conductor.flows.request_fields import ALL
from metalforge.conductor.flows.request_fields import CLEAN_STEPS as CLEAN_STEPS
from metalforge.conductor.flows.request_fields import CONFIGDRIVE as CONFIGDRIVE
from metalforge.conductor.flows.request_fields import DEPLOY_STEPS as DEPLOY_STEPS
from metalforge.conductor.flows.request_fields import SERVICE_STEPS as SERVICE_STEPS
from metalforge.conductor.flows.spec import Admission, Intent
from metalforge.conductor.flows.spec import FlowRequest as FlowRequest
from metalforge.conductor.flows.spec import Verb as Verb
from metalforge.conductor.work import NoPayload
from metalforge.db import flow_progress
from metalforge.db.models import Node
from metalforge.errors import bad_request, conflict
from metalforge.services import fencing, lookup, runbooks
from metalforge.services.caller import Caller
from metalforge.services.context import Services
from metalforge.services.microversion import NEWEST, Version, fmt

REQUEST_FIELDS = ALL
"""Every optional field of a provision request (the route checks versions and policy)."""

CONTROL_VERBS: dict[str, Verb] = {
    states.ABORT: Verb(states.ABORT, since=(1, 13), clears_last_error=False),
    states.UNHOLD: Verb(states.UNHOLD, since=(1, 85), clears_last_error=False),
}
"""Verbs that act on the running flow instead of starting one."""


def verb_of(verb: str) -> Verb:
    """The declaration of ``verb``: its flow's, or abort's and unhold's."""
    found = catalog.VERBS.get(verb)
    return found[1] if found is not None else CONTROL_VERBS[verb]


def check_fields(request: FlowRequest, verb: Verb) -> None:
    """Refuse fields ``verb`` (the request's) does not take and a missing field it requires."""
    for field in REQUEST_FIELDS:
        if field.name in request.given and field not in verb.fields:
            raise bad_request(field.misplaced)
    required = verb.requires
    if required is not None and not request.provided(required) and request.runbook is None:
        raise bad_request(required.missing or f'"{required.name}" is required')


def start(
    svc: Services,
    ident: str,
    version: Version,
    request: FlowRequest,
    actor: str | None,
    *,
    request_id: str | None = None,
    caller: Caller | None = None,
) -> str:
    """Start (or abort, or unhold) the node's flow; returns the node's UUID. A flow started
    keeps ``request_id`` (the request's global id) for the agent's logs. A request naming a
    runbook needs its ``caller``, who must be allowed to use it."""
    verb = verb_of(request.verb)
    check_fields(request, verb)
    with svc.db.write() as session:
        node = lookup.load_node(session, ident, version)
        fencing.check_unlocked(session, node)
        admission = _admitted(svc, session, node, verb, version, request, caller)
        if request.verb == states.ABORT:
            _abort(svc, admission, version, actor)
        else:
            _move(svc, admission, verb, actor, request_id)
    svc.notify()
    return node.uuid


def check(svc: Services, session: Session, node: Node, request: FlowRequest) -> None:
    """Refuse, as ``start`` would, a request for ``node`` that is to be made later (a
    rollout's), without starting anything: its fields, guards, state and checks."""
    verb = verb_of(request.verb)
    check_fields(request, verb)
    admission = _admitted(svc, session, node, verb, NEWEST, request, None)
    for each in verb.checks:
        each(admission)


def _admitted(
    svc: Services,
    session: Session,
    node: Node,
    verb: Verb,
    version: Version,
    request: FlowRequest,
    caller: Caller | None,
) -> Admission:
    if request.runbook is not None:
        _check_allowed(node, request)
        request = _with_runbook(session, node, request, verb, version, caller)
    admission = Admission(session, node, request, svc.drivers, svc.settings.conductor)
    for guard in verb.guards:
        guard(admission)
    _check_allowed(node, request)
    return admission


def _with_runbook(
    session: Session,
    node: Node,
    request: FlowRequest,
    verb: Verb,
    version: Version,
    caller: Caller | None,
) -> FlowRequest:
    """``request`` with the runbook's steps as the verb's steps, and its ``disable_ramdisk``."""
    steps_field = verb.requires
    if caller is None or steps_field is None:
        raise ValueError(f"a runbook needs a caller and a verb that takes steps, not {verb.name}")
    if request.provided(steps_field):
        raise bad_request(f'Please provide either "{steps_field.name}" or a runbook, but not both.')
    expansion = runbooks.expand(session, request.runbook or "", node, version, caller)
    given = request.given | {steps_field.name}
    # The verb's own steps field takes the runbook's steps, whichever verb it is.
    steps = {**request.steps, steps_field: tuple(expansion.steps)}
    return dataclasses.replace(
        request, given=given, steps=steps, disable_ramdisk=expansion.disable_ramdisk
    )


def _check_allowed(node: Node, request: FlowRequest) -> None:
    if request.verb not in states.allowed_events(node.provision_state):
        raise bad_request(
            f'The requested action "{request.target}" can not be performed on node '
            f'"{node.uuid}" while it is in state "{node.provision_state}".'
        )


def _abort(svc: Services, admission: Admission, version: Version, actor: str | None) -> None:
    node = admission.node
    needed = catalog.ABORT_SINCE.get(node.provision_state)
    if needed is not None and version < needed:
        raise bad_request(
            f'Aborting in state "{node.provision_state}" needs API version {fmt(needed)} or newer'
        )
    svc.queue_for(admission.session, node, node_work.ABORT, NoPayload())
    fencing.record(admission.session, node, "provisioning", "abort requested", actor)


def _move(
    svc: Services, admission: Admission, verb: Verb, actor: str | None, request_id: str | None
) -> None:
    for check in verb.checks:
        check(admission)
    intent = verb.intent(admission) if verb.intent else Intent()
    changes = {**intent.changes, "flow_request_id": request_id}
    if verb.clears_last_error:
        changes["last_error"] = None
    node = admission.node
    try:
        transitions.apply(admission.session, node, verb.name, changes=changes, user=actor)
    except transitions.TransitionConflict:
        raise conflict(f"Node {node.uuid} {fencing.REQUEST_RACED}; please retry.") from None
    if intent.progress is not None:
        # After the transition, whose conditional write settles a race: the
        # request that lost it raised above and wrote no progress.
        flow_progress.write(admission.session.connection(), node.id, intent.progress)
    if intent.writes is not None:
        intent.writes(admission.session)
    if states.STATES[node.provision_state].busy:
        svc.queue_for(admission.session, node, node_work.PROVISION, NoPayload())
