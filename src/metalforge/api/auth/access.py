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

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

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
    """One route's authorization: a policy rule, and the kind of target it is checked on
    (``TargetKind``: ``SYSTEM``, ``NODE``, ``PORT``, ``LIST``...)."""

    rule: str
    kind: TargetKind
    also: tuple[str, ...] = ()
    """Rules that grant the same access (``delete:self_owned_node`` beside ``delete``)."""
    missing_status: int = 404
    """What a node that does not exist answers (Ironic answers some sub-resources'
    reads of a missing node 400, ``GET /v1/nodes/{node}/allocation`` among them)."""

    async def __call__(self, request: Request) -> None:
        await self.kind.authorize(self, request)


class TargetKind(abc.ABC):
    """Where a guard's target comes from, and how it is checked: one frozen value per
    kind, below. A kind is a value, not a name, so a route cannot name one that does
    not exist, and one that leaves its check out cannot be made (the check is abstract)."""

    name: str
    """The kind's name, for messages and tests."""

    @abc.abstractmethod
    async def authorize(self, guard: Guard, request: Request) -> None:
        """Raise (403, or the 404 of a target the caller may not see) unless allowed."""


@dataclass(frozen=True)
class _NoTarget(TargetKind):
    """``SYSTEM``: the rule is checked with no target (drivers, conductors, templates)."""

    name: str

    async def authorize(self, guard: Guard, request: Request) -> None:
        require(request, guard.rule)


@dataclass(frozen=True)
class _Listing(TargetKind):
    """``LIST``: the ``<resource>:list_all`` rule, else ``<resource>:list`` limited to
    the caller's project (``project_scope``)."""

    name: str

    async def authorize(self, guard: Guard, request: Request) -> None:
        request.state.project_scope = list_scope(request, guard.rule)


@dataclass(frozen=True)
class _InBody(TargetKind):
    """``BODY``: the target is in the request body, so the route checks the rule itself
    once it has parsed the body (a test proves each such route refuses)."""

    name: str

    async def authorize(self, guard: Guard, request: Request) -> None:
        return None


@dataclass(frozen=True)
class _InPath(TargetKind):
    """A resource named by a path parameter, read in one snapshot to find its owner."""

    name: str
    path_param: str

    async def authorize(self, guard: Guard, request: Request) -> None:
        ident = request.path_params[self.path_param]
        await read_only(services(request), self._check, guard, request, ident)

    def _check(self, guard: Guard, request: Request, ident: str) -> None:
        with services(request).db.snapshot(single_statement=True) as connection:
            self.check_in(guard, request, connection, ident)

    @abc.abstractmethod
    def check_in(
        self, guard: Guard, request: Request, connection: Connection, ident: str
    ) -> None: ...


NodeMode = Literal["rule", "fields", "list"]


@dataclass(frozen=True)
class _Node(_InPath):
    """The node in the path, which the caller must see (404 otherwise), then by ``mode``:
    ``rule``: the guard's rule (or one of ``also``) on it (``NODE``); ``fields``: which
    rules apply depends on the fields the body changes, so the service asks them
    (``NODE_FIELDS``); ``list``: a listing of the node's records, limited as ``LIST``
    is (``NODE_LIST``)."""

    mode: NodeMode

    async def authorize(self, guard: Guard, request: Request) -> None:
        if self.mode == "rule" and _granted_whatever_the_node(guard, request):
            return  # the owner cannot change the answer: no read (node_access reads if asked)
        await super().authorize(guard, request)

    def check_in(self, guard: Guard, request: Request, connection: Connection, ident: str) -> None:
        try:
            access = _read_node_access(connection, ident, request_version(request))
        except RequestError as exc:
            if exc.status == 404 and guard.missing_status != 404:
                raise RequestError(guard.missing_status, exc.message) from None
            raise
        if not allows(request, "baremetal:node:get", access.target):
            raise lookup.node_not_found(ident)
        if self.mode == "rule" and not any(
            allows(request, rule, access.target) for rule in (guard.rule, *guard.also)
        ):
            raise denied(guard.rule)
        request.state.node_access = access
        if self.mode == "list":
            request.state.project_scope = list_scope(request, guard.rule)


def _granted_whatever_the_node(guard: Guard, request: Request) -> bool:
    policy, caller = policy_of(request), identity_of(request)
    keys = ("node.owner", "node.lessee")
    return policy.allows_any_target("baremetal:node:get", caller, keys) and any(
        policy.allows_any_target(rule, caller, keys) for rule in (guard.rule, *guard.also)
    )


