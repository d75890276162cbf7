"""How a node looks on the wire, at each microversion.

``NODE_FIELDS`` (``services.node_fields``) says from which microversion each
field exists; fields newer than the request's version are left out. Secrets
are masked; the default list shows only Ironic's six fields.

What a view holds is worked out once per (version, fields, list or full)
as a ``ViewPlan``: the getter of every field and the database columns they
read. A page of a thousand nodes then costs a getter call per field, and the
routes select only the columns the plan needs (a status poll reads three).
A plan renders an ORM ``Node`` or a Core row alike.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row

from metalforge.api.links import links, sub_links
from metalforge.api.versions import Version
from metalforge.db.models import STEP_COLUMNS, Node
from metalforge.redaction import MASK, mask_document, mask_secrets
from metalforge.services.node_fields import NODE_FIELDS

LINK_FIELDS: dict[str, Version] = {
    "ports": (1, 1),
    "states": (1, 14),
    "portgroups": (1, 24),
    "volume": (1, 32),
}
"""Sub-resource link lists shown on full node views."""

SELECTABLE_FIELDS: dict[str, Version] = {**NODE_FIELDS, **LINK_FIELDS, "links": (1, 1)}

LIST_FIELDS = ("uuid", "name", "instance_uuid", "power_state", "provision_state", "maintenance")
"""What ``GET /v1/nodes`` shows without ``fields`` or ``detail`` (plus ``links``)."""


def masked_instance_info(info: dict[str, Any]) -> dict[str, Any]:
    """``instance_info`` as shown without ``show_instance_secrets``.

    Secret keys and the config drive (which may hold passwords and keys for
    the instance) are masked, and so are the credentials an image URL may
    carry (a password, a signed temporary URL's signature) in any URL.
    """
    masked: dict[str, Any] = mask_document(info)
    if masked.get("configdrive"):
        masked["configdrive"] = MASK
    return masked


REDACTED: dict[str, Any] = {
    "last_error": "** Value Redacted - Requires baremetal:node:get:last_error permission. **",
    "reservation": "** Redacted - requires baremetal:node:get:reservation permission. **",
    "driver_internal_info": {
        "content": "** Redacted - Requires baremetal:node:get:driver_internal_info permission. **"
    },
    "driver_info": {
        "content": "** Redacted - requires baremetal:node:get:driver_info permission. **"
    },
}
"""What a caller without the field's ``baremetal:node:get:<field>`` rule sees instead (Ironic's)."""


@dataclass(frozen=True)
class NodeDisclosure:
    """What one caller may see of one node: secrets, and fields hidden whole."""

    passwords: bool = False
    """``show_password``: driver_info secrets unmasked."""
    instance_secrets: bool = False
    """``show_instance_secrets``: instance_info secrets and the config drive unmasked."""
    hidden: frozenset[str] = frozenset()
    """Fields replaced by their ``REDACTED`` text."""


MASKED_ONLY = NodeDisclosure()
"""The default: secrets masked, every field shown (a system reader's view)."""


def _iso(value: Any) -> Any:
    return value.isoformat() if value is not None else None


def _none(_value: Any) -> None:
    return None


_COMPUTED: dict[str, Callable[[Any], Any]] = {
    "driver_info": mask_secrets,
    "driver_internal_info": mask_secrets,
    "instance_info": masked_instance_info,
    # A running step's arguments may hold a BMC password (a firmware update's
    # credentials, a BIOS admin password): masked as driver_info is, for every kind.
    **dict.fromkeys(STEP_COLUMNS, mask_document),
    "created_at": _iso,
    "updated_at": _iso,
    "provision_updated_at": _iso,
    "inspection_started_at": _iso,
    "inspection_finished_at": _iso,
}
"""Fields shown as a function of their column's value (``None`` for those without one)."""
_SOURCES = {"allocation_uuid": "allocation_id"}
"""Fields shown from a column of another name."""
_NODE_COLUMNS = frozenset(c.key for c in Node.__table__.columns)


def visible_fields(version: Version) -> list[str]:
    return [name for name, since in NODE_FIELDS.items() if since <= version]


@dataclass(frozen=True)
class ViewPlan:
    """The fields of one kind of node view, in order, and the columns they read.

    Rendering reads every source attribute in one ``attrgetter`` call, fixes
    up the few computed fields by position and zips the names in: a detailed
    page of a thousand nodes spends microseconds per node, not per field.
    """

    names: tuple[str, ...]
    fetch: Callable[[Any], tuple[Any, ...]]
    """Reads the source attribute of every field (``uuid`` for those without one)."""
    fetch_row: Callable[[Any], tuple[Any, ...]]
    """The same by position, from a row whose first columns are ``columns`` in order
    (a row's attributes are several times slower to read than its items)."""
    convert: tuple[tuple[int, Callable[[Any], Any]], ...]
    """(position, function of the source value) for computed fields."""
    sub_links: tuple[tuple[int, str], ...]
    conductor: tuple[int, ...]
    traits: tuple[int, ...]
    columns: tuple[str, ...]
    """Node columns the view reads (``uuid`` always, ``id`` when traits are shown)."""
    old_states: bool
    """The version predates ``available`` or ``inspect wait``: rewrite them."""
    allocation: tuple[int, ...] = ()
    """Where ``allocation_uuid`` is: read as ``allocation_id``, shown as the node's
    ``instance_uuid``, which an allocation always sets to its own UUID."""
    redactable: tuple[tuple[int, str], ...] = ()
    """(position, name) of the fields a caller's rules may hide or unmask."""
    internal_info: tuple[int, ...] = ()
    """Where ``driver_internal_info`` is: the drivers' keys and the flow's step keys."""


def _wanted(version: Version, fields: tuple[str, ...] | None, list_view: bool) -> list[str]:
    if fields is not None:
        wanted = [name for name in fields if name != "links"]
    elif list_view:
        # ``name`` is one of the six but only exists from 1.5.
        wanted = [name for name in LIST_FIELDS if NODE_FIELDS[name] <= version]
    else:
        wanted = [*visible_fields(version), *(k for k, v in LINK_FIELDS.items() if v <= version)]
    return list(dict.fromkeys(wanted))


@dataclass
class _Slots:
    """Where each kind of field sits in a view, and the columns the view reads."""

    sources: list[str] = field(default_factory=list)
    convert: list[tuple[int, Callable[[Any], Any]]] = field(default_factory=list)
    links: list[tuple[int, str]] = field(default_factory=list)
    conductor: list[int] = field(default_factory=list)
    traits: list[int] = field(default_factory=list)
    allocation: list[int] = field(default_factory=list)
    redactable: list[tuple[int, str]] = field(default_factory=list)
    internal_info: list[int] = field(default_factory=list)
    # Who may see what depends on the node's owner and lessee: always read them.
    columns: set[str] = field(default_factory=lambda: {"uuid", "owner", "lessee"})

    def place(self, index: int, name: str) -> None:
        if name in REDACTED or name == "instance_info":
            self.redactable.append((index, name))
        source = name if name in _NODE_COLUMNS else _SOURCES.get(name, "uuid")
        self.sources.append(source)
        self.columns.add(source)
        if name in LINK_FIELDS:
            self.links.append((index, name))
        elif name == "conductor":
            self.conductor.append(index)
            self.columns.update(("driver", "conductor_group"))
        elif name == "allocation_uuid":
            self.allocation.append(index)
            self.columns.add("instance_uuid")
        elif name == "traits":
            self.traits.append(index)
            self.columns.add("id")
        elif name in _COMPUTED:
            self.convert.append((index, _COMPUTED[name]))
        if name == "driver_internal_info":
            self.internal_info.append(index)
            self.columns.add("id")


def _fetchers(
    sources: list[str], ordered: tuple[str, ...]
) -> tuple[Callable[[Any], tuple[Any, ...]], Callable[[Any], tuple[Any, ...]]]:
    """Getters of the view's source values from an ORM node and from a Core row."""
    by_name = operator.attrgetter(*sources) if sources else None
    by_index = operator.itemgetter(*(ordered.index(c) for c in sources)) if sources else None

    def fetch(node: Any) -> tuple[Any, ...]:
        if by_name is None:
            return ()
        values = by_name(node)
        return values if len(sources) > 1 else (values,)

    def fetch_row(row: Any) -> tuple[Any, ...]:
        if by_index is None:
            return ()
        values = by_index(row)
        return values if len(sources) > 1 else (values,)

    return fetch, fetch_row


@functools.lru_cache(maxsize=512)
def view_plan(
    version: Version, fields: tuple[str, ...] | None = None, list_view: bool = False
) -> ViewPlan:
    """The plan of the view ``node_view`` would build with these arguments."""
    names = _wanted(version, fields, list_view)
    slots = _Slots()
    for index, name in enumerate(names):
        slots.place(index, name)
    ordered = tuple(sorted(slots.columns))
    fetch, fetch_row = _fetchers(slots.sources, ordered)
    return ViewPlan(
        names=tuple(names),
        fetch=fetch,
        fetch_row=fetch_row,
        convert=tuple(slots.convert),
        sub_links=tuple(slots.links),
        conductor=tuple(slots.conductor),
        traits=tuple(slots.traits),
        allocation=tuple(slots.allocation),
        internal_info=tuple(slots.internal_info),
        redactable=tuple(slots.redactable),
        columns=ordered,
        old_states=version < (1, 39),
    )


def _source_values(
    node: Any, plan: ViewPlan, step_keys: Callable[[Any], Mapping[str, Any]] | None
) -> list[Any]:
    """The node's own values for the view, its flow's step keys in ``driver_internal_info``."""
    values = list(plan.fetch_row(node) if isinstance(node, Row) else plan.fetch(node))
    if step_keys is not None:
        for index in plan.internal_info:
            if keys := step_keys(node):
                values[index] = {**values[index], **keys}
    return values


def render(
    node: Any,
    plan: ViewPlan,
    version: Version,
    base: str,
    *,
    conductor: Callable[[Any], str | None] | None = None,
    traits: Callable[[Any], list[str]] | None = None,
    step_keys: Callable[[Any], Mapping[str, Any]] | None = None,
    disclosure: Callable[[str | None, str | None], NodeDisclosure] | None = None,
) -> dict[str, Any]:
    """The JSON object for ``node``: an ORM ``Node``, or a row starting with ``plan.columns``.

    ``step_keys`` gives the flow's keys ``driver_internal_info`` shows
    (``clean_steps``...; see ``services.lookup.step_keys``). ``disclosure``
    tells, from the node's owner and lessee, what the caller may see;
    without it secrets are masked and every field is shown.
    """
    uuid = node.uuid
    values = _source_values(node, plan, step_keys)
    seen = disclosure(node.owner, node.lessee) if disclosure and plan.redactable else MASKED_ONLY
    for index, func in plan.convert:
        values[index] = func(values[index])
    if seen is not MASKED_ONLY:
        _disclose(values, plan, seen, node)
    for index, name in plan.sub_links:
        values[index] = sub_links(base, "nodes", uuid, name)
    for index in plan.conductor:
        values[index] = conductor(node) if conductor else None
    for index in plan.allocation:
        values[index] = node.instance_uuid if values[index] is not None else None
    for index in plan.traits:
        values[index] = traits(node) if traits else [t.trait for t in node.traits]
    body = dict(zip(plan.names, values, strict=True))
    if plan.old_states:
        spell_old_states(body, version)
    body["links"] = links(base, "nodes", uuid)
    return body


def spell_old_states(body: dict[str, Any], version: Version) -> None:
    """States as versions older than ``available`` (1.2) and ``inspect wait`` (1.39) name them."""
    state = body.get("provision_state")
    if version < (1, 2) and state == "available":
        body["provision_state"] = None
    elif state == "inspect wait":
        body["provision_state"] = "inspecting"


def _disclose(values: list[Any], plan: ViewPlan, seen: NodeDisclosure, node: Any) -> None:
    for index, name in plan.redactable:
        if name in seen.hidden:
            values[index] = REDACTED[name]
        elif name == "driver_info" and seen.passwords:
            values[index] = node.driver_info
        elif name == "instance_info" and seen.instance_secrets:
            values[index] = node.instance_info


def node_view(
    node: Node,
    version: Version,
    base: str,
    *,
    fields: Sequence[str] | None = None,
    list_view: bool = False,
    conductor: Callable[[Any], str | None] | None = None,
    step_keys: Mapping[str, Any] | None = None,
    disclosure: Callable[[str | None, str | None], NodeDisclosure] | None = None,
) -> dict[str, Any]:
    """The JSON object for ``node``: full, the short list form, or only ``fields``."""
    plan = view_plan(version, tuple(fields) if fields is not None else None, list_view)
    return render(
        node,
        plan,
        version,
        base,
        conductor=conductor,
        step_keys=(lambda _: step_keys) if step_keys else None,
        disclosure=disclosure,
    )
