"""What the ramdisk agent calls: ``GET /v1/lookup`` and ``POST /v1/heartbeat/{node}``.

ironic-python-agent finds its node by the MAC addresses it sees, receives its
token once, and then heartbeats with the URL of its own API. Neither route
needs the operator's credentials: the token proves the agent is the one the
conductor booted, and lookup only answers for nodes that are booting a
ramdisk right now (Ironic's ``restrict_lookup``).

What they do is in ``services.agent``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from metalforge.api.links import links
from metalforge.api.node_view import masked_instance_info
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import Node
from metalforge.errors import bad_request, not_found
from metalforge.redaction import mask_secrets
from metalforge.services import agent
from metalforge.services.bodies import Body

router = APIRouter(tags=["ramdisk agent"])


MAX_LOOKUP_ADDRESSES = 256
"""MACs one lookup may name: far more NICs than a server has, far fewer than SQL's limits."""


def _normalise_macs(raw: str) -> list[str]:
    macs = [part.strip().lower().replace("-", ":") for part in raw.split(",") if part.strip()]
    if len(macs) > MAX_LOOKUP_ADDRESSES:
        raise bad_request(
            f"Too many addresses: {len(macs)}; a lookup may name at most {MAX_LOOKUP_ADDRESSES}"
        )
    # Longer than any spelling of a MAC: it cannot match a port, and needs no query.
    return [mac for mac in macs if len(mac) <= 64]


@router.get("/v1/lookup", summary="The agent finds its node by MAC address or UUID")
def lookup_node(
    request: Request, addresses: str | None = None, node_uuid: str | None = None
) -> Any:
    version = request_version(request)
    if version < (1, 22):
        raise not_found("The resource could not be found.")
    if not addresses and not node_uuid:
        raise bad_request("At least one of 'addresses' and 'node_uuid' parameters is required")
    macs = _normalise_macs(addresses or "")
    found = agent.look_up(
        services(request), version, macs, node_uuid, hand_token=version >= (1, 62)
    )
    return JSONResponse(lookup_body(request, found.node, found.token, version))


def lookup_body(request: Request, node: Node, token: str | None, version: Version) -> Any:
    svc = services(request)
    config: dict[str, Any] = {
        "heartbeat_timeout": svc.settings.conductor.agent_heartbeat_timeout,
        "metrics": {"backend": "noop"},
        "metrics_statsd": {},
        "agent_token_required": True,
        "disable_deep_image_inspection": False,
        "permitted_image_formats": ["raw", "qcow2", "iso"],
        "agent_md5_checksum_enable": False,
    }
    if version >= (1, 62):
        config["agent_token"] = token if token is not None else "******"
    instance_info = masked_instance_info(dict(node.instance_info))
    return {
        "node": {
            "uuid": node.uuid,
            "properties": node.properties,
            "instance_info": instance_info,
            "driver_internal_info": mask_secrets(dict(node.driver_internal_info)),
            "links": links(base_url(request), "nodes", node.uuid),
        },
        "config": config,
    }


class HeartbeatBody(Body):
    """What IPA sends; lengths bounded by the columns that keep them (else a 400, not a 500),
    text storable (no NUL: PostgreSQL refuses it)."""

    callback_url: str | None = Field(default=None, max_length=255)
    agent_token: str | None = Field(default=None, max_length=128)
    agent_version: str | None = Field(default=None, max_length=64)
    agent_verify_ca: str | None = Field(default=None, max_length=65536)
    agent_status: str | None = Field(default=None, max_length=16)
    agent_status_message: str | None = Field(default=None, max_length=65536)


_FIELD_VERSIONS: dict[str, Version] = {
    "agent_version": (1, 36),
    "agent_verify_ca": (1, 68),
    "agent_status": (1, 72),
    "agent_status_message": (1, 72),
}


def _check_heartbeat(body: HeartbeatBody, version: Version) -> tuple[str, str]:
    for name, since in _FIELD_VERSIONS.items():
        if getattr(body, name) is not None and version < since:
            raise bad_request(f"Field {name} is not accepted by this API version.")
    if not body.callback_url:
        raise bad_request("callback_url is required.")
    parts = urlsplit(body.callback_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad_request(f"callback_url {body.callback_url} is not an http(s) URL.")
    if body.agent_status is not None and body.agent_status not in ("start", "end", "error"):
        raise bad_request(
            f"Unknown agent_status {body.agent_status}; expected start, end or error."
        )
    if not body.agent_token:
        raise bad_request("Agent token is required for heartbeat processing.")
    return body.callback_url, body.agent_token


class NamedHeartbeatBody(HeartbeatBody):
    """A heartbeat that names its node in the body (``POST /v1/heartbeat``), as Ironic takes too."""

    node_ident: str = Field(min_length=1, max_length=255)


@router.post(
    "/v1/heartbeat",
    status_code=202,
    summary="The agent reports that it is alive, naming its node in the body",
)
def heartbeat_named(request: Request, body: NamedHeartbeatBody) -> Response:
    beat = HeartbeatBody.model_validate(body.model_dump(exclude={"node_ident"}))
    return heartbeat(body.node_ident, request, beat)


@router.post(
    "/v1/heartbeat/{node_ident}",
    status_code=202,
    summary="The agent reports that it is alive and where its API listens",
)
def heartbeat(node_ident: str, request: Request, body: HeartbeatBody) -> Response:
    version = request_version(request)
    if version < (1, 22):
        raise not_found("The resource could not be found.")
    callback_url, token = _check_heartbeat(body, version)
    beat = agent.Heartbeat(
        callback_url=callback_url,
        agent_version=body.agent_version,
        verify_ca=body.agent_verify_ca,
        status=body.agent_status,
        status_message=body.agent_status_message,
    )
    agent.heartbeat(services(request), node_ident, version, token, beat)
    return Response(status_code=202)
