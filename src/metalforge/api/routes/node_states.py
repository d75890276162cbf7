"""``/v1/nodes/{id}/states``, provision and power requests, maintenance, validate.

A provision request is checked against the state table and, in one
transaction, moves the node to its transient state and queues the work for a
conductor, so the next GET already shows the change (ironicclient's ``--wait``
relies on it) and the request cannot be lost.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import update
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.api.auth.access import actor, guard, node_access, node_disclosure, require
from metalforge.api.locking import wait_for_lock
from metalforge.api.node_view import REDACTED
from metalforge.api.schemas import (
    MaintenanceRequest,
    PowerRequest,
    ProvisionRequest,
    RaidConfigRequest,
)
from metalforge.api.services import ApiServices, base_url, services
from metalforge.api.versions import Version, fmt, request_version
from metalforge.conductor import deploy_plan, history, steps, transitions
from metalforge.db import queue
from metalforge.db.models import Node, utcnow
from metalforge.drivers import base as drivers_base
from metalforge.drivers.base import DriverError, RaidInterface, ReadOnlyTask, StepsNotKnown
from metalforge.drivers.hardware import UnknownDriver
from metalforge.errors import (
    NodeLocked,
    RequestError,
    bad_request,
    conflict,
    not_acceptable,
    not_found,
)
from metalforge.redaction import scrub_message
from metalforge.services import lookup, maintenance

router = APIRouter(tags=["node states"])

VERB_VERSIONS: dict[str, Version] = {
    states.MANAGE: (1, 4),
    states.PROVIDE: (1, 4),
    states.INSPECT: (1, 6),
    states.ABORT: (1, 13),
    states.CLEAN: (1, 15),
    states.ADOPT: (1, 17),
    states.RESCUE_VERB: (1, 38),
    states.UNRESCUE: (1, 38),
    states.UNHOLD: (1, 85),
    states.SERVICE: (1, 87),
    states.DEPLOY: (1, 1),
    states.REBUILD: (1, 1),
    states.UNDEPLOY: (1, 1),
}
ABORT_VERSIONS: dict[str, Version] = {
    states.INSPECT_WAIT: (1, 41),
    states.DEPLOY_WAIT: (1, 110),
}
POWER_BLOCKED_STATES = frozenset(
    {
        states.CLEANING,
        states.CLEAN_WAIT,
        states.DEPLOYING,
        states.DELETING,
        states.INSPECTING,
        states.VERIFYING,
        states.ADOPTING,
        states.RESCUING,
        states.UNRESCUING,
        states.SERVICING,
    }
)


def locked(node: Node) -> RequestError:
    return NodeLocked(node.uuid, node.reservation)


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
    return body


@router.get(
    "/nodes/{node_ident}/states",
    summary="Show a node's states",
    dependencies=[guard("baremetal:node:get_states", "node")],
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


def _queue(
    svc: ApiServices, session: Session, node: Node, kind: str, payload: dict[str, Any] | None = None
) -> None:
    owner = svc.preferred_conductor(node.uuid, node.driver, node.conductor_group)
    if kind == queue.PROVISION:
        queue.enqueue_provision(session, node.id, preferred_owner=owner)
        return
    queue.enqueue(session, kind, node.id, payload, preferred_owner=owner)


def _location(request: Request, node: Node) -> dict[str, str]:
    return {"Location": f"{base_url(request)}/v1/nodes/{node.uuid}/states"}


def _check_provision_body(body: ProvisionRequest, verb: str, version: Version) -> None:
    given = body.model_fields_set
    if "clean_steps" in given and verb != states.CLEAN:
        raise bad_request(
            f'"clean_steps" is only valid when setting target provision state to {states.CLEAN}'
        )
    if verb == states.CLEAN and not body.clean_steps and not body.runbook:
        raise bad_request(
            f'"clean_steps" is required when setting target provision state to {states.CLEAN}'
        )
    if "deploy_steps" in given:
        if version < (1, 69):
            raise not_acceptable(f"deploy_steps is not available at API version {fmt(version)}")
        if verb not in (states.DEPLOY, states.REBUILD):
            raise bad_request(
                '"deploy_steps" is only valid when setting target provision '
                f"state to {states.DEPLOY} or {states.REBUILD}"
            )
    if "service_steps" in given and verb != states.SERVICE:
        raise bad_request('"service_steps" is only valid with the service target')
    if verb == states.SERVICE and not body.service_steps and not body.runbook:
        raise bad_request(
            f'"service_steps" is required when setting target provision state to {states.SERVICE}'
        )
    if "disable_ramdisk" in given and verb not in (states.CLEAN, states.SERVICE):
        raise bad_request('"disable_ramdisk" can only be used with the clean and service targets')
    if "disable_ramdisk" in given and version < (1, 70):
        raise not_acceptable(f"disable_ramdisk is not available at API version {fmt(version)}")
    if body.configdrive is not None:
        if verb not in (states.DEPLOY, states.REBUILD):
            raise bad_request(
                f"Adding a config drive is only supported when setting provision "
                f"state to {states.DEPLOY} or {states.REBUILD}"
            )
        if verb == states.REBUILD and version < (1, 35):
            raise bad_request("A config drive on rebuild needs API version 1.35 or newer")
        if isinstance(body.configdrive, dict):
            if version < (1, 56):
                raise bad_request("A configdrive given as JSON needs API version 1.56 or newer")
            allowed = {"meta_data", "network_data", "user_data", "vendor_data"}
            unknown = set(body.configdrive) - allowed
            if unknown:
                raise bad_request(f"Invalid configdrive keys: {', '.join(sorted(unknown))}")
    if body.runbook is not None:
        raise bad_request("Runbooks are not supported by this service")
    if verb == states.RESCUE_VERB and not body.rescue_password:
        raise bad_request(
            'A non-empty "rescue_password" is required when setting target '
            "provision state to rescue"
        )
    if "rescue_password" in given and verb != states.RESCUE_VERB:
        raise bad_request('"rescue_password" is only valid with the rescue target')


def _check_rescue_supported(svc: ApiServices, node: Node) -> None:
    """Rescue needs a rescue interface that can do it: ``no-rescue`` is refused here."""
    try:
        iface = svc.drivers.interface(node, "rescue")
    except UnknownDriver as exc:
        raise bad_request(str(exc)) from None
    if not isinstance(iface, drivers_base.RescueInterface):
        raise bad_request(
            f"Node {node.uuid} cannot be rescued: its rescue interface is {iface.name!r}. "
            "Set rescue_interface to one that supports rescue (fake-hardware: 'fake')."
        )


def _canonical_verb(target: str, version: Version) -> str:
    verb = states.VERB_ALIASES.get(target, target)
    if target == "deploy" and version < (1, 73):
        raise not_acceptable(f"The deploy verb needs API version 1.73; requested {fmt(version)}")
    if verb not in states.VERBS:
        raise bad_request(f"Invalid provision state target: {target}")
    since = VERB_VERSIONS.get(verb, (1, 1))
    if version < since:
        raise not_acceptable(f"The {target} verb is not available at API version {fmt(version)}")
    return verb


def _supported_clean_steps(svc: ApiServices, node: Node) -> list[steps.Step]:
    return steps.supported_steps(
        svc.drivers,
        node,
        "clean",
        steps.parse_overrides(svc.settings.conductor.clean_step_priority_override),
    )


def _intent(svc: ApiServices, node: Node, verb: str, body: ProvisionRequest) -> dict[str, Any]:
    """Columns the verb writes together with the transition."""
    info = dict(node.driver_internal_info)
    changes: dict[str, Any] = {}
    if verb in (states.PROVIDE, states.CLEAN, states.MANAGE, states.UNDEPLOY):
        for key in (
            "clean_steps",
            "clean_step_index",
            "requested_clean_steps",
            "clean_prepared",
            "clean_preparing_since",
            "clean_disable_ramdisk",
        ):
            info.pop(key, None)
    if verb in (
        states.PROVIDE,
        states.CLEAN,
        states.DEPLOY,
        states.REBUILD,
        states.MANAGE,
        states.INSPECT,
        states.ADOPT,
        states.SERVICE,
    ):
        changes["last_error"] = None
    if verb == states.CLEAN:
        requested = [s.model_dump(exclude_none=True) for s in body.clean_steps or []]
        try:
            steps.requested_plan(_supported_clean_steps(svc, node), requested)
        except steps.StepRequestError as exc:
            raise bad_request(f"Manual cleaning refused: {exc}") from None
        except StepsNotKnown:
            pass  # the conductor checks the steps again once the interface knows them
        info["requested_clean_steps"] = requested
        if body.disable_ramdisk:
            info["clean_disable_ramdisk"] = True
    if verb in (states.DEPLOY, states.REBUILD):
        for key in ("deploy_steps", "deploy_step_index", "requested_deploy_steps"):
            info.pop(key, None)
        if body.deploy_steps:
            info["requested_deploy_steps"] = [
                {**s.model_dump(), "priority": _priority(s.priority)} for s in body.deploy_steps
            ]
        instance_info = dict(node.instance_info)
        if body.configdrive is not None:
            instance_info["configdrive"] = body.configdrive
        changes["instance_info"] = instance_info
    if verb == states.SERVICE:
        for key in ("service_steps", "service_step_index"):
            info.pop(key, None)
        info["requested_service_steps"] = [
            s.model_dump(exclude_none=True) for s in body.service_steps or []
        ]
    if verb == states.RESCUE_VERB:
        changes["instance_info"] = {**node.instance_info, "rescue_password": body.rescue_password}
    if verb == states.INSPECT:
        changes.update(inspection_started_at=utcnow(), inspection_finished_at=None)
    changes["driver_internal_info"] = info
    return changes


def _check_deploy_plan(
    svc: ApiServices, session: Session, node: Node, body: ProvisionRequest
) -> None:
    """Refuse a deployment the conductor could not plan, before the node moves.

    Requested traits missing from the node, a selected template's step the
    driver lacks, a core step moved: all would otherwise end in
    ``deploy failed`` after the node left ``available``.
    """
    requested = [
        {**s.model_dump(), "priority": _priority(s.priority)} for s in body.deploy_steps or []
    ]
    overrides = steps.parse_overrides(svc.settings.conductor.deploy_step_priority_override)
    try:
        deploy_plan.plan_for_node(session, svc.drivers, node, overrides, requested)
    except (steps.StepRequestError, UnknownDriver) as exc:
        raise bad_request(f"Cannot deploy node {node.uuid}: {exc}") from None


def _priority(value: int | str) -> int:
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit() and value.isascii():
        return int(value)
    raise bad_request(f"Invalid deploy step priority {value!r}: must be an integer >= 0")


@router.put(
    "/nodes/{node_ident}/states/provision",
    status_code=202,
    summary="Request a provision state change",
    dependencies=[guard("baremetal:node:set_provision_state", "node")],
)
@wait_for_lock
def set_provision_state(node_ident: str, request: Request, body: ProvisionRequest) -> Response:
    svc = services(request)
    version = request_version(request)
    verb = _canonical_verb(body.target, version)
    _check_provision_body(body, verb, version)
    target = node_access(request).target
    if body.clean_steps:
        require(request, "baremetal:node:set_provision_state:clean_steps", target)
    if body.service_steps:
        require(request, "baremetal:node:set_provision_state:service_steps", target)
    with svc.db.write() as session:
        node = lookup.load_node(session, node_ident, version)
        if node.reservation is not None:
            raise locked(node)
        if verb in (states.DEPLOY, states.REBUILD) and node.maintenance:
            raise bad_request(
                f'The requested action "{body.target}" could not be performed '
                f'on node "{node.uuid}" while it is in maintenance mode.'
            )
        if node.protected and verb in (states.REBUILD, states.UNDEPLOY):
            # Ironic answers a protected node with 403, for this as for DELETE.
            raise RequestError(
                403, f"Node {node.uuid} is protected and cannot be undeployed, rebuilt or deleted"
            )
        if verb not in states.allowed_events(node.provision_state):
            raise bad_request(
                f'The requested action "{body.target}" can not be performed on node '
                f'"{node.uuid}" while it is in state "{node.provision_state}".'
            )
        if verb in (states.RESCUE_VERB, states.UNRESCUE):
            _check_rescue_supported(svc, node)
        retrying = verb == states.PROVIDE and node.provision_state == states.CLEAN_FAILED
        if (verb == states.CLEAN or retrying) and node.maintenance:
            # As Ironic: a failed clean leaves the node in maintenance, and the
            # operator confirms it is fit to clean again by turning that off.
            what = "retrying cleaning" if retrying else "manual cleaning"
            raise bad_request(
                f"Node {node.uuid} is in maintenance mode; {what} needs it "
                "turned off first (see maintenance_reason and last_error)."
            )
        if verb == states.ABORT:
            needed = ABORT_VERSIONS.get(node.provision_state)
            if needed is not None and version < needed:
                raise bad_request(
                    f'Aborting in state "{node.provision_state}" needs API '
                    f"version {fmt(needed)} or newer"
                )
            _queue(svc, session, node, "abort")
            history.record(
                session,
                node.id,
                "provisioning",
                "abort requested",
                state=node.provision_state,
                target=node.target_provision_state,
                user=actor(request),
            )
        else:
            if verb in (states.DEPLOY, states.REBUILD):
                _check_deploy_plan(svc, session, node, body)
            changes = _intent(svc, node, verb, body)
            try:
                transitions.apply(session, node, verb, changes=changes, user=actor(request))
            except transitions.TransitionConflict:
                raise conflict(
                    f"Node {node.uuid} changed while the request was processed; please retry."
                ) from None
            if states.STATES[node.provision_state].busy:
                _queue(svc, session, node, "provision")
    svc.notify()
    return Response(status_code=202, headers=_location(request, node))


@router.put(
    "/nodes/{node_ident}/states/power",
    status_code=202,
    summary="Request a power state change",
    dependencies=[guard("baremetal:node:set_power_state", "node")],
)
@wait_for_lock
def set_power_state(node_ident: str, request: Request, body: PowerRequest) -> Response:
    svc = services(request)
    version = request_version(request)
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
    with svc.db.write() as session:
        node = lookup.find_node(session, node_ident, version)
        # Ironic refuses power changes during cleaning (400) before it looks at
        # the lock, so a node busy in a clean step answers 400 at once, not 409.
        cleaning = node.provision_state in (states.CLEANING, states.CLEAN_WAIT)
        if node.reservation is not None and not cleaning:
            raise locked(node)
        if node.provision_state in POWER_BLOCKED_STATES:
            raise bad_request(
                f"Power state change is not allowed while node {node.uuid} is in "
                f'state "{node.provision_state}"'
            )
        if node.target_power_state is not None:
            raise conflict(
                f"Node {node.uuid} already has a power change to "
                f"{node.target_power_state} in progress"
            )
        if node.disable_power_off and body.target in (
            drivers_base.POWER_OFF,
            drivers_base.SOFT_POWER_OFF,
        ):
            raise bad_request(f"Powering off node {node.uuid} is disabled (disable_power_off)")
        target_state = (
            drivers_base.POWER_OFF
            if body.target in (drivers_base.POWER_OFF, drivers_base.SOFT_POWER_OFF)
            else drivers_base.POWER_ON
        )
        result = session.execute(
            update(Node)
            .where(
                Node.id == node.id, Node.reservation.is_(None), Node.target_power_state.is_(None)
            )
            .values(target_power_state=target_state, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise conflict(
                f"Node {node.uuid} changed while the request was processed; please retry."
            )
        _queue(svc, session, node, "power", {"target": body.target, "timeout": body.timeout})
        history.record(
            session,
            node.id,
            "power",
            f"power {body.target} requested",
            state=node.provision_state,
            target=node.target_provision_state,
            user=actor(request),
        )
    svc.notify()
    return Response(status_code=202, headers=_location(request, node))


@router.put(
    "/nodes/{node_ident}/states/raid",
    status_code=204,
    summary="Set a node's target RAID configuration",
    dependencies=[guard("baremetal:node:set_raid_state", "node")],
)
@wait_for_lock
def set_raid_config(node_ident: str, request: Request, body: RaidConfigRequest) -> Response:
    """Store what ``raid.create_configuration`` will build; ``{}`` clears it.

    The configuration is checked by the node's RAID interface now, so a bad
    one is refused here rather than failing a clean later.
    """
    svc = services(request)
    version = request_version(request)
    config = body.model_dump(exclude_unset=True)
    with svc.db.write() as session:
        node = lookup.find_node(session, node_ident, version)
        if version < (1, 12):
            raise not_acceptable(
                f"Setting a target RAID configuration needs API version 1.12; "
                f"requested {fmt(version)}"
            )
        if node.reservation is not None:
            raise locked(node)
        if config:  # clearing the target is always allowed
            try:
                raid = svc.drivers.interface(node, "raid")
            except UnknownDriver as exc:
                raise bad_request(str(exc)) from None
            if not isinstance(raid, RaidInterface):
                # 404, as Ironic: RAID is an optional interface the driver lacks.
                raise not_found(
                    f"Node {node.uuid} cannot configure RAID: its raid interface is {raid.name}"
                )
            try:
                raid.validate_raid_config(ReadOnlyTask(node), config)
            except DriverError as exc:
                raise bad_request(f"Invalid target RAID configuration: {exc}") from None
        result = session.execute(
            update(Node)
            .where(Node.id == node.id, Node.epoch == node.epoch, Node.reservation.is_(None))
            .values(target_raid_config=config, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise conflict(f"Node {node.uuid} changed while it was being updated; please retry.")
        disks = len(config.get("logical_disks") or [])
        text = f"set, {disks} logical disk(s)" if disks else "cleared"
        history.record(
            session,
            node.id,
            "raid",
            f"target RAID configuration {text}",
            state=node.provision_state,
            target=node.target_provision_state,
            user=actor(request),
        )
    return Response(status_code=204)


@router.put(
    "/nodes/{node_ident}/maintenance",
    status_code=202,
    summary="Enter maintenance",
    dependencies=[guard("baremetal:node:set_maintenance", "node")],
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
    dependencies=[guard("baremetal:node:clear_maintenance", "node")],
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


VALIDATED = (
    "boot",
    "console",
    "deploy",
    "inspect",
    "management",
    "network",
    "power",
    "raid",
    "rescue",
    "storage",
    "bios",
    "firmware",
)


@router.get(
    "/nodes/{node_ident}/validate",
    summary="Validate a node's driver interfaces",
    dependencies=[guard("baremetal:node:validate", "node")],
)
def validate_node(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    version = request_version(request)
    result: dict[str, Any] = {}
    deploy_overrides = steps.parse_overrides(svc.settings.conductor.deploy_step_priority_override)
    with svc.db.read() as session:
        node = lookup.find_node(session, node_ident, version)
        task = ReadOnlyTask(node)
        for family in VALIDATED:
            try:
                iface = svc.drivers.interface(node, family)
            except UnknownDriver as exc:
                result[family] = {"result": False, "reason": str(exc)}
                continue
            if iface.name.startswith("no-"):
                result[family] = {"result": None, "reason": f"not supported ({iface.name})"}
                continue
            try:
                iface.validate(task)
                if family == "deploy":
                    # The deployment this node would run: its traits and templates,
                    # and every template its traits could select later.
                    deploy_plan.plan_for_node(session, svc.drivers, node, deploy_overrides)
                    deploy_plan.check_node_templates(session, svc.drivers, node, deploy_overrides)
                result[family] = {"result": True}
            except (DriverError, steps.StepRequestError) as exc:
                result[family] = {"result": False, "reason": str(exc)}
    seen = node_disclosure(request)(node.owner, node.lessee)
    for outcome in result.values():
        if outcome.get("reason"):
            # Reasons quote driver_info (addresses, user names): shown to whoever
            # may read it, and never with its secrets.
            outcome["reason"] = (
                REDACTED["driver_info"]["content"]
                if "driver_info" in seen.hidden
                else scrub_message(outcome["reason"], node.driver_info, node.instance_info)
            )
    return JSONResponse(result)
