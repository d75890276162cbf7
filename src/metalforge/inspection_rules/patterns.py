"""The regular expressions rules match against reports, run in linear time (RE2).

Inspection reports come from whatever booted on the provisioning network,
and a rule's pattern from any operator who may write rules. Python's ``re``
backtracks: ``(a+)+$`` against a few thousand ``a`` in a report takes
minutes, with the interpreter held. RE2 matches in time linear in the text,
whatever the pattern, so no pattern can freeze the process; what it cannot
do in linear time (backreferences, lookaround) it refuses, and a rule using
them is refused when it is written, with the reason.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the caller's message, not a log line


class PatternError(ValueError):
    """A pattern RE2 cannot compile: invalid, or needing backtracking."""


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled once (``PatternError`` with RE2's reason)."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(
            f"{reason} (patterns run in linear time: no backreferences or lookaround)"
        ) from None


def fullmatch(pattern: str, text: str) -> bool:
    return compiled(pattern).fullmatch(text) is not None


def search(pattern: str, text: str) -> bool:
    return compiled(pattern).search(text) is not None
