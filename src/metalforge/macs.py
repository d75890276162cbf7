"""The one form a MAC address is stored in: lower case, colon separated.

The API normalises what clients send to it (``services.ports``); everything
that reads stored or reported addresses (inspection reports, the PXE
filter's file names) checks against this form before using one.
"""

from __future__ import annotations

import re

_STORED = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")


def is_stored_mac(text: str) -> bool:
    """Whether ``text`` is exactly a MAC in the stored form (no trailing newline)."""
    return _STORED.fullmatch(text) is not None
