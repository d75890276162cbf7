"""The FastAPI application: routers, version middleware, Ironic error format."""

from __future__ import annotations

from fastapi import FastAPI

from metalforge.api import errors
from metalforge.api.agent_endpoint import AgentEndpointFilter, is_agent_path, operator_addresses
from metalforge.api.auth.middleware import AuthMiddleware, build_authenticator
from metalforge.api.guards import RequestGuardMiddleware
from metalforge.api.outbound import OutboundCalls
from metalforge.api.request_metrics import RequestMetricsMiddleware
from metalforge.api.routes import (
    agent,
    allocations,
    chassis,
    conductors,
    dashboard,
    deploy_templates,
    drivers,
    events,
    firmware_baselines,
    inspection,
    inspection_rules,
    metrics,
    netboot,
    node_bios,
    node_cleaning,
    node_deploying,
    node_firmware,
    node_history,
    node_management,
    node_progress,
    node_settings,
    node_states,
    node_traits,
    node_vifs,
    node_vmedia,
    nodes,
    portgroups,
    ports,
    rollouts,
    root,
    runbooks,
    shards,
    vendor_passthru,
    volume,
)
from metalforge.api.versions import VersionMiddleware
from metalforge.api.wiring import ApiServices

RESOURCE_ROUTERS = (
    nodes.router,
    node_states.router,
    node_cleaning.router,
    node_deploying.router,
    node_traits.router,
    node_history.router,
    node_progress.router,
    inspection.router,
    node_management.router,
    node_settings.router,
    node_bios.router,
    node_firmware.router,
    node_vmedia.router,
    node_vifs.router,
    ports.router,
    portgroups.router,
    chassis.router,
    shards.router,
    volume.router,
    conductors.router,
    drivers.router,
    vendor_passthru.router,
    deploy_templates.router,
    runbooks.router,
    inspection_rules.router,
    firmware_baselines.router,
    rollouts.router,
    allocations.router,
    events.router,
)

OPERATOR_ROOT_ROUTERS = (metrics.router,)
"""Guarded operator routes served at the root only (``/metrics``, where Prometheus looks)."""


def _is_public(path: str) -> bool:
    """Served without credentials: version discovery, the agents' calls, the dashboard's files."""
    return is_agent_path(path) or dashboard.is_dashboard_path(path)


def create_app(services: ApiServices) -> FastAPI:
    """Build the API around ``services`` (no globals: tests build several)."""
    app = FastAPI(
        title="metalforge",
        version="1.0",
        description="Bare-metal provisioning with an Ironic-compatible /v1 API.",
        docs_url=None,
        redoc_url=None,
        # Served by a guarded route of its own (``routes.root``), not to anybody.
        openapi_url=None,
    )
    app.state.services = services
    app.state.outbound = OutboundCalls(services.settings.api)
    errors.install(app)
    _include_routes(app)
    _add_middleware(app, services)
    return app


def _include_routes(app: FastAPI) -> None:
    app.include_router(root.router)
    app.include_router(agent.router)
    app.include_router(netboot.router, include_in_schema=False)
    app.include_router(inspection.agent_router)
    served = [("", agent.router), ("", inspection.agent_router)]
    app.state.collections = root.collections([*served, *(("/v1", r) for r in RESOURCE_ROUTERS)])
    for router in RESOURCE_ROUTERS:
        app.include_router(router, prefix="/v1")
        # Ironic also answers without the /v1 prefix (GET /nodes == GET /v1/nodes).
        app.include_router(router, include_in_schema=False)
    for router in OPERATOR_ROOT_ROUTERS:
        app.include_router(router)
    app.include_router(dashboard.router)
    app.mount(f"{dashboard.PREFIX}/static", dashboard.static_files(), name="dashboard-static")


def _add_middleware(app: FastAPI, services: ApiServices) -> None:
    """Each middleware added wraps the ones before it: the last is the outermost."""
    api = services.settings.api
    app.add_middleware(
        AuthMiddleware,
        authenticator=build_authenticator(api, services.settings.keystone_authtoken),
        is_public=_is_public,
        public_endpoint=api.public_endpoint,
    )
    app.add_middleware(
        RequestGuardMiddleware,
        max_body_size=api.max_request_body_size,
        max_agent_body_size=api.max_agent_request_body_size,
        max_report_size=api.max_inspection_report_size,
        body_timeout=api.body_timeout,
        max_provision_body_size=api.max_provision_request_body_size,
        max_json_depth=api.max_json_depth,
    )
    # Outside the guard and authentication: their refusals carry the version headers.
    app.add_middleware(VersionMiddleware)
    # Outside that: every request is timed, refused ones too.
    app.add_middleware(RequestMetricsMiddleware, tally=services.db.tally)
    if api.agent_host is not None or not api.enable_ramdisk_endpoints:
        app.add_middleware(
            AgentEndpointFilter,
            operator=operator_addresses(api.host, api.port),
            operator_serves_ramdisk=api.enable_ramdisk_endpoints,
        )
