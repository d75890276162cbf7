"""What a ``firmware.update`` step is asked to do, checked before any BMC is.

``settings`` is a list of ``{"component": ..., "url": ..., "wait": ...}``:
the component (``bios`` or ``bmc``), the http(s) URL the BMC downloads the
image from, and optionally how many seconds to wait after that component's
update before the next one (a BMC that resets itself after a flash answers
nothing for a while). The updates run one after another, in the order given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from metalforge.drivers.base import StepFailed

COMPONENTS = ("bios", "bmc")
MAX_WAIT = 3600
"""The longest wait after an update, in seconds: a BMC that needs more is broken."""

UPDATE_ARGS = {
    "settings": {
        "description": (
            'Updates as a list of {"component": "bios" or "bmc", "url": "http(s) URL of the '
            'image", "wait": seconds to wait after it (optional)}, run in order.'
        ),
        "required": True,
    }
}


@dataclass(frozen=True)
class FirmwareUpdate:
    component: str
    url: str
    wait: int = 0


def _scheme(url: str) -> str | None:
    """The URL's scheme; None for a string no URL parser reads (``http://[x``)."""
    try:
        return urlsplit(url).scheme
    except ValueError:
        return None


def parse_settings(settings: Any) -> list[FirmwareUpdate]:
    """The updates ``settings`` asks for; ``StepFailed`` naming the first thing wrong."""
    if not isinstance(settings, list) or not settings:
        raise StepFailed("invalid argument settings: a non-empty list of updates is required")
    updates = []
    for item in settings:
        if not isinstance(item, dict) or not {"component", "url"} <= set(item):
            raise StepFailed(f"invalid argument settings: {item!r} needs component and url")
        unknown = sorted(set(item) - {"component", "url", "wait"})
        if unknown:
            raise StepFailed(f"invalid argument settings: unknown key(s) {', '.join(unknown)}")
        component, url, wait = item["component"], item["url"], item.get("wait", 0)
        if component not in COMPONENTS:
            raise StepFailed(
                f"invalid argument settings: component {component!r} is not one of "
                f"{', '.join(COMPONENTS)}"
            )
        if not isinstance(url, str) or _scheme(url) not in ("http", "https"):
            raise StepFailed(f"invalid argument settings: url {url!r} is not an http(s) URL")
        if not isinstance(wait, int) or isinstance(wait, bool) or not 0 <= wait <= MAX_WAIT:
            raise StepFailed(
                f"invalid argument settings: wait {wait!r} is not 0 to {MAX_WAIT} seconds"
            )
        updates.append(FirmwareUpdate(component, url, wait))
    return updates


CHECKED_UPDATE_ARGS = {"settings": {**UPDATE_ARGS["settings"], "check": parse_settings}}
"""``UPDATE_ARGS`` with the settings checked when the step is requested (a 400)."""
