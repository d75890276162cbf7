"""What the ramdisk agent calls: ``GET /v1/lookup`` and ``POST /v1/heartbeat/{node}``.

ironic-python-agent finds its node by the MAC addresses it sees, receives its
token once, and then heartbeats with the URL of its own API. Neither route
needs the operator's credentials: the token proves the agent is the one the
conductor booted, and lookup only answers for nodes that are booting a
ramdisk right now (Ironic's ``restrict_lookup``).

The session lives in ``agent_sessions``, not on the node row, so a lookup or
heartbeat never waits for the node's reservation (see db/agent_sessions.py).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from metalforge.api.links import links
from metalforge.api.node_view import masked_instance_info
from metalforge.api.services import base_url, services
from metalforge.api.versions import Version, request_version
from metalforge.conductor.flows import catalog
from metalforge.db import agent_sessions, queue
from metalforge.db.models import Node, Port, node_from_row
from metalforge.errors import bad_request, not_found
from metalforge.redaction import mask_secrets
from metalforge.services import lookup

router = APIRouter(tags=["ramdisk agent"])


def _lookup_not_found() -> Exception:
    return not_found("Node could not be found.")


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


def _find_by_macs(session: Session, macs: list[str]) -> Node | None:
    if not macs:
        return None
    node_ids = set(session.scalars(select(Port.node_id).where(Port.address.in_(macs))))
    if len(node_ids) != 1:
        # No port, or the MACs belong to several nodes: either way not this agent's node.
        return None
    table = Node.__table__
    row = session.execute(select(table).where(table.c.id == node_ids.pop())).one_or_none()
    return None if row is None else node_from_row(dict(row._mapping))


@router.get("/v1/lookup", summary="The agent finds its node by MAC address or UUID")
def lookup_node(
    request: Request, addresses: str | None = None, node_uuid: str | None = None
) -> Any:
    version = request_version(request)
    if version < (1, 22):
        raise not_found("The resource could not be found.")
    if not addresses and not node_uuid:
        raise bad_request("At least one of 'addresses' and 'node_uuid' parameters is required")
    svc = services(request)
    macs = _normalise_macs(addresses or "")
    with svc.db.write() as session:
        if node_uuid:
            node = lookup.load_node(session, lookup.check_uuid(node_uuid, "node_uuid"), version)
        else:
            found = _find_by_macs(session, macs)
            if found is None:
                raise _lookup_not_found()
            node = found
        if node.provision_state not in catalog.LOOKUP_STATES:
            raise _lookup_not_found()
        token: str | None = None
        try:
            if version >= (1, 62):
                token = agent_sessions.issue_token(session, node.id)
            else:  # the client cannot receive the token: leave it for the agent
                agent_sessions.check_booted(session, node.id)
        except agent_sessions.NoRamdiskBooted:
            # metalforge did not boot a ramdisk on this node: no agent belongs to it.
            raise _lookup_not_found() from None
    return JSONResponse(_lookup_body(request, node, token, version))


def _lookup_body(request: Request, node: Node, token: str | None, version: Version) -> Any:
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


class HeartbeatBody(BaseModel):
    """What IPA sends; lengths bounded by the columns that keep them (else a 400, not a 500)."""

    model_config = ConfigDict(extra="forbid")

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
    svc = services(request)
    with svc.db.write() as session:
        row = lookup.find_node_row(
            session,
            node_ident,
            version,
            ("id", "uuid", "provision_state", "driver", "conductor_group"),
        )
        try:
            agent_sessions.record_heartbeat(
                session,
                row.id,
                token,
                agent_sessions.Heartbeat(
                    callback_url=callback_url,
                    agent_version=body.agent_version,
                    verify_ca=body.agent_verify_ca,
                    status=body.agent_status,
                    status_message=body.agent_status_message,
                ),
            )
        except agent_sessions.HeartbeatRefused as exc:
            raise bad_request(str(exc)) from None
        woke = row.provision_state in catalog.AGENT_WAKE_STATES
        if woke:
            owner = svc.preferred_conductor(row.uuid, row.driver, row.conductor_group)
            queue.enqueue_provision(session, row.id, preferred_owner=owner)
    if woke:
        svc.notify()
    return Response(status_code=202)
