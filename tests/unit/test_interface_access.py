"""One typed way to a driver interface.

A flow or service that uses one family's calls asks for it by its class
(``interface_of(task, PowerInterface, "switch power")``, or
``optional_interface_of`` where a no-op implementation is no error), and gets it
typed or a ``NotOffered`` naming what the node's choice cannot do. Reaching a
family by its name (``family(node, "power")``) and narrowing with ``isinstance``
is the other way that crept in beside it; this holds ``src`` to the first: a
family is named by a string only where every family is treated alike (a loop
over them, a step's recorded interface).
"""

from __future__ import annotations

import ast
from pathlib import Path

from metalforge.db.models import INTERFACES
from metalforge.drivers import catalog
from metalforge.drivers.base import Interface, NoOp

SRC = Path(__file__).resolve().parents[2] / "src" / "metalforge"


def _named_by_literal(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in ("family", "interface", "_interface"):
            continue
        if any(isinstance(arg, ast.Constant) and isinstance(arg.value, str) for arg in node.args):
            lines.append(node.lineno)
    return lines


def test_no_family_is_reached_by_a_literal_name() -> None:
    found = {
        str(path.relative_to(SRC)): lines
        for path in SRC.rglob("*.py")
        if (lines := _named_by_literal(ast.parse(path.read_text())))
    }
    assert not found, f"use interface_of / optional_interface_of with the family's class: {found}"


def test_the_check_sees_a_literal_family() -> None:
    tree = ast.parse('iface = task.ctx.drivers.family(node, "power")')
    assert _named_by_literal(tree) == [1]


def test_every_family_a_node_names_has_its_typed_base() -> None:
    """``interface_of`` reaches a family by its base class: each family in the node's
    table (``INTERFACES``) has exactly one class that declares it, below ``Interface``
    (the no-op implementations aside), except storage, which has no calls to type."""
    assert catalog.HARDWARE_TYPES  # every shipped implementation is imported
    declaring: dict[str, list[str]] = {}
    for cls in _subclasses(Interface):
        if "interface_type" in vars(cls) and not issubclass(cls, NoOp):
            declaring.setdefault(cls.interface_type, []).append(cls.__name__)
    assert sorted(declaring) == sorted(set(INTERFACES) - {"storage"})
    assert all(len(names) == 1 for names in declaring.values()), declaring


def _subclasses(cls: type[Interface]) -> set[type[Interface]]:
    found: set[type[Interface]] = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found
