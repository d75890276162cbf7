"""Driving a fleet of nodes through real ``metalforge api`` processes, with the stdlib."""

from __future__ import annotations

import time
import uuid as uuidlib
from collections import Counter
from pathlib import Path
from typing import Any

from metalforge_lab.http_errors import HttpError
from metalforge_lab.postgres import PostgresCluster
from tests.support.processes import http


def node(api: str, uuid: str) -> dict[str, Any]:
    found: dict[str, Any] = http("GET", f"{api}/v1/nodes/{uuid}")
    return found


def bios(api: str, uuid: str) -> dict[str, Any]:
    """The node's BIOS settings, name to value (``GET /v1/nodes/{id}/bios``)."""
    listed = http("GET", f"{api}/v1/nodes/{uuid}/bios")["bios"]
    return {s["name"]: s["value"] for s in listed}


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


def write_config(
    path: Path,
    url: str,
    *,
    log_level: str = "INFO",
    sections: dict[str, dict[str, object]] | None = None,
    **conductor: object,
) -> Path:
    """A TOML file for every process of a multi-process test: PostgreSQL and fast conductors.

    ``conductor`` overrides the quick heartbeat and polling the tests share;
    ``sections`` adds tables (``{"conductor.inspection": {"timeout": 60}}``).
    """
    settings: dict[str, object] = {
        "workers": 4,
        "heartbeat_interval": 0.5,
        "heartbeat_timeout": 3.0,
        "lease_seconds": 120.0,
        "takeover_interval": 1.0,
        "affinity_grace": 1.0,
        "poll_interval": 1.0,
        "async_poll_interval": 0.5,
        **conductor,
    }
    lines = [f'log_level = "{log_level}"', "", "[database]", f'url = "{url}"', "pool_size = 5"]
    lines += ["", "[conductor]"]
    for key, value in settings.items():
        rendered = str(value).lower() if isinstance(value, bool) else repr(value)
        lines.append(f"{key} = {rendered}")
    for name, values in (sections or {}).items():
        lines += ["", f"[{name}]"]
        for key, value in values.items():
            rendered = str(value).lower() if isinstance(value, bool) else repr(value)
            lines.append(f"{key} = {rendered}")
    path.write_text("\n".join(lines) + "\n")
    return path


def pg_database(postgres: PostgresCluster, prefix: str) -> str:
    """A fresh database on the test cluster; its URL."""
    name = f"mf_{prefix}_{uuidlib.uuid4().hex[:12]}"
    postgres.execute(f"CREATE DATABASE {name}")
    return postgres.url(name)
