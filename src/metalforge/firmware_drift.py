"""How far a node's firmware is from a baseline: pure rules, no database, no driver.

A firmware baseline (``services.firmware_baselines``) says which version each
component (``bios``, ``bmc``) of the machines of one vendor and model should
run. A node is *covered* by a baseline when it can report firmware at all
and, when the baseline names a vendor or a model, one of the components its
BMC reported carries that vendor and model (compared without case or
surrounding spaces). For each component of the baseline, a covered node is:

``older``
    it runs a version that sorts before the baseline's (``2.9.1`` < ``2.10.0``:
    numbers compare as numbers, see ``version_key``);
``differs``
    it runs another version that is not older (newer, or not comparable);
``unknown``
    its BMC never reported that component (never verified, or the BMC does
    not show it);

and otherwise (the same version) it is not in the report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

OLDER = "older"
DIFFERS = "differs"
UNKNOWN = "unknown"
STATUSES = (OLDER, DIFFERS, UNKNOWN)

_TOKENS = re.compile(r"\d+|[A-Za-z]+")


def version_key(version: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key for a firmware version string.

    The string is cut into runs of digits and runs of letters (dots, dashes
    and other separators only separate): digits compare as integers, letters
    without case, and a number sorts before a word in the same place.
    ``U46 2.10.0`` > ``U46 2.9.1``; ``1.2`` < ``1.2.1``.
    """
    key = []
    for token in _TOKENS.findall(version):
        if token.isdigit():
            key.append((0, int(token), ""))
        else:
            key.append((1, 0, token.lower()))
    return tuple(key)


def status(current: str | None, expected: str) -> str | None:
    """The component's place against the baseline; None when it runs ``expected``."""
    if current is None or not current.strip():
        return UNKNOWN
    if current.strip() == expected.strip():
        return None
    return OLDER if version_key(current) < version_key(expected) else DIFFERS


@dataclass(frozen=True)
class Recorded:
    """One component of a node as its BMC last reported it."""

    component: str
    version: str | None
    vendor: str | None
    model: str | None


@dataclass(frozen=True)
class Drift:
    """One component of one node that is not at the baseline."""

    component: str
    expected: str
    current: str | None
    status: str


def _same(wanted: str | None, seen: str | None) -> bool:
    if wanted is None:
        return True
    return seen is not None and seen.strip().lower() == wanted.strip().lower()


def covers(vendor: str | None, model: str | None, recorded: Iterable[Recorded]) -> bool:
    """Whether a node with these components is one a baseline for ``vendor``/``model`` is for.

    A baseline naming neither covers every node that can report firmware,
    the ones never verified included (all their components are ``unknown``).
    """
    if vendor is None and model is None:
        return True
    return any(_same(vendor, r.vendor) and _same(model, r.model) for r in recorded)


def drift(expected: Mapping[str, str], recorded: Mapping[str, Recorded]) -> list[Drift]:
    """The components of one covered node that are not at ``expected`` (component ->
    version), in the baseline's order."""
    found = []
    for component, version in expected.items():
        seen = recorded.get(component)
        place = status(seen.version if seen else None, version)
        if place is not None:
            found.append(Drift(component, version, seen.version if seen else None, place))
    return found


def tally(reports: Sequence[Sequence[Drift]]) -> dict[tuple[str, str], int]:
    """Nodes per (component, status) over the reports of several nodes."""
    counts: dict[tuple[str, str], int] = {}
    for report in reports:
        for item in report:
            key = (item.component, item.status)
            counts[key] = counts.get(key, 0) + 1
    return counts
