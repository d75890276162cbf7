"""Value rules shared by several resources (trait names)."""

from __future__ import annotations

import functools
import re

import os_traits

from metalforge.api.errors import bad_request

_CUSTOM = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


@functools.cache
def standard_traits() -> frozenset[str]:
    """Every standard trait name os-traits knows."""
    return frozenset(os_traits.get_traits())


def is_valid_trait(name: str) -> bool:
    return 0 < len(name) <= 255 and (bool(_CUSTOM.match(name)) or name in standard_traits())


def check_trait(name: str) -> str:
    if not is_valid_trait(name):
        raise bad_request(
            f"Invalid trait {name!r}: a trait must be a standard trait (see os-traits) or "
            "match ^CUSTOM_[A-Z0-9_]+$ and be at most 255 characters long"
        )
    return name
