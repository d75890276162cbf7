"""Vendor passthru metadata: what ``@passthru`` and ``@driver_passthru`` record.

Like the step decorators (``steps.py``), these only attach a frozen
``PassthruDecl`` to the method: nothing runs at import time and nothing is
wrapped, so the method stays a plain method that tests call directly. The
API lists the declarations (``GET .../vendor_passthru/methods``) in Ironic's
shape and routes ``?method=NAME`` calls by them; the HTTP verb, whether the
call runs in the background and whether it needs the node's reservation all
come from the declaration, never from the request.

A vendor method receives its arguments as one mapping (``args``) rather than
as keyword arguments: they are whatever JSON object the caller sent, and an
unexpected key must be a 400 from the interface's validation, not a
``TypeError`` deep in a call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
"""The verbs a vendor method may accept (those Ironic's passthru endpoints route)."""

PassthruScope = Literal["node", "driver"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class PassthruDecl:
    """One vendor method as its interface declares it."""

    scope: PassthruScope
    """``node``: called on ``/v1/nodes/{node}/vendor_passthru``; ``driver``: on the driver's."""
    name: str
    """The name callers give in ``?method=`` (the Python method's name unless given)."""
    http_methods: tuple[str, ...]
    asynchronous: bool
    """Answered 202 at once and run by the node's conductor (node scope), or 200 with the
    method's return value once it has run."""
    description: str
    attach: bool
    """Ironic's flag for a return value served as the response's raw body."""
    exclusive_lock: bool = True
    """Node scope: runs under the node's reservation (Ironic's ``require_exclusive_lock``)."""
    attribute: str = ""
    """The Python method's name on the interface (filled in when collected)."""

    def metadata(self) -> dict[str, Any]:
        """The entry ``GET .../vendor_passthru/methods`` shows, as Ironic lists it."""
        shown: dict[str, Any] = {
            "http_methods": list(self.http_methods),
            "async": self.asynchronous,
            "description": self.description,
            "attach": self.attach,
        }
        if self.scope == "node":
            shown["require_exclusive_lock"] = self.exclusive_lock
        return shown


_ATTR = "_metalforge_passthru"


def _verbs(http_methods: Collection[str]) -> tuple[str, ...]:
    verbs = tuple(dict.fromkeys(verb.upper() for verb in http_methods))
    unknown = [verb for verb in verbs if verb not in HTTP_METHODS]
    if not verbs or unknown:
        raise ValueError(f"a vendor method needs HTTP methods among {HTTP_METHODS}: {unknown}")
    return verbs


def _record(decl: PassthruDecl) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        existing: tuple[PassthruDecl, ...] = getattr(func, _ATTR, ())
        setattr(func, _ATTR, (*existing, decl))
        return func

    return decorate


def passthru(
    http_methods: Collection[str],
    *,
    method: str | None = None,
    asynchronous: bool = True,
    description: str = "",
    attach: bool = False,
    exclusive_lock: bool = True,
) -> Callable[[F], F]:
    """Declare an interface method as a node vendor method.

    The method is called as ``method(task, http_method, args)``.
    """
    return _record(
        PassthruDecl(
            "node", method or "", _verbs(http_methods), asynchronous, description, attach,
            exclusive_lock,
        )
    )  # fmt: skip


def driver_passthru(
    http_methods: Collection[str],
    *,
    method: str | None = None,
    asynchronous: bool = True,
    description: str = "",
    attach: bool = False,
) -> Callable[[F], F]:
    """Declare an interface method as a driver vendor method (no node: ``method(http_method,
    args)``). It runs in the API process, so it must be short."""
    verbs = _verbs(http_methods)
    return _record(PassthruDecl("driver", method or "", verbs, asynchronous, description, attach))


def declared_passthru(cls: type, scope: PassthruScope) -> dict[str, PassthruDecl]:
    """The vendor methods of ``scope`` that ``cls`` declares, by the name callers use."""
    return dict(_declared(cls, scope))


@functools.cache
def _declared(cls: type, scope: PassthruScope) -> tuple[tuple[str, PassthruDecl], ...]:
    found: dict[str, PassthruDecl] = {}
    for attribute in sorted(dir(cls)):
        member = getattr(cls, attribute, None)
        for decl in getattr(member, _ATTR, ()):
            if decl.scope != scope:
                continue
            name = decl.name or attribute
            if name in found:
                raise ValueError(f"{cls.__name__} declares vendor method {name!r} twice")
            found[name] = replace(decl, name=name, attribute=attribute)
    return tuple(sorted(found.items()))
