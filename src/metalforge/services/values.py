"""Value rules shared by several resources (trait names, resource classes, booleans).

Here rather than in the API because service functions check the values they
are handed: any caller, not only the HTTP API, gets the same 400 for a value
no node could ever match.
"""

from __future__ import annotations

import functools
import re

import os_traits

from metalforge.errors import bad_request

_CUSTOM = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
_TRUE = {"1", "t", "true", "on", "y", "yes"}
_FALSE = {"0", "f", "false", "off", "n", "no"}


def parse_bool(name: str, value: str) -> bool:
    """A boolean as clients spell it (``True``, ``false``, ``1``, ``yes``...); 400 otherwise."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise bad_request(f"Invalid value for {name}: {value!r} is not a valid boolean")


@functools.cache
def standard_traits() -> frozenset[str]:
    """Every standard trait name os-traits knows."""
    return frozenset(os_traits.get_traits())


def is_valid_trait(name: str) -> bool:
    return 0 < len(name) <= 255 and (bool(_CUSTOM.match(name)) or name in standard_traits())


def why_not_a_trait(name: str) -> str:
    """Why ``name`` is no trait, in the words Ironic's schema check uses (``does not match``,
    ``is too long``), which clients match on."""
    if len(name) > 255:
        return f"{name!r} is too long (a trait has at most 255 characters)"
    return (
        f"{name!r} does not match '^CUSTOM_[A-Z0-9_]+$' and is not a standard trait (see os-traits)"
    )


def check_trait(name: str) -> str:
    if not is_valid_trait(name):
        raise bad_request(f"Invalid trait {name!r}: {why_not_a_trait(name)}")
    return name


def check_resource_class(value: str) -> str:
    """A resource class an allocation can match: 1-80 printable characters, no outer spaces.

    Seed 004 makes an invalid one a 400 rather than an allocation that can
    only fail; an empty one would match no node and hide a client's bug.
    """
    if not value or len(value) > 80 or value != value.strip() or not value.isprintable():
        raise bad_request(
            f"Invalid resource class {value[:90]!r}: it must be 1 to 80 printable "
            "characters with no leading or trailing spaces"
        )
    return value
