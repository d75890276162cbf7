"""The inspector API application, served on its own port (``inspector.port``, 5050).

The same services, authentication and policy as the Ironic API; its own
versions, error shape and public paths (version discovery and the
ramdisk's ``/v1/continue``).
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from metalforge.api.auth.middleware import AuthMiddleware, build_authenticator
from metalforge.api.guards import RequestGuardMiddleware
from metalforge.api.inspector import errors, routes, rules
from metalforge.api.inspector.versions import InspectorVersionMiddleware
from metalforge.api.wiring import ApiServices

PUBLIC_PATHS = frozenset({"/", "/v1", "/v1/", "/v1/continue"})


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS


def create_inspector_app(services: ApiServices) -> FastAPI:
    app = FastAPI(title="metalforge inspector API", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.services = services
    errors.install(app)
    app.include_router(routes.router)
    app.include_router(rules.router)
    api = services.settings.api
    app.add_middleware(
        AuthMiddleware,
        authenticator=build_authenticator(api, services.settings.keystone_authtoken),
        is_public=is_public,
        render_error=lambda _status, message: errors.error_body(message),
    )
    app.add_middleware(
        RequestGuardMiddleware,
        max_body_size=api.max_request_body_size,
        max_agent_body_size=api.max_agent_request_body_size,
        max_report_size=api.max_inspection_report_size,
        body_timeout=api.body_timeout,
        report_paths=frozenset({"/v1/continue"}),
    )
    app.add_middleware(InspectorVersionMiddleware)
    return app


class InspectorSocketDispatcher:
    """One server, two APIs: requests on the inspector's socket go to the inspector app.

    Anything else goes to the Ironic API (which keeps its own rule for the
    agents' socket), so the inspector's port never serves Ironic's routes.
    """

    def __init__(self, api: ASGIApp, inspector: ASGIApp, port: int) -> None:
        self.api = api
        self.inspector = inspector
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        on_inspector = bool(server) and server[1] == self.port  # type: ignore[index]
        target = self.inspector if on_inspector and scope["type"] != "lifespan" else self.api
        await target(scope, receive, send)
