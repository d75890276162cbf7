"""Every route x every persona: the status the policy defaults say, and nothing else.

The expected outcome of each request is worked out from the route's own guard
and the registered policy defaults (``Policy().allows``), never written by
hand, so changing a default or a guard changes the expectation with it. The
table of requests must name every route the application serves: a new route
without a guard, or without a request here, fails ``test_every_route_*``.

Allowed means the policy let the request through: any status but 401/403
and the 404 that conceals a resource. Refused means exactly that 403 or 404.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute

from metalforge.api.agent_endpoint import is_agent_path
from metalforge.api.app import OPERATOR_ROOT_ROUTERS, RESOURCE_ROUTERS
from metalforge.api.auth import access
from metalforge.api.auth.access import NODE, Guard
from metalforge.api.auth.identity import Identity
from metalforge.api.auth.policy import (
    Policy,
    allocation_target,
    node_target,
    rollout_target,
    runbook_target,
)
from metalforge.api.schemas import PatchOperation
from metalforge.services import runbooks
from metalforge.services.node_patch import rules_for
from tests.support.auth import ADMIN, OWNER_ADMIN, PERSONAS, Persona, basic_auth_settings
from tests.support.snapshots import Snapshot, restore, snapshot
from tests.support.stack import Stack, start_stack

OWNER, LESSEE = "p-owner", "p-lessee"
POLICY = Policy()
_macs = itertools.count(1)


@dataclass
class World:
    """The resources a request names, made by the admin."""

    node: str
    port: str
    allocation: str
    template: str
    event: str
    chassis: str
    portgroup: str
    connector: str
    target: str
    runbook: str
    rule: str
    baseline: str
    rollout: str


def _ok(response: Any, *codes: int) -> Any:
    assert response.status_code in codes, response.text
    return response.json() if response.content else None


def make_world(stack: Stack) -> World:
    client, h = stack.client, ADMIN.headers
    node = _ok(
        client.post(
            "/v1/nodes",
            json={"driver": "fake-hardware", "owner": OWNER, "lessee": LESSEE},
            headers=h,
        ),
        201,
    )["uuid"]
    client.put(f"/v1/nodes/{node}/traits/CUSTOM_GOLD", headers=h)
    mac = f"52:54:00:00:{next(_macs) // 256:02x}:{next(_macs) % 256:02x}"
    port = _ok(client.post("/v1/ports", json={"address": mac, "node_uuid": node}, headers=h), 201)[
        "uuid"
    ]
    allocation = _ok(
        client.post(
            "/v1/allocations", json={"resource_class": "none-such", "owner": OWNER}, headers=h
        ),
        201,
    )["uuid"]
    template = _ok(
        client.post(
            "/v1/deploy_templates",
            json={
                "name": f"CUSTOM_T{uuid.uuid4().hex[:8].upper()}",
                "steps": [{"interface": "deploy", "step": "deploy", "args": {}, "priority": 10}],
            },
            headers=h,
        ),
        201,
    )["uuid"]
    events = _ok(client.get(f"/v1/nodes/{node}/history", headers=h), 200)["history"]
    chassis = _ok(client.post("/v1/chassis", json={}, headers=h), 201)["uuid"]
    connector = _ok(
        client.post("/v1/volume/connectors", json=_connector_body(node), headers=h), 201
    )["uuid"]
    target = _ok(client.post("/v1/volume/targets", json=_target_body(node, 0), headers=h), 201)[
        "uuid"
    ]
    portgroup = _ok(client.post("/v1/portgroups", json={"node_uuid": node}, headers=h), 201)["uuid"]
    runbook = _ok(client.post("/v1/runbooks", json=_runbook_body(OWNER), headers=h), 201)["uuid"]
    rule = _ok(client.post("/v1/inspection_rules", json=_rule_body(), headers=h), 201)["uuid"]
    baseline = _ok(client.post("/v1/firmware_baselines", json=_baseline_body(), headers=h), 201)[
        "uuid"
    ]
    # The owner's project rolls out over its node: the rollout is that project's.
    rollout = _ok(
        client.post("/v1/rollouts", json=_rollout_body(node), headers=OWNER_ADMIN.headers), 201
    )["uuid"]
    return World(
        node,
        port,
        allocation,
        template,
        events[0]["uuid"],
        chassis,
        portgroup,
        connector,
        target,
        runbook,
        rule,
        baseline,
        rollout,
    )


def _runbook_body(owner: str | None = None) -> dict[str, Any]:
    step = {"interface": "raid", "step": "delete_configuration", "args": {}, "order": 1}
    body = {"name": f"CUSTOM_R{uuid.uuid4().hex[:8].upper()}", "steps": [step]}
    return {**body, "owner": owner} if owner else body


def _rule_body() -> dict[str, Any]:
    return {"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_SEEN"}}]}


def _baseline_body() -> dict[str, Any]:
    component = {"component": "bios", "version": "2.1", "url": "http://images.example/bios"}
    return {"name": f"b-{uuid.uuid4().hex[:8]}", "components": [component]}


def _rollout_body(node: str) -> dict[str, Any]:
    return {"action": {"verb": "manage"}, "selector": {"nodes": [node]}}


def _connector_body(node: str) -> dict[str, Any]:
    return {"node_uuid": node, "type": "iqn", "connector_id": f"iqn.{uuid.uuid4().hex}"}


def _target_body(node: str, boot_index: int) -> dict[str, Any]:
    return {"node_uuid": node, "volume_type": "iscsi", "volume_id": "v", "boot_index": boot_index}


Request = Callable[[World], tuple[str, Any]]
"""A route's request for one world: (url, JSON body or None)."""


def _patch_extra() -> list[dict[str, Any]]:
    return [{"op": "add", "path": "/extra/note", "value": "x"}]


