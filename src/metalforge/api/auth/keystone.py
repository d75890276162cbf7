"""Keystone tokens, validated by keystonemiddleware's ``auth_token``, as Ironic does.

``auth_token`` is a WSGI filter; metalforge's API is ASGI. Only the request's
headers matter to it, so each request's token is handed to the filter in a
minimal WSGI environment and the identity headers it adds (``X-Roles``,
``X-Project-Id``, ``OpenStack-System-Scope``...) are read back. The filter
keeps its token cache and its connection to Keystone across requests. When
it refuses a request its answer's status is read and metalforge answers in
Ironic's error format: 401 for a token Keystone does not accept, 503 when
Keystone cannot be reached (a token that cannot be checked is not a bad
token, and clients retry a 503).

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

from metalforge.api.auth.identity import Identity

_WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class KeystoneUnavailable(Exception):
    """Keystone could not be asked whether the token is good."""


class KeystoneVerifier:
    """Turns an ``X-Auth-Token`` into a ``Identity`` (or none when Keystone refuses it)."""

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
        _move_auth_plugin_options(local, conf, auth_token.list_opts())
        local.update(delay_auth_decision="false", oslo_config_config=conf)
        self._seen = threading.local()
        self._filter: _WsgiApp = auth_token.AuthProtocol(self._capture, local)
        self.www_authenticate_uri = str(
            options.get("www_authenticate_uri") or options.get("auth_url")
        )

    def _capture(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        self._seen.environ = environ
        start_response("204 No Content", [])
        return []

    def verify(self, token: str) -> Identity | None:
        """The caller the token stands for; blocks on Keystone at a cache miss.

        Raises ``KeystoneUnavailable`` when Keystone cannot be reached.
        """
        environ = _environ(token)
        self._seen.environ = None
        statuses: list[str] = []
        list(self._filter(environ, lambda status, *_args: statuses.append(status)))
        seen: dict[str, Any] | None = self._seen.environ
        if seen is None:
            if statuses and statuses[0].startswith("503"):
                raise KeystoneUnavailable("The Keystone service is temporarily unavailable.")
            return None
        return _caller(seen)


def _environ(token: str) -> dict[str, Any]:
    """The least WSGI environment keystonemiddleware needs to check ``token``."""
    return {
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


def _caller(seen: dict[str, Any]) -> Identity | None:
    """Who keystonemiddleware's headers say the caller is; ``None`` for no usable scope."""
    if seen.get("HTTP_X_IDENTITY_STATUS", "Confirmed") != "Confirmed":
        return None
    roles = frozenset(r.strip() for r in seen.get("HTTP_X_ROLES", "").split(",") if r.strip())
    system = seen.get("HTTP_OPENSTACK_SYSTEM_SCOPE")
    project = seen.get("HTTP_X_PROJECT_ID") or None
    domain = None if project or system else seen.get("HTTP_X_DOMAIN_ID") or None
    if not (project or system or domain):
        return None  # an unscoped token carries no roles to act with
    return Identity(
        user=seen.get("HTTP_X_USER_NAME") or seen.get("HTTP_X_USER_ID") or "unknown",
        user_id=seen.get("HTTP_X_USER_ID"),
        roles=roles,
        project_id=project,
        domain_id=domain,
    )


def _move_auth_plugin_options(
    local: dict[str, Any], conf: cfg.ConfigOpts, middleware_opts: Iterable[tuple[str, Any]]
) -> None:
    """Hand the auth plugin's options to ``conf``, where keystonemiddleware reads them.

    ``auth_url``, ``username``, ``password``, ``project_name``... belong to the
    keystoneauth plugin ``auth_type`` names, not to keystonemiddleware. Passed
    with the filter's own options they work, but each is logged at every start
    as "not known to keystonemiddleware", a warning about a correct setting.
    In the ``[keystone_authtoken]`` group (or the ``auth_section`` one) of the
    private oslo.config object they are read as from Ironic's configuration
    file. Names neither knows stay where they are, and are warned about.
    """
    from keystoneauth1 import exceptions as ksa_exceptions
    from keystoneauth1 import loading as ksa_loading

    plugin = local.get("auth_type") or local.get("auth_plugin")
    if not plugin:
        return
    try:
        plugin_opts = ksa_loading.get_auth_plugin_conf_options(plugin)
    except ksa_exceptions.NoMatchingPlugin as exc:
        raise ValueError(f"keystone_authtoken: auth_type {plugin!r}: {exc}") from exc
    group = local.get("auth_section") or "keystone_authtoken"
    conf.register_opts(plugin_opts, group=group)
    known_to_middleware = {
        name.replace("-", "_")
        for _group, opts in middleware_opts
        for opt in opts
        for name in (opt.dest, *(d.name for d in opt.deprecated_opts if d.name))
    }
    for opt in plugin_opts:
        # Deprecated names first: the current name wins when both are given.
        names = [d.name for d in opt.deprecated_opts if d.name] + [opt.name, opt.dest]
        for name in dict.fromkeys(n.replace("-", "_") for n in names):
            if name in local and name not in known_to_middleware:
                conf.set_override(opt.dest, local.pop(name), group=group)


def _option_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
