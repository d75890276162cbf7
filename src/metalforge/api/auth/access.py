"""Authorization of each route, declared on the route itself.

Every operator route carries exactly one guard as a FastAPI dependency
(``dependencies=[guard(...)]``). The guard names the policy rule and how its
target is found, runs before the route's body, and leaves what it learnt on
the request for the route (the caller, the project a list is limited to).
A test walks the application's routes and fails for any route without one,
so a new route cannot ship unchecked.

Ironic's visibility rule is kept exactly: a resource the caller may not even
read is answered 404, as if it did not exist; one it may read but not act on
is 403. Lists a caller may not see whole are limited to its project.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Depends, Request
from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from metalforge.api.auth.identity import Identity
from metalforge.api.auth.middleware import CALLER_KEY
from metalforge.api.auth.policy import (
    Policy,
    allocation_target,
    node_target,
    rollout_target,
    runbook_target,
)
from metalforge.api.node_view import REDACTED, NodeDisclosure
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import read_only, services
from metalforge.db.models import Allocation, Node, Port, Portgroup
from metalforge.errors import RequestError
from metalforge.services import lookup, rollouts, runbooks, volume
from metalforge.services.caller import Caller, NodeTarget, RunbookTarget, Target, denied

GuardKind = Literal[
    "system",
    "node",
    "node_fields",
    "node_list",
    "port",
    "portgroup",
    "volume_connector",
    "volume_target",
    "allocation",
    "runbook",
    "runbook_or_public",
    "runbook_fields",
    "rollout",
    "list",
    "body",
]


def identity_of(request: Request) -> Identity:
    """Who the request is from (set by the authentication middleware)."""
    caller: Identity = request.scope["state"][CALLER_KEY]
    return caller


def share_of(request: Request) -> str:
    """Whose share of a bounded resource (BMC calls, event streams) a request draws on:
    its project's, else its user's."""
    identity = identity_of(request)
    if identity.project_id is not None:
        return f"project {identity.project_id}"
    return f"user {identity.user}"


def actor(request: Request) -> str | None:
    """Who asked, as history records it (none under ``noauth``)."""
    return identity_of(request).describe()


def policy_of(request: Request) -> Policy:
    return services(request).policy


def allows(request: Request, rule: str, target: Mapping[str, str] | None = None) -> bool:
    return policy_of(request).allows(rule, identity_of(request), target)


def require(request: Request, rule: str, target: Mapping[str, str] | None = None) -> None:
    """403 unless the caller passes ``rule`` on ``target``."""
    if not allows(request, rule, target):
        raise denied(rule)


@dataclass(frozen=True)
class PolicyCaller(Caller):
    """The services' ``Caller``: the request's identity, judged by the policy."""

    policy: Policy
    identity: Identity

    def may(self, rule: str, target: Target) -> bool:
        return self.policy.allows(rule, self.identity, _policy_target(target))


def _policy_target(target: Target) -> dict[str, str]:
    if isinstance(target, NodeTarget):
        return node_target(target.owner, target.lessee)
    if isinstance(target, RunbookTarget):
        return runbook_target(target.owner)
    return allocation_target(target.owner)


def policy_caller(request: Request) -> PolicyCaller:
    """The caller services ask (``may``, ``sees``, ``require``), as the guards ask it."""
    return PolicyCaller(policy_of(request), identity_of(request))


@dataclass(frozen=True)
class NodeAccess:
    """What a node guard found: the node's target, for the route's further checks."""

    owner: str | None
    lessee: str | None

    @property
    def target(self) -> dict[str, str]:
        return node_target(self.owner, self.lessee)


@dataclass(frozen=True)
class Guard:
    """One route's authorization: a rule, and where its target comes from.

    ``system``: no target (drivers, conductors, templates). ``node``,
    ``port``, ``allocation``: the resource named in the path; ``volume_connector``
    and ``volume_target``: the node of the record named in the path (a
    record the caller may not see the node of is missing). ``node_fields``:
    the node in the path must be visible; which rules apply depends on the
    fields the body changes, so the service asks them (``services.node_patch``). ``list``: the
    ``<resource>:list_all`` rule, else ``<resource>:list`` limited to the
    caller's project; ``node_list``: the same, of a node in the path the
    caller must see (404 otherwise). ``body``: the target is in the request body, so the
    route checks ``rule`` itself once it has parsed it.
    """

    rule: str
    kind: GuardKind
    also: tuple[str, ...] = ()
    missing_status: int = 404
    """What a node that does not exist answers (Ironic answers some sub-resources'
    reads of a missing node 400, ``GET /v1/nodes/{node}/allocation`` among them)."""
    """Rules that grant the same access (``delete:self_owned_node`` beside ``delete``)."""

    async def __call__(self, request: Request) -> None:
        if self.kind == "system":
            require(request, self.rule)
        elif self.kind == "list":
            request.state.project_scope = list_scope(request, self.rule)
        elif self.kind == "node" and self._granted_whatever_the_node(request):
            return  # the owner cannot change the answer: no read (node_access reads if asked)
        elif self.kind in _PATH_PARAMS:
            ident = request.path_params[_PATH_PARAMS[self.kind]]
            await read_only(services(request), self._check_resource, request, ident)

    def _granted_whatever_the_node(self, request: Request) -> bool:
        policy, caller = policy_of(request), identity_of(request)
        keys = ("node.owner", "node.lessee")
        return policy.allows_any_target("baremetal:node:get", caller, keys) and any(
            policy.allows_any_target(rule, caller, keys) for rule in (self.rule, *self.also)
        )

    def _check_resource(self, request: Request, ident: str) -> None:
        with services(request).db.snapshot(single_statement=True) as connection:
            self._check_in(request, connection, ident)

    def _check_in(self, request: Request, connection: Connection, ident: str) -> None:
        version = request_version(request)
        if self.kind in ("node", "node_fields", "node_list"):
            self._check_node(request, connection, ident, version)
        elif self.kind == "allocation":
            target = allocation_target(_allocation_owner(connection, ident))
            if not allows(request, "baremetal:allocation:get", target):
                raise lookup.allocation_not_found(ident)
            require(request, self.rule, target)
        elif self.kind.startswith("runbook"):
            self._check_runbook(request, connection, ident)
        elif self.kind == "rollout":
            # A project's rollout is concealed from the other projects, as its nodes are.
            target = rollout_target(rollouts.owner_of(connection, ident))
            if not allows(request, "metalforge:rollout:get", target):
                raise rollouts.not_found_error(ident)
            require(request, self.rule, target)
        else:
            # A record of a node (port, port group, volume record): its node's owner and
            # lessee decide, and a record whose node the caller may not see is missing.
            access, missing = self._record_access(connection, ident, version)
            if not allows(request, "baremetal:node:get", access.target):
                raise missing
            require(request, self.rule, access.target)
            request.state.node_access = access

    def _check_runbook(self, request: Request, connection: Connection, ident: str) -> None:
        """Runbooks are never concealed (Ironic answers 403): a missing one is 404. Anyone
        reads a public runbook; a patch's rules depend on its fields (the service asks)."""
        owner, public = runbooks.owner_of(connection, ident)
        if self.kind == "runbook_fields":
            return
        if allows(request, self.rule, runbook_target(owner)):
            return
        if not (self.kind == "runbook_or_public" and public):
            raise denied(self.rule)

    def _check_node(
        self, request: Request, connection: Connection, ident: str, version: Version
    ) -> None:
        try:
            access = _read_node_access(connection, ident, version)
        except RequestError as exc:
            if exc.status == 404 and self.missing_status != 404:
                raise RequestError(self.missing_status, exc.message) from None
            raise
        if not allows(request, "baremetal:node:get", access.target):
            raise lookup.node_not_found(ident)
        if self.kind == "node" and not any(
            allows(request, rule, access.target) for rule in (self.rule, *self.also)
        ):
            raise denied(self.rule)
        request.state.node_access = access
        if self.kind == "node_list":
            request.state.project_scope = list_scope(request, self.rule)

    def _record_access(
        self, connection: Connection, ident: str, version: Version
    ) -> tuple[NodeAccess, RequestError]:
        """The record's node access, and what answers when the caller may not see it."""
        if self.kind == "port":
            return _read_port_access(connection, ident, version), lookup.port_not_found(ident)
        if self.kind == "portgroup":
            return _read_portgroup_access(connection, ident), lookup.portgroup_not_found(ident)
        kind = _VOLUME_KINDS[self.kind]
        return _read_volume_access(connection, kind, ident), volume.not_found_error(kind, ident)