REQUESTS: dict[tuple[str, str], Request] = {
    ("GET", "/v1/rollouts"): lambda w: ("/v1/rollouts", None),
    ("GET", "/v1/rollouts/{rollout_ident}"): lambda w: (f"/v1/rollouts/{w.rollout}", None),
    ("POST", "/v1/rollouts"): lambda w: ("/v1/rollouts", _rollout_body(w.node)),
    ("POST", "/v1/rollouts/{rollout_ident}/pause"): lambda w: (
        f"/v1/rollouts/{w.rollout}/pause",
        None,
    ),
    ("POST", "/v1/rollouts/{rollout_ident}/resume"): lambda w: (
        f"/v1/rollouts/{w.rollout}/resume",
        None,
    ),
    ("POST", "/v1/rollouts/{rollout_ident}/abort"): lambda w: (
        f"/v1/rollouts/{w.rollout}/abort",
        None,
    ),
    ("GET", "/v1/firmware_baselines"): lambda w: ("/v1/firmware_baselines", None),
    ("GET", "/v1/firmware_baselines/{baseline_ident}"): lambda w: (
        f"/v1/firmware_baselines/{w.baseline}",
        None,
    ),
    ("GET", "/v1/firmware_baselines/{baseline_ident}/drift"): lambda w: (
        f"/v1/firmware_baselines/{w.baseline}/drift",
        None,
    ),
    ("POST", "/v1/firmware_baselines"): lambda w: ("/v1/firmware_baselines", _baseline_body()),
    ("DELETE", "/v1/firmware_baselines/{baseline_ident}"): lambda w: (
        f"/v1/firmware_baselines/{w.baseline}",
        None,
    ),
    ("GET", "/metrics"): lambda w: ("/metrics", None),
    ("GET", "/v1/nodes"): lambda w: ("/v1/nodes", None),
    ("GET", "/v1/nodes/detail"): lambda w: ("/v1/nodes/detail", None),
    ("GET", "/v1/nodes/{node_ident}"): lambda w: (f"/v1/nodes/{w.node}", None),
    ("POST", "/v1/nodes"): lambda w: ("/v1/nodes", {"driver": "fake-hardware"}),
    ("PATCH", "/v1/nodes/{node_ident}"): lambda w: (f"/v1/nodes/{w.node}", _patch_extra()),
    ("DELETE", "/v1/nodes/{node_ident}"): lambda w: (f"/v1/nodes/{w.node}", None),
    ("GET", "/v1/nodes/{node_ident}/states"): lambda w: (f"/v1/nodes/{w.node}/states", None),
    ("PUT", "/v1/nodes/{node_ident}/states/provision"): lambda w: (
        f"/v1/nodes/{w.node}/states/provision",
        {"target": "manage"},
    ),
    ("PUT", "/v1/nodes/{node_ident}/states/power"): lambda w: (
        f"/v1/nodes/{w.node}/states/power",
        {"target": "power on"},
    ),
    ("PUT", "/v1/nodes/{node_ident}/states/raid"): lambda w: (
        f"/v1/nodes/{w.node}/states/raid",
        {},
    ),
    ("PUT", "/v1/nodes/{node_ident}/maintenance"): lambda w: (
        f"/v1/nodes/{w.node}/maintenance",
        {"reason": "table"},
    ),
    ("DELETE", "/v1/nodes/{node_ident}/maintenance"): lambda w: (
        f"/v1/nodes/{w.node}/maintenance",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/validate"): lambda w: (f"/v1/nodes/{w.node}/validate", None),
    ("GET", "/v1/nodes/{node_ident}/cleaning/steps"): lambda w: (
        f"/v1/nodes/{w.node}/cleaning/steps",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/deploying/steps"): lambda w: (
        f"/v1/nodes/{w.node}/deploying/steps",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/traits"): lambda w: (f"/v1/nodes/{w.node}/traits", None),
    ("PUT", "/v1/nodes/{node_ident}/traits"): lambda w: (
        f"/v1/nodes/{w.node}/traits",
        {"traits": ["CUSTOM_SILVER"]},
    ),
    ("PUT", "/v1/nodes/{node_ident}/traits/{trait}"): lambda w: (
        f"/v1/nodes/{w.node}/traits/CUSTOM_SILVER",
        None,
    ),
    ("DELETE", "/v1/nodes/{node_ident}/traits"): lambda w: (f"/v1/nodes/{w.node}/traits", None),
    ("DELETE", "/v1/nodes/{node_ident}/traits/{trait}"): lambda w: (
        f"/v1/nodes/{w.node}/traits/CUSTOM_GOLD",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/history"): lambda w: (f"/v1/nodes/{w.node}/history", None),
    ("GET", "/v1/nodes/{node_ident}/progress"): lambda w: (f"/v1/nodes/{w.node}/progress", None),
    ("GET", "/v1/events"): lambda w: ("/v1/events", None),
    ("GET", "/v1/nodes/{node_ident}/inventory"): lambda w: (f"/v1/nodes/{w.node}/inventory", None),
    ("GET", "/v1/nodes/{node_ident}/history/{event_uuid}"): lambda w: (
        f"/v1/nodes/{w.node}/history/{w.event}",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/management/boot_device"): lambda w: (
        f"/v1/nodes/{w.node}/management/boot_device",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/management/boot_device/supported"): lambda w: (
        f"/v1/nodes/{w.node}/management/boot_device/supported",
        None,
    ),
    ("PUT", "/v1/nodes/{node_ident}/management/boot_device"): lambda w: (
        f"/v1/nodes/{w.node}/management/boot_device",
        {"boot_device": "pxe"},
    ),
    ("PUT", "/v1/nodes/{node_ident}/management/inject_nmi"): lambda w: (
        f"/v1/nodes/{w.node}/management/inject_nmi",
        {},
    ),
    ("GET", "/v1/nodes/{node_ident}/management/indicators"): lambda w: (
        f"/v1/nodes/{w.node}/management/indicators",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/management/indicators/{indicator}"): lambda w: (
        f"/v1/nodes/{w.node}/management/indicators/led@system",
        None,
    ),
    ("PUT", "/v1/nodes/{node_ident}/management/indicators/{indicator}"): lambda w: (
        f"/v1/nodes/{w.node}/management/indicators/led@system",
        {"state": "BLINKING"},
    ),
    ("GET", "/v1/nodes/{node_ident}/states/console"): lambda w: (
        f"/v1/nodes/{w.node}/states/console",
        None,
    ),
    ("GET", "/v1/nodes/states/console/{node_ident}"): lambda w: (
        f"/v1/nodes/states/console/{w.node}",
        None,
    ),
    ("PUT", "/v1/nodes/{node_ident}/states/console"): lambda w: (
        f"/v1/nodes/{w.node}/states/console",
        {"enabled": True},
    ),
    ("PUT", "/v1/nodes/{node_ident}/states/boot_mode"): lambda w: (
        f"/v1/nodes/{w.node}/states/boot_mode",
        {"target": "uefi"},
    ),
    ("PUT", "/v1/nodes/{node_ident}/states/secure_boot"): lambda w: (
        f"/v1/nodes/{w.node}/states/secure_boot",
        {"target": True},
    ),
    ("GET", "/v1/ports"): lambda w: ("/v1/ports", None),
    ("GET", "/v1/ports/detail"): lambda w: ("/v1/ports/detail", None),
    ("GET", "/v1/ports/{port_ident}"): lambda w: (f"/v1/ports/{w.port}", None),
    ("POST", "/v1/ports"): lambda w: (
        "/v1/ports",
        {
            "address": f"52:54:00:01:{next(_macs) // 256 % 256:02x}:{next(_macs) % 256:02x}",
            "node_uuid": w.node,
        },
    ),
    ("PATCH", "/v1/ports/{port_ident}"): lambda w: (f"/v1/ports/{w.port}", _patch_extra()),
    ("DELETE", "/v1/ports/{port_ident}"): lambda w: (f"/v1/ports/{w.port}", None),
    ("GET", "/v1/conductors"): lambda w: ("/v1/conductors", None),
    ("GET", "/v1/conductors/{hostname}"): lambda w: ("/v1/conductors/test-conductor", None),
    ("GET", "/v1/drivers"): lambda w: ("/v1/drivers", None),
    ("GET", "/v1/drivers/{name}"): lambda w: ("/v1/drivers/fake-hardware", None),
    ("GET", "/v1/drivers/{name}/properties"): lambda w: (
        "/v1/drivers/fake-hardware/properties",
        None,
    ),
    ("GET", "/v1/drivers/{name}/raid/logical_disk_properties"): lambda w: (
        "/v1/drivers/fake-hardware/raid/logical_disk_properties",
        None,
    ),
    ("GET", "/v1/drivers/{name}/vendor_passthru/methods"): lambda w: (
        "/v1/drivers/fake-hardware/vendor_passthru/methods",
        None,
    ),
    **{
        (verb, "/v1/drivers/{name}/vendor_passthru"): lambda w: (
            "/v1/drivers/fake-hardware/vendor_passthru?method=none_such",
            {},
        )
        for verb in ("GET", "POST", "PUT", "PATCH", "DELETE")
    },
    ("GET", "/v1/nodes/{node_ident}/vendor_passthru/methods"): lambda w: (
        f"/v1/nodes/{w.node}/vendor_passthru/methods",
        None,
    ),
    **{
        (verb, "/v1/nodes/{node_ident}/vendor_passthru"): lambda w: (
            f"/v1/nodes/{w.node}/vendor_passthru?method=third_method_sync",
            {"bar": "meow"},
        )
        for verb in ("GET", "POST", "PUT", "PATCH", "DELETE")
    },
    ("GET", "/v1/deploy_templates"): lambda w: ("/v1/deploy_templates", None),
    ("GET", "/v1/deploy_templates/{template_ident}"): lambda w: (
        f"/v1/deploy_templates/{w.template}",
        None,
    ),
    ("POST", "/v1/deploy_templates"): lambda w: (
        "/v1/deploy_templates",
        {
            "name": f"CUSTOM_N{uuid.uuid4().hex[:8].upper()}",
            "steps": [{"interface": "deploy", "step": "deploy", "args": {}, "priority": 10}],
        },
    ),
    ("PATCH", "/v1/deploy_templates/{template_ident}"): lambda w: (
        f"/v1/deploy_templates/{w.template}",
        _patch_extra(),
    ),
    ("DELETE", "/v1/deploy_templates/{template_ident}"): lambda w: (
        f"/v1/deploy_templates/{w.template}",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/bios"): lambda w: (f"/v1/nodes/{w.node}/bios", None),
    ("GET", "/v1/nodes/{node_ident}/bios/{setting_name}"): lambda w: (
        f"/v1/nodes/{w.node}/bios/VMX",
        None,
    ),
    ("POST", "/v1/nodes/{node_ident}/vmedia"): lambda w: (
        f"/v1/nodes/{w.node}/vmedia",
        {
            "device_type": "cdrom",
            "image_url": "http://images.example.com/x.iso",
            "image_download_source": "http",
        },
    ),
    ("GET", "/v1/nodes/{node_ident}/vmedia"): lambda w: (f"/v1/nodes/{w.node}/vmedia", None),
    ("DELETE", "/v1/nodes/{node_ident}/vmedia"): lambda w: (f"/v1/nodes/{w.node}/vmedia", None),
    ("GET", "/v1/nodes/{node_ident}/firmware"): lambda w: (f"/v1/nodes/{w.node}/firmware", None),
    ("GET", "/v1/nodes/{node_ident}/servicing/steps"): lambda w: (
        f"/v1/nodes/{w.node}/servicing/steps",
        None,
    ),
    ("GET", "/v1/inspection_rules"): lambda w: ("/v1/inspection_rules", None),
    ("GET", "/v1/inspection_rules/{rule_uuid}"): lambda w: (
        f"/v1/inspection_rules/{w.rule}",
        None,
    ),
    ("POST", "/v1/inspection_rules"): lambda w: ("/v1/inspection_rules", _rule_body()),
    ("PATCH", "/v1/inspection_rules/{rule_uuid}"): lambda w: (
        f"/v1/inspection_rules/{w.rule}",
        [{"op": "replace", "path": "/priority", "value": 5}],
    ),
    ("DELETE", "/v1/inspection_rules/{rule_uuid}"): lambda w: (
        f"/v1/inspection_rules/{w.rule}",
        None,
    ),
    ("DELETE", "/v1/inspection_rules"): lambda w: ("/v1/inspection_rules", None),
    ("GET", "/v1/runbooks"): lambda w: ("/v1/runbooks", None),
    ("GET", "/v1/runbooks/{runbook_ident}"): lambda w: (f"/v1/runbooks/{w.runbook}", None),
    ("POST", "/v1/runbooks"): lambda w: ("/v1/runbooks", _runbook_body()),
    ("PATCH", "/v1/runbooks/{runbook_ident}"): lambda w: (
        f"/v1/runbooks/{w.runbook}",
        _patch_extra(),
    ),
    ("DELETE", "/v1/runbooks/{runbook_ident}"): lambda w: (f"/v1/runbooks/{w.runbook}", None),
    ("GET", "/v1/runbooks/{runbook_ident}/traits"): lambda w: (
        f"/v1/runbooks/{w.runbook}/traits",
        None,
    ),
    ("PUT", "/v1/runbooks/{runbook_ident}/traits"): lambda w: (
        f"/v1/runbooks/{w.runbook}/traits",
        {"traits": ["CUSTOM_A"]},
    ),
    ("PUT", "/v1/runbooks/{runbook_ident}/traits/{trait}"): lambda w: (
        f"/v1/runbooks/{w.runbook}/traits/CUSTOM_B",
        None,
    ),
    ("DELETE", "/v1/runbooks/{runbook_ident}/traits"): lambda w: (
        f"/v1/runbooks/{w.runbook}/traits",
        None,
    ),
    ("DELETE", "/v1/runbooks/{runbook_ident}/traits/{trait}"): lambda w: (
        f"/v1/runbooks/{w.runbook}/traits/CUSTOM_B",
        None,
    ),
    ("GET", "/v1/allocations"): lambda w: ("/v1/allocations", None),
    ("GET", "/v1/allocations/{allocation_ident}"): lambda w: (
        f"/v1/allocations/{w.allocation}",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/allocation"): lambda w: (
        f"/v1/nodes/{w.node}/allocation",
        None,
    ),
    ("POST", "/v1/allocations"): lambda w: ("/v1/allocations", {"resource_class": "none-such"}),
    ("PATCH", "/v1/allocations/{allocation_ident}"): lambda w: (
        f"/v1/allocations/{w.allocation}",
        _patch_extra(),
    ),
    ("DELETE", "/v1/allocations/{allocation_ident}"): lambda w: (
        f"/v1/allocations/{w.allocation}",
        None,
    ),
    ("DELETE", "/v1/nodes/{node_ident}/allocation"): lambda w: (
        f"/v1/nodes/{w.node}/allocation",
        None,
    ),
    ("GET", "/v1/portgroups"): lambda w: ("/v1/portgroups", None),
    ("GET", "/v1/portgroups/detail"): lambda w: ("/v1/portgroups/detail", None),
    ("GET", "/v1/nodes/{node_ident}/portgroups"): lambda w: (
        f"/v1/nodes/{w.node}/portgroups",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/portgroups/detail"): lambda w: (
        f"/v1/nodes/{w.node}/portgroups/detail",
        None,
    ),
    ("GET", "/v1/portgroups/{portgroup_ident}"): lambda w: (f"/v1/portgroups/{w.portgroup}", None),
    ("POST", "/v1/portgroups"): lambda w: ("/v1/portgroups", {"node_uuid": w.node}),
    ("PATCH", "/v1/portgroups/{portgroup_ident}"): lambda w: (
        f"/v1/portgroups/{w.portgroup}",
        _patch_extra(),
    ),
    ("DELETE", "/v1/portgroups/{portgroup_ident}"): lambda w: (
        f"/v1/portgroups/{w.portgroup}",
        None,
    ),
    ("GET", "/v1/nodes/{node_ident}/ports"): lambda w: (f"/v1/nodes/{w.node}/ports", None),
    ("GET", "/v1/nodes/{node_ident}/ports/detail"): lambda w: (
        f"/v1/nodes/{w.node}/ports/detail",
        None,
    ),
    ("GET", "/v1/portgroups/{portgroup_ident}/ports"): lambda w: (
        f"/v1/portgroups/{w.portgroup}/ports",
        None,
    ),
    ("GET", "/v1/portgroups/{portgroup_ident}/ports/detail"): lambda w: (
        f"/v1/portgroups/{w.portgroup}/ports/detail",
        None,
    ),
    ("GET", "/v1/shards"): lambda w: ("/v1/shards", None),
    ("GET", "/v1/nodes/{node_ident}/children"): lambda w: (f"/v1/nodes/{w.node}/children", None),
    ("GET", "/v1/nodes/{node_ident}/vifs"): lambda w: (f"/v1/nodes/{w.node}/vifs", None),
    ("POST", "/v1/nodes/{node_ident}/vifs"): lambda w: (
        f"/v1/nodes/{w.node}/vifs",
        {"id": str(uuid.uuid4())},
    ),
    ("DELETE", "/v1/nodes/{node_ident}/vifs/{vif_id}"): lambda w: (
        f"/v1/nodes/{w.node}/vifs/{uuid.uuid4()}",
        None,
    ),
    ("GET", "/v1/chassis"): lambda w: ("/v1/chassis", None),
    ("GET", "/v1/chassis/detail"): lambda w: ("/v1/chassis/detail", None),
    ("GET", "/v1/chassis/{chassis_uuid}"): lambda w: (f"/v1/chassis/{w.chassis}", None),
    ("POST", "/v1/chassis"): lambda w: ("/v1/chassis", {"description": "table"}),
    ("PATCH", "/v1/chassis/{chassis_uuid}"): lambda w: (f"/v1/chassis/{w.chassis}", _patch_extra()),
    ("DELETE", "/v1/chassis/{chassis_uuid}"): lambda w: (f"/v1/chassis/{w.chassis}", None),
    ("GET", "/v1/chassis/{chassis_uuid}/nodes"): lambda w: (f"/v1/chassis/{w.chassis}/nodes", None),
    ("GET", "/v1/chassis/{chassis_uuid}/nodes/detail"): lambda w: (
        f"/v1/chassis/{w.chassis}/nodes/detail",
        None,
    ),
    ("GET", "/v1/volume"): lambda w: ("/v1/volume", None),
    ("GET", "/v1/nodes/{node_ident}/volume"): lambda w: (f"/v1/nodes/{w.node}/volume", None),
    ("GET", "/v1/volume/connectors"): lambda w: ("/v1/volume/connectors", None),
    ("GET", "/v1/volume/connectors/detail"): lambda w: ("/v1/volume/connectors/detail", None),
    ("GET", "/v1/nodes/{node_ident}/volume/connectors"): lambda w: (
        f"/v1/nodes/{w.node}/volume/connectors",
        None,
    ),
    ("GET", "/v1/volume/connectors/{connector_uuid}"): lambda w: (
        f"/v1/volume/connectors/{w.connector}",
        None,
    ),
    ("POST", "/v1/volume/connectors"): lambda w: (
        "/v1/volume/connectors",
        _connector_body(w.node),
    ),
    ("PATCH", "/v1/volume/connectors/{connector_uuid}"): lambda w: (
        f"/v1/volume/connectors/{w.connector}",
        _patch_extra(),
    ),
    ("DELETE", "/v1/volume/connectors/{connector_uuid}"): lambda w: (
        f"/v1/volume/connectors/{w.connector}",
        None,
    ),
    ("GET", "/v1/volume/targets"): lambda w: ("/v1/volume/targets", None),
    ("GET", "/v1/volume/targets/detail"): lambda w: ("/v1/volume/targets/detail", None),
    ("GET", "/v1/nodes/{node_ident}/volume/targets"): lambda w: (
        f"/v1/nodes/{w.node}/volume/targets",
        None,
    ),
    ("GET", "/v1/volume/targets/{target_uuid}"): lambda w: (
        f"/v1/volume/targets/{w.target}",
        None,
    ),
    ("POST", "/v1/volume/targets"): lambda w: ("/v1/volume/targets", _target_body(w.node, 1)),
    ("PATCH", "/v1/volume/targets/{target_uuid}"): lambda w: (
        f"/v1/volume/targets/{w.target}",
        _patch_extra(),
    ),
    ("DELETE", "/v1/volume/targets/{target_uuid}"): lambda w: (
        f"/v1/volume/targets/{w.target}",
        None,
    ),
}


IRONIC_RULES: dict[tuple[str, str], str] = {
    ("GET", "/v1/nodes"): "baremetal:node:list_all",
    ("GET", "/v1/nodes/detail"): "baremetal:node:list_all",
    ("GET", "/v1/nodes/{node_ident}"): "baremetal:node:get",
    ("POST", "/v1/nodes"): "baremetal:node:create",
    ("PATCH", "/v1/nodes/{node_ident}"): "baremetal:node:update",
    ("DELETE", "/v1/nodes/{node_ident}"): "baremetal:node:delete",
    ("GET", "/v1/nodes/{node_ident}/states"): "baremetal:node:get_states",
    ("PUT", "/v1/nodes/{node_ident}/states/provision"): "baremetal:node:set_provision_state",
    ("PUT", "/v1/nodes/{node_ident}/states/power"): "baremetal:node:set_power_state",
    ("PUT", "/v1/nodes/{node_ident}/states/raid"): "baremetal:node:set_raid_state",
    ("PUT", "/v1/nodes/{node_ident}/maintenance"): "baremetal:node:set_maintenance",
    ("DELETE", "/v1/nodes/{node_ident}/maintenance"): "baremetal:node:clear_maintenance",
    ("GET", "/v1/nodes/{node_ident}/validate"): "baremetal:node:validate",
    ("GET", "/v1/nodes/{node_ident}/cleaning/steps"): "baremetal:node:get",
    ("GET", "/v1/nodes/{node_ident}/deploying/steps"): "baremetal:node:get",
    ("GET", "/v1/nodes/{node_ident}/traits"): "baremetal:node:traits:list",
    ("PUT", "/v1/nodes/{node_ident}/traits"): "baremetal:node:traits:set",
    ("PUT", "/v1/nodes/{node_ident}/traits/{trait}"): "baremetal:node:traits:set",
    ("DELETE", "/v1/nodes/{node_ident}/traits"): "baremetal:node:traits:delete",
    ("DELETE", "/v1/nodes/{node_ident}/traits/{trait}"): "baremetal:node:traits:delete",
    ("GET", "/v1/nodes/{node_ident}/history"): "baremetal:node:history:get",
    ("GET", "/v1/nodes/{node_ident}/inventory"): "baremetal:node:inventory:get",
    ("GET", "/v1/nodes/{node_ident}/history/{event_uuid}"): "baremetal:node:history:get",
    ("GET", "/v1/nodes/{node_ident}/management/boot_device"): "baremetal:node:get_boot_device",
    (
        "GET",
        "/v1/nodes/{node_ident}/management/boot_device/supported",
    ): "baremetal:node:get_boot_device",
    ("PUT", "/v1/nodes/{node_ident}/management/boot_device"): "baremetal:node:set_boot_device",
    ("PUT", "/v1/nodes/{node_ident}/management/inject_nmi"): "baremetal:node:inject_nmi",
    (
        "GET",
        "/v1/nodes/{node_ident}/management/indicators",
    ): "baremetal:node:get_indicator_state",
    (
        "GET",
        "/v1/nodes/{node_ident}/management/indicators/{indicator}",
    ): "baremetal:node:get_indicator_state",
    (
        "PUT",
        "/v1/nodes/{node_ident}/management/indicators/{indicator}",
    ): "baremetal:node:set_indicator_state",
    ("GET", "/v1/nodes/{node_ident}/states/console"): "baremetal:node:get_console",
    ("GET", "/v1/nodes/states/console/{node_ident}"): "baremetal:node:get_console",
    ("PUT", "/v1/nodes/{node_ident}/states/console"): "baremetal:node:set_console_state",
    ("PUT", "/v1/nodes/{node_ident}/states/boot_mode"): "baremetal:node:set_boot_mode",
    ("PUT", "/v1/nodes/{node_ident}/states/secure_boot"): "baremetal:node:set_secure_boot",
    ("GET", "/v1/ports"): "baremetal:port:list_all",
    ("GET", "/v1/ports/detail"): "baremetal:port:list_all",
    ("GET", "/v1/ports/{port_ident}"): "baremetal:port:get",
    ("POST", "/v1/ports"): "baremetal:port:create",
    ("PATCH", "/v1/ports/{port_ident}"): "baremetal:port:update",
    ("DELETE", "/v1/ports/{port_ident}"): "baremetal:port:delete",
    ("GET", "/v1/conductors"): "baremetal:conductor:get",
    ("GET", "/v1/conductors/{hostname}"): "baremetal:conductor:get",
    ("GET", "/v1/drivers"): "baremetal:driver:get",
    ("GET", "/v1/drivers/{name}"): "baremetal:driver:get",
    ("GET", "/v1/drivers/{name}/properties"): "baremetal:driver:get_properties",
    ("GET", "/v1/drivers/{name}/raid/logical_disk_properties"): (
        "baremetal:driver:get_raid_logical_disk_properties"
    ),
    ("GET", "/v1/drivers/{name}/vendor_passthru/methods"): "baremetal:driver:vendor_passthru",
    **{
        (verb, path): rule
        for verb in ("GET", "POST", "PUT", "PATCH", "DELETE")
        for path, rule in (
            ("/v1/drivers/{name}/vendor_passthru", "baremetal:driver:vendor_passthru"),
            ("/v1/nodes/{node_ident}/vendor_passthru", "baremetal:node:vendor_passthru"),
        )
    },
    ("GET", "/v1/nodes/{node_ident}/vendor_passthru/methods"): "baremetal:node:vendor_passthru",
    ("GET", "/v1/deploy_templates"): "baremetal:deploy_template:get",
    ("GET", "/v1/deploy_templates/{template_ident}"): "baremetal:deploy_template:get",
    ("POST", "/v1/deploy_templates"): "baremetal:deploy_template:create",
    ("PATCH", "/v1/deploy_templates/{template_ident}"): "baremetal:deploy_template:update",
    ("DELETE", "/v1/deploy_templates/{template_ident}"): "baremetal:deploy_template:delete",
    ("GET", "/v1/nodes/{node_ident}/bios"): "baremetal:node:bios:get",
    ("GET", "/v1/nodes/{node_ident}/bios/{setting_name}"): "baremetal:node:bios:get",
    ("POST", "/v1/nodes/{node_ident}/vmedia"): "baremetal:node:vmedia:attach",
    ("GET", "/v1/nodes/{node_ident}/vmedia"): "baremetal:node:vmedia:get",
    ("DELETE", "/v1/nodes/{node_ident}/vmedia"): "baremetal:node:vmedia:detach",
    ("GET", "/v1/nodes/{node_ident}/firmware"): "baremetal:node:firmware:get",
    ("GET", "/v1/inspection_rules"): "baremetal:inspection_rule:get",
    ("GET", "/v1/inspection_rules/{rule_uuid}"): "baremetal:inspection_rule:get",
    ("POST", "/v1/inspection_rules"): "baremetal:inspection_rule:create",
    ("PATCH", "/v1/inspection_rules/{rule_uuid}"): "baremetal:inspection_rule:update",
    ("DELETE", "/v1/inspection_rules/{rule_uuid}"): "baremetal:inspection_rule:delete",
    ("DELETE", "/v1/inspection_rules"): "baremetal:inspection_rule:delete",
    ("GET", "/v1/runbooks"): "baremetal:runbook:list_all",
    ("GET", "/v1/runbooks/{runbook_ident}"): "baremetal:runbook:get",
    ("POST", "/v1/runbooks"): "baremetal:runbook:create",
    ("PATCH", "/v1/runbooks/{runbook_ident}"): "baremetal:runbook:update",
    ("DELETE", "/v1/runbooks/{runbook_ident}"): "baremetal:runbook:delete",
    ("GET", "/v1/runbooks/{runbook_ident}/traits"): "baremetal:runbook:get",
    ("PUT", "/v1/runbooks/{runbook_ident}/traits"): "baremetal:runbook:update",
    ("PUT", "/v1/runbooks/{runbook_ident}/traits/{trait}"): "baremetal:runbook:update",
    ("DELETE", "/v1/runbooks/{runbook_ident}/traits"): "baremetal:runbook:update",
    ("DELETE", "/v1/runbooks/{runbook_ident}/traits/{trait}"): "baremetal:runbook:update",
    ("GET", "/v1/allocations"): "baremetal:allocation:list_all",
    ("GET", "/v1/allocations/{allocation_ident}"): "baremetal:allocation:get",
    ("GET", "/v1/nodes/{node_ident}/allocation"): "baremetal:node:get",
    ("POST", "/v1/allocations"): "baremetal:allocation:create",
    ("PATCH", "/v1/allocations/{allocation_ident}"): "baremetal:allocation:update",
    ("DELETE", "/v1/allocations/{allocation_ident}"): "baremetal:allocation:delete",
    ("DELETE", "/v1/nodes/{node_ident}/allocation"): "baremetal:node:get",
    ("GET", "/v1/portgroups"): "baremetal:portgroup:list_all",
    ("GET", "/v1/portgroups/detail"): "baremetal:portgroup:list_all",
    ("GET", "/v1/nodes/{node_ident}/portgroups"): "baremetal:portgroup:list_all",
    ("GET", "/v1/nodes/{node_ident}/portgroups/detail"): "baremetal:portgroup:list_all",
    ("GET", "/v1/portgroups/{portgroup_ident}"): "baremetal:portgroup:get",
    ("POST", "/v1/portgroups"): "baremetal:portgroup:create",
    ("PATCH", "/v1/portgroups/{portgroup_ident}"): "baremetal:portgroup:update",
    ("DELETE", "/v1/portgroups/{portgroup_ident}"): "baremetal:portgroup:delete",
    ("GET", "/v1/nodes/{node_ident}/ports"): "baremetal:port:list_all",
    ("GET", "/v1/nodes/{node_ident}/ports/detail"): "baremetal:port:list_all",
    ("GET", "/v1/portgroups/{portgroup_ident}/ports"): "baremetal:port:list_all",
    ("GET", "/v1/portgroups/{portgroup_ident}/ports/detail"): "baremetal:port:list_all",
    ("GET", "/v1/shards"): "baremetal:shards:get",
    ("GET", "/v1/nodes/{node_ident}/children"): "baremetal:node:list_all",
    ("GET", "/v1/nodes/{node_ident}/vifs"): "baremetal:node:vif:list",
    ("POST", "/v1/nodes/{node_ident}/vifs"): "baremetal:node:vif:attach",
    ("DELETE", "/v1/nodes/{node_ident}/vifs/{vif_id}"): "baremetal:node:vif:detach",
    ("GET", "/v1/chassis"): "baremetal:chassis:get",
    ("GET", "/v1/chassis/detail"): "baremetal:chassis:get",
    ("GET", "/v1/chassis/{chassis_uuid}"): "baremetal:chassis:get",
    ("POST", "/v1/chassis"): "baremetal:chassis:create",
    ("PATCH", "/v1/chassis/{chassis_uuid}"): "baremetal:chassis:update",
    ("DELETE", "/v1/chassis/{chassis_uuid}"): "baremetal:chassis:delete",
    ("GET", "/v1/chassis/{chassis_uuid}/nodes"): "baremetal:node:list_all",
    ("GET", "/v1/chassis/{chassis_uuid}/nodes/detail"): "baremetal:node:list_all",
    ("GET", "/v1/volume"): "baremetal:volume:get",
    ("GET", "/v1/nodes/{node_ident}/volume"): "baremetal:volume:get",
    ("GET", "/v1/volume/connectors"): "baremetal:volume:list_all",
    ("GET", "/v1/volume/connectors/detail"): "baremetal:volume:list_all",
    ("GET", "/v1/nodes/{node_ident}/volume/connectors"): "baremetal:volume:list_all",
    ("GET", "/v1/volume/connectors/{connector_uuid}"): "baremetal:volume:get",
    ("POST", "/v1/volume/connectors"): "baremetal:volume:create",
    ("PATCH", "/v1/volume/connectors/{connector_uuid}"): "baremetal:volume:update",
    ("DELETE", "/v1/volume/connectors/{connector_uuid}"): "baremetal:volume:delete",
    ("GET", "/v1/volume/targets"): "baremetal:volume:list_all",
    ("GET", "/v1/volume/targets/detail"): "baremetal:volume:list_all",
    ("GET", "/v1/nodes/{node_ident}/volume/targets"): "baremetal:volume:list_all",
    ("GET", "/v1/volume/targets/{target_uuid}"): "baremetal:volume:get",
    ("POST", "/v1/volume/targets"): "baremetal:volume:create",
    ("PATCH", "/v1/volume/targets/{target_uuid}"): "baremetal:volume:update",
    ("DELETE", "/v1/volume/targets/{target_uuid}"): "baremetal:volume:delete",
}
"""The Ironic rule guarding each route (Ironic's names, from its API reference and policy)."""

OWN_RULES: dict[tuple[str, str], str] = {
    ("GET", "/metrics"): "baremetal:metrics:get",
    ("GET", "/v1/nodes/{node_ident}/progress"): "baremetal:node:get",
    ("GET", "/v1/nodes/{node_ident}/servicing/steps"): "baremetal:node:get",
    ("GET", "/v1/events"): "baremetal:node:list_all",
    ("GET", "/v1/firmware_baselines"): "metalforge:firmware_baseline:get",
    ("GET", "/v1/firmware_baselines/{baseline_ident}"): "metalforge:firmware_baseline:get",
    ("GET", "/v1/firmware_baselines/{baseline_ident}/drift"): "metalforge:firmware_baseline:get",
    ("POST", "/v1/firmware_baselines"): "metalforge:firmware_baseline:create",
    ("DELETE", "/v1/firmware_baselines/{baseline_ident}"): "metalforge:firmware_baseline:delete",
    ("GET", "/v1/rollouts"): "metalforge:rollout:list_all",
    ("GET", "/v1/rollouts/{rollout_ident}"): "metalforge:rollout:get",
    ("POST", "/v1/rollouts"): "metalforge:rollout:create",
    ("POST", "/v1/rollouts/{rollout_ident}/pause"): "metalforge:rollout:update",
    ("POST", "/v1/rollouts/{rollout_ident}/resume"): "metalforge:rollout:update",
    ("POST", "/v1/rollouts/{rollout_ident}/abort"): "metalforge:rollout:update",
}
"""Routes Ironic does not have, and the rule each is guarded by."""


def _operator_routes(app: Any) -> Iterator[tuple[str, str, APIRoute]]:
    """(method, path, route) of every operator route: the resources by their /v1 path
    (they are served bare too), the root-level ones (``/metrics``) by theirs."""
    routers = [("/v1", r) for r in RESOURCE_ROUTERS] + [("", r) for r in OPERATOR_ROOT_ROUTERS]
    for prefix, router in routers:
        for route in router.routes:
            assert isinstance(route, APIRoute)
            if route.path.endswith("/"):
                continue  # the trailing-slash twin of a listed route
            for method in sorted(_methods(route) - {"HEAD"}):
                yield method, f"{prefix}{route.path}", route


def _methods(route: APIRoute) -> set[str]:
    """FastAPI always sets a route's methods; Starlette's type allows None."""
    assert route.methods is not None
    return route.methods


def _guards(route: APIRoute) -> list[Guard]:
    return [d.call for d in route.dependant.dependencies if isinstance(d.call, Guard)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The API with its conductor registered but not running: what a request queues stays
    queued, so a restored world is exactly the world the next persona finds."""
    tmp: Path = tmp_path_factory.mktemp("authz")
    running = start_stack(
        basic_auth_settings(f"sqlite:///{tmp}/mf.sqlite", tmp), start_conductor=False
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def pristine(stack: Stack) -> tuple[World, Snapshot]:
    """One world, made by the admin through the API, and the database as it left it: each
    persona's request finds that world afresh (restored, not rebuilt)."""
    world = make_world(stack)
    return world, snapshot(stack.db)


def test_every_route_has_one_guard_and_a_request(stack: Stack) -> None:
    routes = list(_operator_routes(stack.app))
    assert len(routes) >= 45
    every = [r for router in RESOURCE_ROUTERS for r in router.routes if isinstance(r, APIRoute)]
    at_root = [
        r for router in OPERATOR_ROOT_ROUTERS for r in router.routes if isinstance(r, APIRoute)
    ]
    unguarded = [f"{sorted(_methods(r))} {r.path}" for r in every + at_root if len(_guards(r)) != 1]
    # Whatever the application serves beyond these routers is public: discovery, agents.
    served = {p for p in stack.app.openapi()["paths"] if not p.startswith("/v1/nodes")}
    outside = [
        p
        for p in served
        if not is_agent_path(p)
        and p not in ("/",)
        and not any(p == f"/v1{r.path}" for r in every)
        and not any(p == r.path for r in at_root)
    ]
    assert not outside, f"paths served outside the guarded routers: {outside}"
    assert not unguarded, f"routes without exactly one guard: {unguarded}"
    untested = [f"{m} {p}" for m, p, _ in routes if (m, p) not in REQUESTS]
    assert not untested, f"routes missing from the authorization table: {untested}"
    rules = {**IRONIC_RULES, **OWN_RULES}
    misnamed = [
        f"{m} {p}: {_guards(r)[0].rule} != {rules.get((m, p))}"
        for m, p, r in routes
        if _guards(r)[0].rule != rules.get((m, p))
    ]
    assert not misnamed, f"routes guarded by another rule than Ironic's: {misnamed}"
    wrong_target = [
        f"{m} {p}: {_guards(r)[0].kind.name}"
        for m, p, r in routes
        if _guards(r)[0].kind.name != _kind_for(m, p, _guards(r)[0].rule)
    ]
    assert not wrong_target, f"routes checking their rule on the wrong target: {wrong_target}"
    stale = [f"{m} {p}" for m, p in REQUESTS if (m, p) not in {(m2, p2) for m2, p2, _ in routes}]
    assert not stale, f"table entries for routes that do not exist: {stale}"


def _kind_for(method: str, path: str, rule: str) -> str:
    """Where a rule's target must come from: the resource the path names."""
    if rule.endswith(":list_all"):
        return "node_list" if "{node_ident}" in path else "list"
    if (
        method == "POST"
        and "{" not in path
        and rule.startswith(
            (
                "baremetal:node:",
                "baremetal:port:",
                "baremetal:portgroup:",
                "baremetal:allocation:",
                "baremetal:volume:",
            )
        )
    ):
        return "body"
    if rule == "baremetal:node:update":
        return "node_fields"
    if path == "/v1/runbooks/{runbook_ident}" and method in ("GET", "PATCH"):
        return "runbook_or_public" if method == "GET" else "runbook_fields"
    return next((kind for param, kind in _PATH_KINDS if param in path), "system")


_PATH_KINDS = (
    ("{node_ident}", "node"),
    ("{port_ident}", "port"),
    ("{portgroup_ident}", "portgroup"),
    ("{connector_uuid}", "volume_connector"),
    ("{target_uuid}", "volume_target"),
    ("{allocation_ident}", "allocation"),
    ("{runbook_ident}", "runbook"),
    ("{rollout_ident}", "rollout"),
)
"""The resource a path names, in the order they are looked for (a node before its port)."""


def _caller(persona: Persona) -> Identity:
    return Identity(
        user=persona.name, roles=frozenset(persona.roles), project_id=persona.project_id
    )


def _node_rule(caller: Identity, guard: Guard, body: Any) -> tuple[bool, int]:
    target = node_target(OWNER, LESSEE)
    if not POLICY.allows("baremetal:node:get", caller, target):
        return False, 404
    rules = (guard.rule, *guard.also)
    if guard.kind.name == "node_fields":
        needed = rules_for([PatchOperation.model_validate(op).operation() for op in body])
        return all(POLICY.allows(r, caller, target) for r in needed), 403
    return any(POLICY.allows(r, caller, target) for r in rules), 403


def _body_rule(caller: Identity, guard: Guard) -> bool:
    if guard.rule == "baremetal:node:create":
        return POLICY.allows(guard.rule, caller) or (
            caller.project_id is not None
            and POLICY.allows("baremetal:node:create:self_owned_node", caller)
        )
    if guard.rule in (
        "baremetal:port:create",
        "baremetal:portgroup:create",
        "baremetal:volume:create",
    ):
        return POLICY.allows(guard.rule, caller, node_target(OWNER, LESSEE))
    assert guard.rule == "baremetal:allocation:create", guard.rule
    return POLICY.allows(guard.rule, caller) or POLICY.allows(
        "baremetal:allocation:create_restricted", caller
    )


_OWNED: dict[str, tuple[Callable[[str | None], dict[str, str]], str]] = {
    "allocation": (allocation_target, "baremetal:allocation:get"),
    "rollout": (rollout_target, "metalforge:rollout:get"),
}
"""Resources owned by a project: the target of their rules, and the rule that reads them."""


def expected(  # noqa: PLR0911 - one answer per kind of guard, read as a table
    persona: Persona, guard: Guard, body: Any, path: str = ""
) -> tuple[bool, int]:
    """(allowed, the status when refused), from the guard and the policy defaults."""
    caller = _caller(persona)
    if guard.kind.name == "system":
        return POLICY.allows(guard.rule, caller), 403
    if guard.kind.name in ("node", "node_fields"):
        return _node_rule(caller, guard, body)
    if guard.kind.name in ("port", "portgroup", "volume_connector", "volume_target"):
        target = node_target(OWNER, LESSEE)
        if not POLICY.allows("baremetal:node:get", caller, target):
            return False, 404
        return POLICY.allows(guard.rule, caller, target), 403
    if guard.kind.name in _OWNED:
        # The world's allocation and rollout are the owner's project's; others cannot see them.
        target_of, read_rule = _OWNED[guard.kind.name]
        target = target_of(OWNER)
        if not POLICY.allows(read_rule, caller, target):
            return False, 404
        return POLICY.allows(guard.rule, caller, target), 403
    if guard.kind.name.startswith("runbook"):
        # The world's runbook belongs to the owner's project and is not public.
        target = runbook_target(OWNER)
        if guard.kind.name == "runbook_fields":
            needed = runbooks.rules_for(
                [PatchOperation.model_validate(op).operation() for op in body]
            )
            return all(POLICY.allows(r, caller, target) for r in needed), 403
        return POLICY.allows(guard.rule, caller, target), 403
    if guard.kind.name == "node_list" and not POLICY.allows(
        "baremetal:node:get", caller, node_target(OWNER, LESSEE)
    ):
        return False, 404
    if guard.kind.name in ("list", "node_list"):
        list_rule = guard.rule.removesuffix("_all")
        listed = POLICY.allows(guard.rule, caller) or (
            caller.project_id is not None and POLICY.allows(list_rule, caller)
        )
        parent = "{node_ident}" in path or "{portgroup_ident}" in path
        if listed and parent:
            # The node (or the group's node) the path names is concealed from who cannot see it.
            return POLICY.allows("baremetal:node:get", caller, node_target(OWNER, LESSEE)), 404
        return listed, 403
    return _body_rule(caller, guard), 403


def _concealed(response: Any) -> bool:
    if response.status_code != 404:
        return False
    text = json.loads(response.json()["error_message"]).get("faultstring", "")
    # A node the caller may see that has no inventory or BIOS setting yet is not concealed.
    return (
        "could not be found" in text
        and "inventory record" not in text
        and "BIOS setting" not in text
    )


ROUTE_KEYS = sorted(REQUESTS)


@pytest.mark.parametrize(("method", "path"), ROUTE_KEYS, ids=[f"{m} {p}" for m, p in ROUTE_KEYS])
def test_route_answers_each_persona_as_the_policy_says(
    stack: Stack, pristine: tuple[World, Snapshot], method: str, path: str
) -> None:
    route = next(r for m, p, r in _operator_routes(stack.app) if (m, p) == (method, path))
    (guard,) = _guards(route)
    # An event stream lasts until the server stops: as if it were stopping, an
    # allowed stream answers 200 and ends, and the table can read it whole.
    stack.app.state.stopping = lambda: True
    world, saved = pristine
    failures = []
    for persona in PERSONAS:
        restore(stack.db, saved)  # what an earlier persona changed or deleted is back
        url, body = REQUESTS[(method, path)](world)
        response = stack.client.request(method, url, json=body, headers=persona.headers)
        allowed, refusal = expected(persona, guard, body, path)
        if allowed:
            ok = response.status_code not in (401, 403) and not _concealed(response)
        else:
            ok = response.status_code == refusal
        if not ok:
            failures.append(
                f"{persona.name} {persona.roles} {persona.project_id}: expected "
                f"{'allowed' if allowed else refusal}, got {response.status_code} {response.text}"
            )
    assert not failures, "\n".join(failures)


def test_the_table_covers_both_outcomes_for_the_personas() -> None:
    """The personas are varied enough that rules are both granted and refused."""
    node_guard = Guard("baremetal:node:set_provision_state", NODE)
    outcomes = {expected(p, node_guard, None) for p in PERSONAS}
    assert (True, 403) in outcomes
    assert (False, 403) in outcomes
    assert (False, 404) in outcomes


@pytest.mark.parametrize(("method", "path"), ROUTE_KEYS, ids=[f"{m} {p}" for m, p in ROUTE_KEYS])
def test_without_credentials_every_operator_route_is_401(
    stack: Stack, method: str, path: str
) -> None:
    url = path.replace("{", "").replace("}", "")
    response = stack.client.request(
        method, url, headers={"X-OpenStack-Ironic-API-Version": "latest"}
    )
    assert response.status_code == 401, response.text
    assert response.headers["WWW-Authenticate"].startswith("Basic")
    inner = json.loads(response.json()["error_message"])
    assert inner["faultstring"] == "Authorization required"


@pytest.mark.parametrize("path", ["/", "/v1", "/v1/"])
def test_version_discovery_needs_no_credentials(stack: Stack, path: str) -> None:
    assert stack.client.get(path).status_code == 200


def test_agent_routes_need_no_operator_credentials(stack: Stack) -> None:
    lookup = stack.client.get(
        "/v1/lookup?addresses=52:54:00:99:99:99", headers={"X-OpenStack-Ironic-API-Version": "1.68"}
    )
    assert lookup.status_code == 404, lookup.text  # no such node, but not 401
    beat = stack.client.post(
        f"/v1/heartbeat/{uuid.uuid4()}",
        json={"callback_url": "http://192.0.2.1:9999", "agent_token": "x"},
        headers={"X-OpenStack-Ironic-API-Version": "1.68"},
    )
    assert beat.status_code == 404, beat.text
    report = stack.client.post(
        "/v1/continue_inspection",
        json={"inventory": {"interfaces": [{"name": "eth0", "mac_address": "52:54:00:99:99:98"}]}},
    )
    assert report.status_code == 404, report.text


def test_the_schema_is_for_readers_only(stack: Stack) -> None:
    """``/openapi.json`` lists every route and field: a caller with no role is refused."""
    assert stack.client.get("/openapi.json").status_code == 401
    for persona in PERSONAS:
        answer = stack.client.get("/openapi.json", headers=persona.headers)
        if persona.roles:
            assert answer.status_code == 200, (persona.name, answer.text)
            assert "/v1/nodes" in answer.json()["paths"]
        else:
            assert answer.status_code == 403, (persona.name, answer.text)


def test_a_target_kind_that_leaves_out_its_check_cannot_be_made() -> None:
    """Guards fail closed: a kind is a value whose check is abstract, so a new kind
    without one fails where it is declared, at import, instead of checking nothing."""

    class Forgetful(access.TargetKind):
        name = "forgetful"

    class Unread(access._InPath):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Forgetful()  # type: ignore[abstract]
    with pytest.raises(TypeError, match="abstract"):
        Unread("unread", "unread_ident")  # type: ignore[abstract]
    kinds = [v for v in vars(access).values() if isinstance(v, access.TargetKind)]
    assert len({kind.name for kind in kinds}) == len(kinds) == 15
