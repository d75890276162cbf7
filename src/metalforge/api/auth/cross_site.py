"""Refusing requests a web page on another site could have made with the caller's credentials.

A browser sends the credentials it holds for metalforge (a cached
``http_basic`` login; anything at all to a ``noauth`` service on loopback)
with every request to it, whichever page made the request. A page on
another site can make a browser send a POST (an HTML form, a ``no-cors``
fetch; any other method needs the server's leave first, which metalforge
never gives) but no header outside the few CORS lets through, and no JSON
content type. So a POST is honoured only when it carries something such a
page cannot set: a JSON body's content type, an API version header, or a
Keystone token; and a state-changing request whose ``Origin`` names another
site is refused whatever it carries. Ironic's clients send all of these, so none of
them is refused.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import Scope

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

_PROOF_HEADERS = frozenset(
    {
        b"x-openstack-ironic-api-version",
        b"x-openstack-ironic-inspector-api-version",
        b"openstack-api-version",
        b"x-auth-token",
    }
)
"""Headers a page on another site cannot make a browser send without the server's leave."""


def _json_type(value: str) -> bool:
    media = value.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _netloc(url: str) -> str:
    parts = urlsplit(url)
    if not parts.hostname:
        return ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname.lower()}:{port}"


def refusal(scope: Scope, public_endpoint: str | None = None) -> tuple[int, str] | None:
    """Why a request must be refused as cross-site (status, message); None: it may pass."""
    method = scope.get("method", "GET")
    if method not in UNSAFE_METHODS:
        return None
    origin = host = content_type = None
    proven = False
    for name, raw in scope["headers"]:
        if name == b"origin":
            origin = raw.decode("latin-1")
        elif name == b"host":
            host = raw.decode("latin-1")
        elif name == b"content-type":
            content_type = raw.decode("latin-1")
        elif name in _PROOF_HEADERS:
            proven = True
    if origin is not None and not _same_site(origin, host, scope, public_endpoint):
        return 403, f"Cross-site request refused: origin {origin[:200]!r} is not this service."
    if method != "POST" or proven or (content_type is not None and _json_type(content_type)):
        return None
    return 415, (
        f"A {method} request must send a JSON body (Content-Type: application/json) or name "
        "the API version (X-OpenStack-Ironic-API-Version); a request that does neither could "
        "come from another site's page."
    )


def _same_site(origin: str, host: str | None, scope: Scope, public_endpoint: str | None) -> bool:
    seen = _netloc(origin)
    if not seen:
        return False  # "null" (a sandboxed page, a file) or garbage
    scheme = scope.get("scheme", "http")
    allowed = {_netloc(f"{scheme}://{host}")} if host else set()
    if public_endpoint:
        allowed.add(_netloc(public_endpoint))
    return seen in allowed
