"""Driving a fleet of nodes through real ``metalforge api`` processes, with the stdlib."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from tests.support.processes import HttpError, http


def node(api: str, uuid: str) -> dict[str, Any]:
    found: dict[str, Any] = http("GET", f"{api}/v1/nodes/{uuid}")
    return found


def history(api: str, uuid: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = http("GET", f"{api}/v1/nodes/{uuid}/history?detail=true")[
        "history"
    ]
    return events


def step_counts(events: list[dict[str, Any]], kind: str, word: str) -> Counter[str]:
    """How often each ``kind`` step (``clean``/``deploy``) logged ``word`` (started/finished)."""
    counts: Counter[str] = Counter()
    for event in events:
        if event["event_type"] != f"{kind}_step":
            continue
        name, _, rest = event["event"].partition(" ")
        if rest.startswith(word):
            counts[name] += 1
    return counts


def put(
    api: str, path: str, body: Any, expect: tuple[int, ...] = (202,), timeout: float = 30.0
) -> None:
    """A PUT, retried while a conductor briefly holds the node (409) or an API restarts."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            http("PUT", f"{api}{path}", body, expect=expect)
            return
        except HttpError as exc:
            if exc.status != 409 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def provision(api: str, uuid: str, target: str) -> None:
    put(api, f"/v1/nodes/{uuid}/states/provision", {"target": target})
