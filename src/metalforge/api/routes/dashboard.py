"""``/dashboard/``: the operator's web page, served by the API itself.

The page is static (HTML, a style sheet and a few JavaScript modules: nothing to
build) and holds no data: everything it shows it reads from ``/v1`` with the
credentials the operator types in, so the files are served without
authentication and every figure stays behind the API's own policy.
``states.json`` gives the page what it would otherwise copy from the server: the
verbs each provision state accepts, from the one state table, and the node fields
that hold a flow's running step, from the node table.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.staticfiles import NotModifiedResponse, PathLike, StaticFiles
from starlette.types import Scope

from metalforge import states
from metalforge.db.models import STEP_COLUMNS

PREFIX = "/dashboard"
STATIC_DIR = Path(str(files("metalforge.dashboard") / "static"))

router = APIRouter(include_in_schema=False)

_PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    # The page runs only its own script and style, and is never framed by another site
    # (the meta tag in the page says the same, but cannot forbid framing).
    "Content-Security-Policy": "default-src 'self'; base-uri 'none'; form-action 'self'; "
    "object-src 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def is_dashboard_path(path: str) -> bool:
    """The page's own files: public, they hold no data."""
    return path == PREFIX or path.startswith(PREFIX + "/")


@router.get(PREFIX)
def dashboard_redirect() -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/", status_code=308)


@router.get(f"{PREFIX}/")
def dashboard_page() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=_PAGE_HEADERS)


@router.get(f"{PREFIX}/states.json")
def dashboard_states() -> dict[str, Any]:
    """What the page's action buttons and step column read from the server.

    ``verbs`` are the canonical verbs a caller may request (``states.VERBS``, in its
    order) and ``verb_aliases`` their newer spellings; ``verbs_by_state`` the verbs
    each provision state accepts; ``step_fields`` the node fields that hold the step a
    flow is running (``clean_step``...).
    """
    verbs = set(states.VERBS)
    return {
        "states": sorted(states.STATES),
        "verbs": list(states.VERBS),
        "verb_aliases": dict(states.VERB_ALIASES),
        "verbs_by_state": {
            state: [event for event in states.allowed_events(state) if event in verbs]
            for state in sorted(states.STATES)
        },
        "step_fields": step_fields(),
    }


def step_fields() -> list[str]:
    """The node's running-step fields, in the table's order: its JSON ``<kind>_step`` columns.

    Read from the node table (one column per step kind) rather than from the step
    kinds themselves, which the API may not import (``db.flow_progress``).
    """
    return list(STEP_COLUMNS)


# Served with a type the browser may run as a module (it refuses any other for
# ``<script type="module">``), whatever the host's own MIME table says.
_MEDIA_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
}


class DashboardFiles(StaticFiles):
    """The page's files with a fixed content type per suffix, revalidated on each load.

    ``no-cache`` (the browser asks again, and an unchanged file costs a 304) keeps the
    modules of one release together: a new entry module never runs beside an older,
    cached module it imports names from.
    """

    def file_response(
        self,
        full_path: PathLike,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = FileResponse(
            full_path,
            status_code=status_code,
            stat_result=stat_result,
            media_type=_MEDIA_TYPES.get(Path(full_path).suffix),
            headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
        )
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response


def static_files() -> StaticFiles:
    """The page's modules, style sheet and images, under ``/dashboard/static/``."""
    return DashboardFiles(directory=STATIC_DIR)