@dataclass(frozen=True)
class _NodeRecord(_InPath):
    """A record of a node (port, port group, volume record): its node's owner and lessee
    decide, and a record whose node the caller may not see is missing."""

    read: Callable[[Connection, str, Version], NodeAccess]
    missing: Callable[[str], RequestError]

    def check_in(self, guard: Guard, request: Request, connection: Connection, ident: str) -> None:
        access = self.read(connection, ident, request_version(request))
        if not allows(request, "baremetal:node:get", access.target):
            raise self.missing(ident)
        require(request, guard.rule, access.target)
        request.state.node_access = access


@dataclass(frozen=True)
class _Owned(_InPath):
    """A resource with an owner of its own (an allocation, a rollout): concealed (404)
    from a caller who may not read it, as its nodes are."""

    read_rule: str
    owner_of: Callable[[Connection, str], str | None]
    target_of: Callable[[str | None], dict[str, str]]
    missing: Callable[[str], RequestError]

    def check_in(self, guard: Guard, request: Request, connection: Connection, ident: str) -> None:
        target = self.target_of(self.owner_of(connection, ident))
        if not allows(request, self.read_rule, target):
            raise self.missing(ident)
        require(request, guard.rule, target)


RunbookMode = Literal["owned", "or_public", "fields"]


@dataclass(frozen=True)
class _Runbook(_InPath):
    """Runbooks are never concealed (Ironic answers 403): a missing one is 404. By
    ``mode``: ``owned``: the rule on the runbook's owner; ``or_public``: that, or the
    runbook is public (anyone reads one); ``fields``: a patch's rules depend on its
    fields, so the service asks them."""

    mode: RunbookMode

    def check_in(self, guard: Guard, request: Request, connection: Connection, ident: str) -> None:
        owner, public = runbooks.owner_of(connection, ident)
        if self.mode == "fields" or allows(request, guard.rule, runbook_target(owner)):
            return
        if not (self.mode == "or_public" and public):
            raise denied(guard.rule)


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


# -- the kinds of target routes name ---------------------------------------------------


def _read_volume(kind: volume.Kind) -> Callable[[Connection, str, Version], NodeAccess]:
    return lambda connection, ident, _version: _read_volume_access(connection, kind, ident)


def _volume_missing(kind: volume.Kind) -> Callable[[str], RequestError]:
    return lambda ident: volume.not_found_error(kind, ident)


SYSTEM: Final = _NoTarget("system")
LIST: Final = _Listing("list")
BODY: Final = _InBody("body")
NODE: Final = _Node("node", "node_ident", "rule")
NODE_FIELDS: Final = _Node("node_fields", "node_ident", "fields")
NODE_LIST: Final = _Node("node_list", "node_ident", "list")
PORT: Final = _NodeRecord("port", "port_ident", _read_port_access, lookup.port_not_found)
PORTGROUP: Final = _NodeRecord(
    "portgroup",
    "portgroup_ident",
    lambda connection, ident, _version: _read_portgroup_access(connection, ident),
    lookup.portgroup_not_found,
)
VOLUME_CONNECTOR: Final = _NodeRecord(
    "volume_connector",
    "connector_uuid",
    _read_volume(volume.CONNECTORS),
    _volume_missing(volume.CONNECTORS),
)
VOLUME_TARGET: Final = _NodeRecord(
    "volume_target", "target_uuid", _read_volume(volume.TARGETS), _volume_missing(volume.TARGETS)
)
ALLOCATION: Final = _Owned(
    "allocation",
    "allocation_ident",
    "baremetal:allocation:get",
    _allocation_owner,
    allocation_target,
    lookup.allocation_not_found,
)
ROLLOUT: Final = _Owned(
    "rollout",
    "rollout_ident",
    "metalforge:rollout:get",
    rollouts.owner_of,
    rollout_target,
    rollouts.not_found_error,
)
RUNBOOK: Final = _Runbook("runbook", "runbook_ident", "owned")
RUNBOOK_OR_PUBLIC: Final = _Runbook("runbook_or_public", "runbook_ident", "or_public")
RUNBOOK_FIELDS: Final = _Runbook("runbook_fields", "runbook_ident", "fields")


def guard(
    rule: str,
    kind: TargetKind = SYSTEM,
    *,
    also: tuple[str, ...] = (),
    missing_status: int = 404,
) -> Any:
    """The dependency a route declares: ``dependencies=[guard("baremetal:node:get", NODE)]``."""
    return Depends(Guard(rule, kind, also, missing_status))