_PATH_PARAMS = {
    "node": "node_ident",
    "node_fields": "node_ident",
    "node_list": "node_ident",
    "port": "port_ident",
    "portgroup": "portgroup_ident",
    "volume_connector": "connector_uuid",
    "volume_target": "target_uuid",
    "allocation": "allocation_ident",
    "runbook": "runbook_ident",
    "runbook_or_public": "runbook_ident",
    "runbook_fields": "runbook_ident",
    "rollout": "rollout_ident",
}
_VOLUME_KINDS = {"volume_connector": volume.CONNECTORS, "volume_target": volume.TARGETS}


def guard(
    rule: str, kind: GuardKind = "system", *, also: tuple[str, ...] = (), missing_status: int = 404
) -> Any:
    """The dependency a route declares: ``dependencies=[guard("baremetal:node:get", "node")]``."""
    return Depends(Guard(rule, kind, also, missing_status))


def list_scope(request: Request, list_all_rule: str) -> str | None:
    """None to list everything, or the project a listing is limited to (owner or lessee).

    ``list_all_rule`` is ``baremetal:<resource>:list_all``; a caller without it
    needs ``baremetal:<resource>:list`` and a project.
    """
    if allows(request, list_all_rule):
        return None
    caller = identity_of(request)
    list_rule = list_all_rule.removesuffix("_all")
    if caller.project_id is None:
        raise denied(list_all_rule)
    require(request, list_rule)
    return caller.project_id


