"""``{inventory[cpu][count]}``: references in a rule's arguments, resolved on one inspection.

The syntax is Ironic's (Python's format fields): a name (``inventory``,
``plugin_data``, ``node``, and ``item`` inside a loop) followed by ``[key]``
or ``.key`` steps; ``{{`` and ``}}`` are literal braces. Resolution is ours
and reads data only: keys of objects and indexes of lists, and of the node
only the fields in ``NODE_READABLE`` (a rule naming another is stored, as
Ironic stores it, and the reference stays as written, as Ironic leaves one
it cannot format). No attribute of a Python object is ever looked up, so a
reference cannot reach the interpreter. A rendered
argument is text, as Ironic's is (``"8"``, not ``8``). A value stored under a
secret key (``bmc_password``...) renders masked, at any depth of a whole
object a reference names, and so do the credentials in the node's URLs: no
action can copy a secret into a field others may read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from metalforge.db.models import INTERFACES
from metalforge.redaction import MASK, is_secret_key, mask_document, mask_secrets

ROOTS: Final = ("inventory", "plugin_data", "node")
AUTO_DISCOVERED: Final = "auto_discovered"
LOOP_ROOT: Final = "item"
NODE_READABLE: Final = frozenset(
    {
        "uuid",
        "name",
        "driver",
        "driver_info",
        "properties",
        "extra",
        "instance_info",
        "resource_class",
        "conductor_group",
        "owner",
        "lessee",
        "description",
        "provision_state",
        "power_state",
        "boot_mode",
        "secure_boot",
        "instance_uuid",
        "instance_name",
        "maintenance",
        "automated_clean",
        "protected",
        "retired",
        "shard",
        "network_data",
        *(f"{family}_interface" for family in INTERFACES),
        AUTO_DISCOVERED,
    }
)
"""What a rule may read of its node (``driver_info`` with its secrets masked), and
``auto_discovered``: whether the node was enrolled by this inspection's report, which
Ironic's samples read as ``{node.auto_discovered}`` (and its plugin data holds)."""
MAX_RENDERED: Final = 65536
"""Characters one rendered argument may have."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class BadReference(ValueError):
    """A reference that cannot be read (its syntax, or a name no rule can read)."""


class Missing(LookupError):
    """A well-formed reference to something this inspection does not have."""


@dataclass(frozen=True)
class Field:
    """One ``{...}``: its root and its keys (an int key indexes a list)."""

    text: str
    root: str
    keys: tuple[str | int, ...]


Piece = str | Field


def has_reference(text: str) -> bool:
    return any(isinstance(piece, Field) for piece in _pieces_or_text(text))


def _pieces_or_text(text: str) -> list[Piece]:
    try:
        return parse(text)
    except BadReference:
        return [text]


def parse(text: str) -> list[Piece]:
    """``text`` as literal runs and fields."""
    pieces: list[Piece] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in "{}" and text[i : i + 2] == char * 2:
            literal.append(char)
            i += 2
            continue
        if char == "}":
            raise BadReference(f"a single '}}' in {text!r} (write '}}}}' for a brace)")
        if char == "{":
            end = text.find("}", i)
            if end < 0:
                raise BadReference(f"an unclosed '{{' in {text!r}")
            if literal:
                pieces.append("".join(literal))
                literal = []
            pieces.append(_field(text[i + 1 : end]))
            i = end + 1
            continue
        literal.append(char)
        i += 1
    if literal:
        pieces.append("".join(literal))
    return pieces


def _field(inner: str) -> Field:
    text = "{" + inner + "}"
    if any(c in inner for c in ":!{"):
        raise BadReference(f"{text}: conversions and format specifications are not supported")
    match = _NAME.match(inner)
    if match is None:
        raise BadReference(f"{text} does not start with a name")
    keys: list[str | int] = []
    rest = inner[match.end() :]
    while rest:
        if rest[0] == ".":
            step = _NAME.match(rest, 1)
            if step is None:
                raise BadReference(f"{text}: a '.' must be followed by a name")
            keys.append(step.group())
            rest = rest[step.end() :]
        elif rest[0] == "[":
            close = rest.find("]")
            if close < 0 or close == 1:
                raise BadReference(f"{text}: an empty or unclosed '['")
            key = rest[1:close]
            keys.append(int(key) if key.isdigit() else key)
            rest = rest[close + 1 :]
        else:
            raise BadReference(f"{text}: unexpected {rest[0]!r}")
    return Field(text, match.group(), tuple(keys))


def check(value: Any, *, in_loop: bool) -> None:
    """Raise ``BadReference`` for a reference in ``value`` (at any depth) no rule can read."""
    if isinstance(value, str):
        for piece in parse(value):
            if isinstance(piece, Field):
                _check_field(piece, in_loop)
    elif isinstance(value, list):
        for item in value:
            check(item, in_loop=in_loop)
    elif isinstance(value, dict):
        for key, item in value.items():
            check(key, in_loop=in_loop)
            check(item, in_loop=in_loop)


def _check_field(field: Field, in_loop: bool) -> None:
    roots = (*ROOTS, LOOP_ROOT) if in_loop else ROOTS
    if field.root not in roots:
        where = "" if in_loop or field.root != LOOP_ROOT else " (item exists only in a loop)"
        raise BadReference(
            f"{field.text} names {field.root!r}; a rule reads {', '.join(roots)}{where}"
        )


@dataclass(frozen=True)
class Scope:
    """What references resolve against on one inspection."""

    inventory: Mapping[str, Any]
    plugin_data: Mapping[str, Any]
    node: Mapping[str, Any]
    item: Any = None
    in_loop: bool = False
    data: Mapping[str, Any] | None = None
    """ironic-inspector's ``data`` (its rules' values name it), when such a rule runs."""


def resolve(field: Field, scope: Scope) -> Any:
    """The value ``field`` names (``Missing`` when this inspection does not have it)."""
    roots: dict[str, Any] = {
        "inventory": scope.inventory,
        "plugin_data": scope.plugin_data,
        "node": scope.node,
    }
    if scope.in_loop:
        roots[LOOP_ROOT] = scope.item
    if scope.data is not None:
        roots["data"] = scope.data
    if field.root not in roots:
        raise Missing(field.text)
    value = roots[field.root]
    for key in field.keys:
        if isinstance(value, Mapping):
            name = str(key)
            if name not in value:
                raise Missing(field.text)
            if is_secret_key(name) and value[name] not in (None, ""):
                return MASK
            value = value[name]
        elif isinstance(value, list) and isinstance(key, int):
            if key >= len(value):
                raise Missing(field.text)
            value = value[key]
        else:
            raise Missing(field.text)
    return _masked(field.root, value)


def _masked(root: str, value: Any) -> Any:
    """What a reference may show of ``value``: a whole object or list with every secret in
    it masked (``{node[driver_info]}`` must not print the BMC password), and of the node
    also the credentials of its URLs."""
    if isinstance(value, Mapping):
        value = dict(value)
    if root == "node":
        return mask_document(value)
    return mask_secrets(value) if isinstance(value, dict | list) else value


def render(value: Any, scope: Scope) -> Any:
    """``value`` with the references in its text (at any depth) replaced by what they name.

    A reference to what the inspection lacks leaves the text as written, as
    Ironic does (conditions on it then fail rather than match by accident).
    """
    if isinstance(value, str):
        return _render_text(value, scope)
    if isinstance(value, list):
        return [render(item, scope) for item in value]
    if isinstance(value, dict):
        return {render(key, scope): render(item, scope) for key, item in value.items()}
    return value


def render_or_none(value: Any, scope: Scope) -> Any:
    """As ``render``, but a lone reference to something missing is ``None`` (what
    ``is-empty`` and ``is-none`` ask about)."""
    if isinstance(value, str):
        pieces = _pieces_or_text(value)
        if len(pieces) == 1 and isinstance(pieces[0], Field):
            try:
                return _text(resolve(pieces[0], scope))
            except Missing:
                return None
    return render(value, scope)


def _render_text(text: str, scope: Scope) -> str:
    pieces = _pieces_or_text(text)
    out: list[str] = []
    for piece in pieces:
        if isinstance(piece, str):
            out.append(piece)
            continue
        try:
            out.append(_text(resolve(piece, scope)))
        except Missing:
            return text
    rendered = "".join(out)
    return rendered[:MAX_RENDERED]


def _text(value: Any) -> str:
    """A value as text, the way Python's format shows it (Ironic's rendering)."""
    return str(value)[:MAX_RENDERED]
