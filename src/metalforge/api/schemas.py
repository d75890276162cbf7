"""Request bodies as typed models (also what ``/openapi.json`` describes).

Unknown keys are refused, as Ironic's JSON schemas refuse them. Fields that
need a newer microversion are checked by the routes, which know the version.
The bodies a PATCH result is held to as well (a chassis', a port group's...),
and their ``Body`` base, live in ``services.bodies``: the services check
patched documents against them.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, get_args

from annotated_types import MaxLen
from fastapi import Request
from pydantic import (
    Field,
    RootModel,
    StrictStr,
    field_validator,
    model_validator,
)
from starlette.concurrency import run_in_threadpool

from metalforge.errors import bad_request
from metalforge.services.bodies import Body, DeployStepRequest, StepInterface
from metalforge.services.documents import check_storable
from metalforge.services.patching import Operation
from metalforge.services.ports import TEXT_LIMITS as PORT_TEXT
from metalforge.services.traits import MAX_TRAITS

MAX_CANDIDATES = 10_000
"""Candidate nodes one allocation may name: a fleet's worth, well inside SQL's parameter limits."""
MAX_POWER_TIMEOUT = 24 * 3600
"""Longest power-change wait a request may ask for, in seconds."""


async def report_body(request: Request) -> Any:
    """The request's JSON body (None when empty), decoded in a worker thread: an
    inspection report may be 16 MiB, and decoding that on the event loop would stall
    every other request for as long."""
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return await run_in_threadpool(json.loads, raw)
    except ValueError:
        raise bad_request("The request body is not valid JSON") from None


REPORT_BODY: dict[str, Any] = {
    "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}}
}
"""What a route reading ``report_body`` takes, for its OpenAPI operation."""


def storable_report(report: Any) -> Any:
    """An inspection report (free-form JSON from an unauthenticated ramdisk) that can be
    stored and read back: a 400 for NUL characters, lone surrogates, NaN, integers past
    64 bits or nesting past ``api.max_json_depth``, before anything looks it up."""
    try:
        check_storable(report, where="report")
    except ValueError as exc:
        raise bad_request(f"Invalid inspection data: {exc}") from None
    return report


class PatchOperation(Body):
    """One JSON patch operation: ``add``, ``replace`` or ``remove``, as Ironic accepts.

    ``test``, ``move`` and ``copy`` are refused: ``test`` would confirm a
    stored secret by trial (and its failure message quoted it), ``copy`` and
    ``move`` could carry a masked value into a field that is shown.
    """

    op: Literal["add", "replace", "remove"]
    path: str = Field(min_length=1)
    value: Any = None

    @model_validator(mode="after")
    def _check_members(self) -> PatchOperation:
        # A missing ``value`` must not read as ``null``: ``replace /extra`` without
        # one would silently wipe the field.
        if self.op in ("add", "replace") and "value" not in self.model_fields_set:
            raise ValueError(f"'{self.op}' operations need a value")
        return self

    def operation(self) -> Operation:
        """The operation as the services apply it."""
        return Operation(self.op, self.path, self.value, "value" in self.model_fields_set)


def operations(patch: list[PatchOperation]) -> list[Operation]:
    """A patch body as the services apply it."""
    return [op.operation() for op in patch]


class CleanStepRequest(Body):
    interface: StepInterface
    step: str = Field(min_length=1, max_length=255)
    args: dict[str, Any] | None = None
    order: int | None = None
    execute_on_child_nodes: bool | None = None
    limit_child_node_execution: list[str] | None = None

    @field_validator("interface", mode="before")
    @classmethod
    def _name_unknown_interface(cls, value: Any) -> Any:
        # Say which interface was wrong: a request lists several steps.
        allowed = get_args(StepInterface)
        if isinstance(value, str) and value not in allowed:
            raise ValueError(f"{value!r} is not a step interface (one of {', '.join(allowed)})")
        return value


class ProvisionRequest(Body):
    target: str = Field(min_length=1, max_length=64)
    configdrive: str | dict[str, Any] | None = None
    clean_steps: list[CleanStepRequest] | None = None
    deploy_steps: list[DeployStepRequest] | None = None
    service_steps: list[CleanStepRequest] | None = None
    rescue_password: str | None = None
    disable_ramdisk: bool | None = None
    runbook: str | None = None


class PowerRequest(Body):
    target: str = Field(min_length=1, max_length=64)
    timeout: int | None = Field(default=None, le=MAX_POWER_TIMEOUT)
    """Seconds to wait for the new power state; 1 or more is checked by the route."""


class RaidConfigRequest(Body):
    """A target RAID configuration (``{}`` clears it); the RAID interface checks the disks."""

    logical_disks: list[dict[str, Any]] | None = None


class VmediaAttachRequest(Body):
    """``POST /v1/nodes/{node}/vmedia``: the device and values the service checks."""

    device_type: StrictStr
    image_url: StrictStr = Field(min_length=1, max_length=2048)
    image_download_source: StrictStr = "local"


class ConsoleRequest(Body):
    """``PUT /v1/nodes/{node}/states/console``."""

    enabled: bool


class BootModeRequest(Body):
    """``PUT /v1/nodes/{node}/states/boot_mode``; the service names the valid modes."""

    target: str = Field(max_length=64)


class SecureBootRequest(Body):
    """``PUT /v1/nodes/{node}/states/secure_boot``; null is refused in Ironic's words."""

    target: bool | None


