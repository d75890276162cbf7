"""Authentication at the edge: every request either names its caller or is refused with 401.

Version discovery (``/``, ``/v1``) and the ramdisk agents' routes (lookup,
heartbeat) are public, as in Ironic: clients negotiate a version before they
authenticate, and agents prove themselves with the node's agent token, not
with operator credentials. Everything else needs credentials under
``http_basic`` and ``keystone``; under ``noauth`` every caller is an
administrator (the service refuses to start with ``noauth`` off loopback).
An authenticated request another site's page could have made with a
browser's credentials is refused (``cross_site``) before any route runs.

The caller is stored in the ASGI scope's ``state``, where routes read it
(``request.state.caller``) to authorize.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Protocol

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from metalforge.api.agent_endpoint import is_agent_path
from metalforge.api.auth import cross_site
from metalforge.api.auth.basic import HtpasswdVerifier, parse_basic_header
from metalforge.api.auth.identity import NOAUTH_ADMIN, Identity
from metalforge.api.auth.keystone import KeystoneUnavailable, KeystoneVerifier
from metalforge.api.auth.throttle import LoginThrottle
from metalforge.api.errors import error_body, send_json_error
from metalforge.config import ApiSettings, UserSettings

LOG = logging.getLogger(__name__)

CALLER_KEY = "caller"


class Unavailable(Exception):
    """The identity service cannot be reached: 503, the client may retry."""


class Throttled(Exception):
    """Too many failed logins from this address as this user: 429 for ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"Too many failed logins; try again in {math.ceil(seconds)} s")
        self.seconds = seconds


class Refused(Exception):
    """Credentials are missing or wrong: a 401 with ``message`` and ``challenge``."""

    def __init__(self, message: str, challenge: str) -> None:
        super().__init__(message)
        self.message = message
        self.challenge = challenge


Headers = list[tuple[bytes, bytes]]
"""The request's raw ASGI headers (names lower-case)."""


def header(headers: Headers, name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


class Authenticator(Protocol):
    """One authentication strategy: the caller a request's headers prove, or ``Refused``."""

    async def authenticate(self, headers: Headers, client: str) -> Identity:
        """``client``: the address the request came from."""
        ...


class NoAuth:
    """``noauth``: everybody is an administrator."""

    async def authenticate(self, headers: Headers, client: str) -> Identity:
        return NOAUTH_ADMIN


class HttpBasic:
    """``http_basic``: htpasswd users, with roles and project from the settings."""

    CHALLENGE = 'Basic realm="Baremetal API"'

    def __init__(
        self,
        verifier: HtpasswdVerifier,
        users: dict[str, UserSettings],
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.verifier = verifier
        self.users = users
        self.throttle = throttle or LoginThrottle(5, 60.0)

    async def authenticate(self, headers: Headers, client: str) -> Identity:
        value = header(headers, b"authorization")
        if value is None:
            raise Refused("Authorization required", self.CHALLENGE)
        parsed = parse_basic_header(value)
        if parsed is None:
            raise Refused("Malformed Authorization header", self.CHALLENGE)
        user, password = parsed
        wait = self.throttle.wait(client, user)
        if wait > 0:
            raise Throttled(wait)
        if not await run_in_threadpool(self.verifier.verify, user, password):
            LOG.warning("http_basic: refused credentials for user %r from %s", user[:64], client)
            self.throttle.failed(client, user)
            raise Refused("Incorrect username or password", self.CHALLENGE)
        self.throttle.succeeded(client, user)
        grant = self.users.get(user, UserSettings())
        return Identity(user=user, roles=frozenset(grant.roles), project_id=grant.project_id)


class Keystone:
    """``keystone``: the ``X-Auth-Token`` header, validated against Keystone."""

    def __init__(self, verifier: KeystoneVerifier) -> None:
        self.verifier = verifier
        self.challenge = f'Keystone uri="{verifier.www_authenticate_uri}"'

    async def authenticate(self, headers: Headers, client: str) -> Identity:
        token = header(headers, b"x-auth-token")
        if not token:
            raise Refused("The request you have made requires authentication.", self.challenge)
        try:
            caller = await run_in_threadpool(self.verifier.verify, token)
        except KeystoneUnavailable as exc:
            raise Unavailable(str(exc)) from exc
        if caller is None:
            raise Refused("The request you have made requires authentication.", self.challenge)
        return caller


def build_authenticator(api: ApiSettings, keystone_options: dict[str, object]) -> Authenticator:
    """The strategy ``api.auth_strategy`` names; raises ``ValueError`` if it cannot work."""
    if api.auth_strategy == "http_basic":
        verifier = HtpasswdVerifier(
            api.http_basic_auth_user_file, cache_seconds=api.http_basic_auth_cache_seconds
        )
        throttle = LoginThrottle(api.login_failures, api.login_throttle_seconds)
        return HttpBasic(verifier, api.users, throttle)
    if api.auth_strategy == "keystone":
        return Keystone(KeystoneVerifier(keystone_options))
    return NoAuth()


class AuthMiddleware:
    """Pure ASGI: authenticates every non-public request before any route runs."""

    def __init__(
        self,
        app: ASGIApp,
        authenticator: Authenticator,
        is_public: Callable[[str], bool] = is_agent_path,
        render_error: Callable[[int, str], bytes] = error_body,
        public_endpoint: str | None = None,
    ) -> None:
        self.app = app
        self.authenticator = authenticator
        self.is_public = is_public
        self.render_error = render_error
        self.public_endpoint = public_endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Served without operator credentials: version discovery and the agents' calls.
        if scope["type"] != "http" or self.is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        try:
            client = scope.get("client") or ("", 0)
            caller = await self.authenticator.authenticate(scope["headers"], str(client[0]))
        except Refused as refused:
            await send_json_error(
                send,
                401,
                self.render_error(401, refused.message),
                [(b"www-authenticate", refused.challenge.encode("latin-1"))],
            )
            return
        except Throttled as throttled:
            await send_json_error(
                send,
                429,
                self.render_error(429, str(throttled)),
                [(b"retry-after", str(math.ceil(throttled.seconds)).encode())],
            )
            return
        except Unavailable as down:
            await send_json_error(send, 503, self.render_error(503, str(down)))
            return
        cross_site_refusal = cross_site.refusal(scope, self.public_endpoint)
        if cross_site_refusal is not None:
            status, message = cross_site_refusal
            await send_json_error(send, status, self.render_error(status, message))
            return
        scope.setdefault("state", {})[CALLER_KEY] = caller
        await self.app(scope, receive, send)
