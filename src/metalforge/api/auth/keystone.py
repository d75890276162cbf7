"""Keystone tokens, validated by keystonemiddleware's ``auth_token``, as Ironic does.

``auth_token`` is a WSGI filter; metalforge's API is ASGI. Only the request's
headers matter to it, so each request's token is handed to the filter in a
minimal WSGI environment and the identity headers it adds (``X-Roles``,
``X-Project-Id``, ``OpenStack-System-Scope``...) are read back. The filter
keeps its token cache and its connection to Keystone across requests. It is
run with ``delay_auth_decision`` so that metalforge answers the 401 itself,
in Ironic's error format.

The filter's own options live in a private oslo.config object, never the
process-wide one, so two applications in one process (tests) do not share
settings.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from oslo_config import cfg

from metalforge.api.auth.identity import Caller

_WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class KeystoneVerifier:
    """Turns an ``X-Auth-Token`` into a ``Caller`` (or none when Keystone refuses it)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        if not options.get("www_authenticate_uri") and not options.get("auth_url"):
            raise ValueError(
                "api.auth_strategy = keystone needs [keystone_authtoken] settings "
                "(www_authenticate_uri, auth_url, username, password, project_name, ...)"
            )
        # Imported here: it pulls in WebOb and its dependencies, which only
        # the keystone strategy needs.
        from keystonemiddleware import auth_token

        conf = cfg.ConfigOpts()
        conf([], project="metalforge", default_config_files=[], default_config_dirs=[])
        local: dict[str, Any] = {str(k): _option_text(v) for k, v in options.items()}
        local.update(delay_auth_decision="true", oslo_config_config=conf)
        self._seen = threading.local()
        self._filter: _WsgiApp = auth_token.AuthProtocol(self._capture, local)
        self.www_authenticate_uri = str(
            options.get("www_authenticate_uri") or options.get("auth_url")
        )

    def _capture(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        self._seen.environ = environ
        start_response("204 No Content", [])
        return []

    def verify(self, token: str) -> Caller | None:
        """The caller the token stands for; blocks on Keystone at a cache miss."""
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": "/",
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "SERVER_NAME": "metalforge",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(),
            "wsgi.errors": io.StringIO(),
            "HTTP_X_AUTH_TOKEN": token,
        }
        self._seen.environ = None
        list(self._filter(environ, lambda *_args: None))
        seen: dict[str, Any] | None = self._seen.environ
        if seen is None or seen.get("HTTP_X_IDENTITY_STATUS") != "Confirmed":
            return None
        roles = frozenset(r.strip() for r in seen.get("HTTP_X_ROLES", "").split(",") if r.strip())
        system = seen.get("HTTP_OPENSTACK_SYSTEM_SCOPE")
        project = seen.get("HTTP_X_PROJECT_ID") or None
        domain = None if project or system else seen.get("HTTP_X_DOMAIN_ID") or None
        if not (project or system or domain):
            return None  # an unscoped token carries no roles to act with
        return Caller(
            user=seen.get("HTTP_X_USER_NAME") or seen.get("HTTP_X_USER_ID") or "unknown",
            user_id=seen.get("HTTP_X_USER_ID"),
            roles=roles,
            project_id=project,
            domain_id=domain,
        )


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