class IndicatorStateRequest(Body):
    """``PUT /v1/nodes/{node}/management/indicators/{indicator}``."""

    state: str = Field(max_length=64)


class MaintenanceRequest(Body):
    reason: str | None = Field(default=None, max_length=4096)


class TraitsReplace(Body):
    traits: list[str] = Field(max_length=MAX_TRAITS)


class PortCreate(Body):
    """``POST /v1/ports``; text fields held to the limits a PATCH is (``ports.TEXT_LIMITS``)."""

    address: str = Field(min_length=1, max_length=64)
    node_uuid: str | None = None
    node_ident: str | None = None
    uuid: str | None = None
    name: str | None = Field(default=None, max_length=PORT_TEXT["name"])
    extra: dict[str, Any] | None = None
    pxe_enabled: bool | None = None
    local_link_connection: dict[str, Any] | None = None
    physical_network: str | None = Field(default=None, max_length=PORT_TEXT["physical_network"])
    portgroup_uuid: str | None = None
    is_smartnic: bool | None = None
    description: str | None = Field(default=None, max_length=PORT_TEXT["description"])
    vendor: str | None = Field(default=None, max_length=PORT_TEXT["vendor"])
    category: str | None = Field(default=None, max_length=PORT_TEXT["category"])
    available_for_dynamic_portgroup: bool | None = None


class VifAttach(Body):
    """``POST /v1/nodes/{node}/vifs``; Networking's extra keys are not taken."""

    id: str = Field(min_length=1, max_length=255)
    port_uuid: str | None = None
    portgroup_uuid: str | None = None


class PassthruArgs(RootModel[dict[str, Any]]):
    """A vendor method's arguments: any JSON object (Ironic passes it on unread).

    The interface's ``validate_call`` types each argument; here the object is
    only checked to be storable, since an asynchronous call is queued with it.
    """

    @model_validator(mode="before")
    @classmethod
    def _check_storable(cls, data: Any) -> Any:
        check_storable(data)
        return data


class AllocationCreate(Body):
    """``POST /v1/allocations``; every key may be an explicit ``null`` (openstacksdk sends them)."""

    resource_class: Annotated[str, MaxLen(80)] | None = None
    traits: Annotated[list[Annotated[str, MaxLen(255)]], MaxLen(MAX_TRAITS)] | None = None
    candidate_nodes: Annotated[list[Annotated[str, MaxLen(255)]], MaxLen(MAX_CANDIDATES)] | None = (
        None
    )
    name: Annotated[str, MaxLen(255)] | None = None
    uuid: str | None = None
    extra: dict[str, Any] | None = None
    owner: Annotated[str, MaxLen(255)] | None = None
    node: str | None = None
