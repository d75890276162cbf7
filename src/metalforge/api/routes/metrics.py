"""``GET /metrics``: the cluster's figures for Prometheus (reader role)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from metalforge.api.auth.access import guard
from metalforge.api.metrics_text import CONTENT_TYPE, render
from metalforge.api.wiring import services
from metalforge.services.metrics import cluster_figures

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    summary="The cluster's figures in Prometheus' text format",
    response_class=PlainTextResponse,
    dependencies=[guard("baremetal:metrics:get")],
)
def metrics(request: Request) -> Response:
    return Response(render(cluster_figures(services(request))), media_type=CONTENT_TYPE)
