"""``/dashboard/``: the operator's web page, served by the API itself.

The page is static (HTML, one script, one style sheet: nothing to build) and
holds no data: everything it shows it reads from ``/v1`` with the
credentials the operator types in, so the files are served without
authentication and every figure stays behind the API's own policy.
``states.json`` gives the page the verbs each provision state accepts, read
from the one state table rather than copied into the script.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse
from starlette.staticfiles import StaticFiles

from metalforge import states

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
    """The verbs a caller may request in each provision state (the page's action buttons)."""
    verbs = set(states.VERBS)
    return {
        "states": sorted(states.STATES),
        "verbs_by_state": {
            state: [event for event in states.allowed_events(state) if event in verbs]
            for state in sorted(states.STATES)
        },
    }


def static_files() -> StaticFiles:
    """The script, style sheet and images, under ``/dashboard/static/``."""
    return StaticFiles(directory=STATIC_DIR)