def project_scope(request: Request) -> str | None:
    """The project a list guard limited this request to (none: unlimited)."""
    scope: str | None = getattr(request.state, "project_scope", None)
    return scope


def node_access(request: Request) -> NodeAccess:
    """The owner and lessee of the route's node (found by its guard, or read now)."""
    access: NodeAccess | None = getattr(request.state, "node_access", None)
    if access is None:
        ident = request.path_params["node_ident"]
        with services(request).db.snapshot(single_statement=True) as connection:
            access = _read_node_access(connection, ident, request_version(request))
        request.state.node_access = access
    return access


def _read_node_access(connection: Connection, ident: str, version: Version) -> NodeAccess:
    row = lookup.find_node_row(connection, ident, version, ("owner", "lessee"))
    return NodeAccess(row.owner, row.lessee)


def _read_port_access(connection: Connection, ident: str, version: Version) -> NodeAccess:
    """The owner and lessee of the port's node (none for a port without one)."""
    query = (
        select(Node.owner, Node.lessee)
        .select_from(Port)
        .outerjoin(Node, Port.node_id == Node.id)
        .where(lookup.port_where(ident, version))
    )
    row = connection.execute(query).first()
    if row is None:
        raise lookup.port_not_found(ident)
    return NodeAccess(row.owner, row.lessee)


@lookup.json_suffix_fallback
def _read_portgroup_access(connection: Connection, ident: str) -> NodeAccess:
    """The owner and lessee of the port group's node."""
    query = (
        select(Node.owner, Node.lessee)
        .select_from(Portgroup)
        .join(Node, Portgroup.node_id == Node.id)
        .where(lookup.portgroup_where(ident))
    )
    row = connection.execute(query).first()
    if row is None:
        raise lookup.portgroup_not_found(ident)
    return NodeAccess(row.owner, row.lessee)


def _read_volume_access(connection: Connection, kind: volume.Kind, ident: str) -> NodeAccess:
    """The owner and lessee of the volume record's node (400 for an ident that is no UUID)."""
    model = kind.model
    query = (
        select(Node.owner, Node.lessee)
        .select_from(model)
        .join(Node, model.node_id == Node.id)
        .where(model.uuid == volume.check_ident(kind, ident))
    )
    row = connection.execute(query).first()
    if row is None:
        raise volume.not_found_error(kind, ident)
    return NodeAccess(row.owner, row.lessee)


@lookup.json_suffix_fallback
def _allocation_owner(connection: Connection, ident: str) -> str | None:
    query = select(Allocation.owner).where(lookup.allocation_where(ident))
    row = connection.execute(query).first()
    if row is None:
        raise lookup.allocation_not_found(ident)
    owner: str | None = row.owner
    return owner


def node_disclosure(request: Request) -> Callable[[str | None, str | None], NodeDisclosure]:
    """What the caller may see of a node, from its owner and lessee (Ironic's field rules).

    A caller with ``baremetal:node:get:filter_threshold`` (a system reader)
    sees every field; anyone else loses each field whose
    ``baremetal:node:get:<field>`` rule it fails for that node. Secrets
    follow ``show_password`` and ``show_instance_secrets`` for everyone.
    Answers are kept per (owner, lessee), so a page of a thousand nodes of a
    few projects asks the policy a few times.
    """
    threshold = allows(request, "baremetal:node:get:filter_threshold")
    known: dict[tuple[str | None, str | None], NodeDisclosure] = {}

    def disclose(owner: str | None, lessee: str | None) -> NodeDisclosure:
        found = known.get((owner, lessee))
        if found is None:
            target = node_target(owner, lessee)
            hidden = frozenset(
                name
                for name in REDACTED
                if not threshold and not allows(request, f"baremetal:node:get:{name}", target)
            )
            found = known[(owner, lessee)] = NodeDisclosure(
                passwords=allows(request, "show_password", target),
                instance_secrets=allows(request, "show_instance_secrets", target),
                hidden=hidden,
            )
        return found

    return disclose


def visible_node(request: Request, session: Session, ident: str, version: Version) -> Node | None:
    """The node named ``ident`` if it exists and the caller may see it (``node:get``).

    For a node named in a body or a filter, where a hidden node must read as
    a missing one.
    """
    node = lookup.find_node_or_none(session, ident, version)
    if node is None:
        return None
    if not allows(request, "baremetal:node:get", node_target(node.owner, node.lessee)):
        return None
    return node
