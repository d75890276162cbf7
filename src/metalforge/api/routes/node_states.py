"""``/v1/nodes/{id}/states``: provision and power requests, RAID target, maintenance, validate.

The routes parse the request (verb names and aliases, the microversion each
field needs) and authorize it; what a request does is in ``services``
(``provisioning.start`` for every provision verb).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from metalforge import states
from metalforge.api.auth.access import (
    NODE,
    actor,
    guard,
    node_access,
    node_disclosure,
    policy_caller,
    require,
)
from metalforge.api.locking import wait_for_lock
from metalforge.api.node_view import REDACTED, spell_old_states
from metalforge.api.schemas import (
    MaintenanceRequest,
    PowerRequest,
    ProvisionRequest,
    RaidConfigRequest,
)
from metalforge.api.versions import Version, fmt, global_request_id, request_version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import Node
from metalforge.drivers import base as drivers_base
from metalforge.errors import bad_request, not_acceptable
from metalforge.redaction import scrub_message
from metalforge.services import lookup, maintenance, node_validation, power, provisioning, raid

router = APIRouter(tags=["node states"])

CONFIGDRIVE_KEYS = frozenset({"meta_data", "network_data", "user_data", "vendor_data"})


def _states_view(node: Node, version: Version) -> dict[str, Any]:
    body: dict[str, Any] = {
        "console_enabled": node.console_enabled,
        "last_error": node.last_error,
        "power_state": node.power_state,
        "provision_state": node.provision_state,
        "provision_updated_at": node.provision_updated_at.isoformat()
        if node.provision_updated_at
        else None,
        "target_power_state": node.target_power_state,
        "target_provision_state": node.target_provision_state,
    }
    if version >= (1, 12):
        body.update(raid_config=node.raid_config, target_raid_config=node.target_raid_config)
    if version >= (1, 75):
        body.update(boot_mode=node.boot_mode, secure_boot=node.secure_boot)
    spell_old_states(body, version)  # as the node itself shows them at this version
    return body


@router.get(
    "/nodes/{node_ident}/states",
    summary="Show a node's states",
    dependencies=[guard("baremetal:node:get_states", NODE)],
)
def get_states(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    version = request_version(request)
    with svc.db.read() as session:
        node = lookup.find_node(session, node_ident, version)
        body = _states_view(node, version)
    seen = node_disclosure(request)(node.owner, node.lessee)
    if "last_error" in seen.hidden:
        body["last_error"] = REDACTED["last_error"]
    return JSONResponse(body)


def _location(request: Request, node_uuid: str) -> dict[str, str]:
    return {"Location": f"{base_url(request)}/v1/nodes/{node_uuid}/states"}


def _canonical_verb(target: str, version: Version) -> provisioning.Verb:
    name = states.VERB_ALIASES.get(target, target)
    if target == "deploy" and version < (1, 73):
        raise not_acceptable(f"The deploy verb needs API version 1.73; requested {fmt(version)}")
    if name not in states.VERBS:
        raise bad_request(f"Invalid provision state target: {target}")
    verb = provisioning.verb_of(name)
    if version < verb.since:
        raise not_acceptable(f"The {target} verb is not available at API version {fmt(version)}")
    return verb


def _check_field_versions(
    body: ProvisionRequest, verb: provisioning.Verb, version: Version
) -> None:
    """The microversion each provision field needs (where it applies)."""
    given = body.model_fields_set
    for field in provisioning.REQUEST_FIELDS:
        applies = field.since_checked_for_every_verb or field in verb.fields
        if field.since is not None and field.name in given and applies and version < field.since:
            raise not_acceptable(f"{field.name} is not available at API version {fmt(version)}")
    if body.configdrive is not None and provisioning.CONFIGDRIVE in verb.fields:
        _check_configdrive(body.configdrive, verb.name, version)


def _check_configdrive(configdrive: str | dict[str, Any], verb: str, version: Version) -> None:
    if verb == states.REBUILD and version < (1, 35):
        raise bad_request("A config drive on rebuild needs API version 1.35 or newer")
    if isinstance(configdrive, dict):
        if version < (1, 56):
            raise bad_request("A configdrive given as JSON needs API version 1.56 or newer")
        unknown = set(configdrive) - CONFIGDRIVE_KEYS
        if unknown:
            raise bad_request(f"Invalid configdrive keys: {', '.join(sorted(unknown))}")
        for key in ("meta_data", "network_data", "vendor_data"):
            if not isinstance(configdrive.get(key, {}), dict):
                raise bad_request(f"Invalid configdrive format: {key} must be an object")
        if not isinstance(configdrive.get("user_data"), str | dict | list | None):
            raise bad_request(
                "Invalid configdrive format: user_data must be a string, an object or an array"
            )


def _priority(value: int | str) -> int:
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit() and value.isascii():
        return int(value)
    raise bad_request(f"Invalid deploy step priority {value!r}: must be an integer >= 0")


def _flow_request(body: ProvisionRequest, version: Version) -> provisioning.FlowRequest:
    verb = _canonical_verb(body.target, version)
    _check_field_versions(body, verb, version)
    given = set(body.model_fields_set) - {"target"}
    if body.configdrive is None:
        given.discard("configdrive")
    if body.runbook is None:
        given.discard("runbook")
    return provisioning.FlowRequest(
        verb=verb.name,
        target=body.target,
        given=frozenset(given),
        steps={
            provisioning.CLEAN_STEPS: tuple(
                s.model_dump(exclude_none=True) for s in body.clean_steps or []
            ),
            provisioning.DEPLOY_STEPS: tuple(
                {**s.model_dump(), "priority": _priority(s.priority)}
                for s in body.deploy_steps or []
            ),
            provisioning.SERVICE_STEPS: tuple(
                s.model_dump(exclude_none=True) for s in body.service_steps or []
            ),
        },
        disable_ramdisk=bool(body.disable_ramdisk),
        configdrive=body.configdrive,
        rescue_password=body.rescue_password,
        runbook=body.runbook,
    )


@router.put(
    "/nodes/{node_ident}/states/provision",
    status_code=202,
    summary="Request a provision state change",
    dependencies=[guard("baremetal:node:set_provision_state", NODE)],
)
@wait_for_lock
def set_provision_state(node_ident: str, request: Request, body: ProvisionRequest) -> Response:
    version = request_version(request)
    flow_request = _flow_request(body, version)
    target = node_access(request).target
    for field in provisioning.REQUEST_FIELDS:
        if field.rule is not None and getattr(body, field.name):
            require(request, field.rule, target)
    svc = services(request)
    uuid = provisioning.start(
        svc,
        node_ident,
        version,
        flow_request,
        actor(request),
        request_id=global_request_id(request.state),
        caller=policy_caller(request),
    )
    return Response(status_code=202, headers=_location(request, uuid))


def _check_power_request(body: PowerRequest, version: Version) -> None:
    if body.target not in drivers_base.POWER_TARGETS:
        raise bad_request(
            f"Invalid power state target {body.target!r}; valid targets are "
            f"{', '.join(drivers_base.POWER_TARGETS)}"
        )
    soft = body.target in (drivers_base.SOFT_POWER_OFF, drivers_base.SOFT_REBOOT)
    if (soft or body.timeout is not None) and version < (1, 27):
        raise not_acceptable(
            f"Soft power actions and timeouts need API version 1.27; requested {fmt(version)}"
        )
    if body.timeout is not None and body.timeout < 1:
        raise bad_request(f"Invalid timeout value {body.timeout}; it must be 1 or more")


@router.put(
    "/nodes/{node_ident}/states/power",
    status_code=202,
    summary="Request a power state change",
    dependencies=[guard("baremetal:node:set_power_state", NODE)],
)
@wait_for_lock
def set_power_state(node_ident: str, request: Request, body: PowerRequest) -> Response:
    version = request_version(request)
    _check_power_request(body, version)
    svc = services(request)
    uuid = power.request_power(svc, node_ident, version, body.target, body.timeout, actor(request))
    return Response(status_code=202, headers=_location(request, uuid))


@router.put(
    "/nodes/{node_ident}/states/raid",
    status_code=204,
    summary="Set a node's target RAID configuration",
    dependencies=[guard("baremetal:node:set_raid_state", NODE)],
)
@wait_for_lock
def set_raid_config(node_ident: str, request: Request, body: RaidConfigRequest) -> Response:
    """Store what ``raid.create_configuration`` will build; ``{}`` clears it."""
    version = request_version(request)
    config = body.model_dump(exclude_unset=True)
    raid.set_target(services(request), node_ident, version, config, actor(request))
    return Response(status_code=204)


@router.put(
    "/nodes/{node_ident}/maintenance",
    status_code=202,
    summary="Enter maintenance",
    dependencies=[guard("baremetal:node:set_maintenance", NODE)],
)
@wait_for_lock
def maintenance_on(
    node_ident: str, request: Request, body: MaintenanceRequest | None = None
) -> Response:
    reason = body.reason if body else None
    maintenance.set_maintenance(
        services(request),
        node_ident,
        request_version(request),
        on=True,
        reason=reason,
        actor=actor(request),
    )
    return Response(status_code=202)


@router.delete(
    "/nodes/{node_ident}/maintenance",
    status_code=202,
    summary="Leave maintenance",
    dependencies=[guard("baremetal:node:clear_maintenance", NODE)],
)
@wait_for_lock
def maintenance_off(node_ident: str, request: Request) -> Response:
    maintenance.set_maintenance(
        services(request),
        node_ident,
        request_version(request),
        on=False,
        reason=None,
        actor=actor(request),
    )
    return Response(status_code=202)


@router.get(
    "/nodes/{node_ident}/validate",
    summary="Validate a node's driver interfaces",
    dependencies=[guard("baremetal:node:validate", NODE)],
)
def validate_node(node_ident: str, request: Request) -> JSONResponse:
    found = node_validation.validate_node(services(request), node_ident, request_version(request))
    node = found.node
    hidden = node_disclosure(request)(node.owner, node.lessee).hidden
    result: dict[str, Any] = {}
    for family, outcome in found.outcomes.items():
        result[family] = {"result": outcome.result}
        if outcome.reason:
            # Reasons quote driver_info (addresses, user names): shown to whoever
            # may read it, and never with its secrets.
            result[family]["reason"] = (
                REDACTED["driver_info"]["content"]
                if "driver_info" in hidden
                else scrub_message(outcome.reason, node.driver_info, node.instance_info)
            )
    return JSONResponse(result)
