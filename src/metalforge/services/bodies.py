"""What a resource's create body may hold, and the document a PATCH leaves with it.

The models are the API's request bodies (and what ``/openapi.json``
describes), but they live here because they are value rules: a service
checks a patched document against the same model a create's body was
parsed with (``checked``), so a PATCH can store nothing a create would
refuse, whoever calls the service. Unknown keys are refused, as Ironic's
JSON schemas refuse them; fields that need a newer microversion are checked
by whoever knows the version.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from annotated_types import MaxLen
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from metalforge.errors import bad_request, validation_reason
from metalforge.services.documents import check_storable

M = TypeVar("M", bound=BaseModel)


class Body(BaseModel):
    """A request body: unknown keys refused, every value storable (``check_storable``)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _check_storable(cls, data: Any) -> Any:
        check_storable(data)
        return data


def checked(model: type[M], document: dict[str, Any], what: str) -> M:
    """A patched ``document`` parsed as a create's body of ``model`` would be; 400 naming
    each problem (``Invalid <what>: field: reason``) rather than a validation error's shape."""
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'/'.join(str(p) for p in err.get('loc', ())) or 'body'}: {validation_reason(err)}"
            for err in exc.errors()
        )
        raise bad_request(f"Invalid {what}: {problems}") from None


class ChassisCreate(Body):
    uuid: str | None = None
    description: str | None = Field(default=None, max_length=255)
    extra: dict[str, Any] | None = None


StepInterface = Literal["vendor", "power", "management", "firmware", "deploy", "bios", "raid"]


class DeployStepRequest(Body):
    interface: StepInterface
    step: str = Field(min_length=1, max_length=255)
    args: dict[str, Any]
    priority: int | str


MAX_PRIORITY = 2**31 - 1
"""The largest step priority: a template's priorities are stored as 32-bit integers."""


def step_number(value: Any) -> Any:
    """``value`` if it is a stored step's priority or order: an integer from 0 to
    ``MAX_PRIORITY``, or a string of its digits (Ironic accepts ``"10"``). A boolean is
    refused although JSON parsers would let it pass as an integer."""
    number = value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        number = int(value)
    valid = isinstance(number, int) and not isinstance(number, bool)
    if not valid or not 0 <= number <= MAX_PRIORITY:
        raise ValueError(
            f"{value!r} is not an integer from 0 to {MAX_PRIORITY} or a string of digits"
        )
    return value


class DeployTemplateStep(DeployStepRequest):
    """A deploy template's step: the four keys of a deploy step, priority checked here.

    The priority may be a digit string (Ironic accepts ``"10"``); a boolean
    is refused although JSON parsers would let it pass as an integer.
    """

    @field_validator("priority", mode="before")
    @classmethod
    def _check_priority(cls, value: Any) -> Any:
        return step_number(value)


class DeployTemplateCreate(Body):
    name: str = Field(min_length=1, max_length=255)
    steps: list[DeployTemplateStep] = Field(min_length=1)
    uuid: str | None = None
    extra: dict[str, Any] | None = None
    description: str | None = Field(default=None, max_length=255)
    """Accepted and ignored, as Ironic does."""


class RunbookStep(Body):
    """A runbook's step: interface, step, arguments (``{}`` when left out) and ``order``
    (the order it runs in, checked as a template step's priority is)."""

    interface: StepInterface
    step: str = Field(min_length=1, max_length=255)
    args: dict[str, Any] = Field(default_factory=dict)
    order: int | str

    @field_validator("order", mode="before")
    @classmethod
    def _check_order(cls, value: Any) -> Any:
        return step_number(value)


class RunbookCreate(Body):
    """``POST /v1/runbooks``; which names are valid depends on the microversion (the
    service checks it), and traits are set through ``/traits``, never here."""

    name: StrictStr = Field(min_length=1, max_length=255)
    steps: list[RunbookStep] = Field(min_length=1)
    uuid: str | None = None
    extra: dict[str, Any] | None = None
    description: str | None = Field(default=None, max_length=255)
    owner: str | None = Field(default=None, max_length=255)
    public: bool | None = None
    disable_ramdisk: bool | None = None


class PortgroupCreate(Body):
    node_uuid: str = Field(min_length=1, max_length=255)
    uuid: str | None = None
    address: str | None = Field(default=None, max_length=64)
    name: str | None = Field(default=None, max_length=255)
    mode: str | None = Field(default=None, max_length=255)
    standalone_ports_supported: bool | str | None = None
    properties: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None
    physical_network: str | None = Field(default=None, max_length=64)
    category: str | None = Field(default=None, max_length=80)


class VolumeConnectorCreate(Body):
    """``POST /v1/volume/connectors``; types as strict as Ironic's JSON schema."""

    node_uuid: StrictStr
    type: StrictStr
    connector_id: StrictStr
    uuid: StrictStr | None = None
    extra: dict[str, Any] | None = None


class VolumeTargetCreate(Body):
    """``POST /v1/volume/targets``; types strict as Ironic's JSON schema."""

    node_uuid: StrictStr
    volume_type: StrictStr
    volume_id: StrictStr
    boot_index: StrictInt
    uuid: StrictStr | None = None
    properties: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None


def max_lengths(model: type[BaseModel]) -> dict[str, int]:
    """Each string field's ``max_length``, so PATCH enforces what create enforces."""
    return {
        name: meta.max_length
        for name, info in model.model_fields.items()
        for meta in info.metadata
        if isinstance(meta, MaxLen)
    }


class NodeCreate(Body):
    driver: str = Field(min_length=1, max_length=255)
    name: str | None = Field(default=None, max_length=255)
    uuid: str | None = None
    chassis_uuid: str | None = None
    driver_info: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None
    instance_info: dict[str, Any] | None = None
    instance_uuid: str | None = None
    properties: dict[str, Any] | None = None
    resource_class: str | None = Field(default=None, max_length=80)
    conductor_group: str | None = Field(default=None, max_length=255)
    owner: str | None = Field(default=None, max_length=255)
    lessee: str | None = Field(default=None, max_length=255)
    description: str | None = Field(default=None, max_length=4096)
    maintenance: bool | None = None
    console_enabled: bool | None = None
    automated_clean: bool | None = None
    retired: bool | None = None
    retired_reason: str | None = Field(default=None, max_length=4096)
    network_data: dict[str, Any] | None = None
    boot_mode: str | None = Field(default=None, max_length=16)
    secure_boot: bool | None = None
    shard: str | None = Field(default=None, max_length=255)
    parent_node: str | None = None
    disable_power_off: bool | None = None
    instance_name: str | None = Field(default=None, max_length=255)
    bios_interface: str | None = None
    boot_interface: str | None = None
    console_interface: str | None = None
    deploy_interface: str | None = None
    firmware_interface: str | None = None
    inspect_interface: str | None = None
    management_interface: str | None = None
    network_interface: str | None = None
    power_interface: str | None = None
    raid_interface: str | None = None
    rescue_interface: str | None = None
    storage_interface: str | None = None
    vendor_interface: str | None = None


class BaselineComponent(Body):
    """One component of a firmware baseline: the version wanted and the image that has it."""

    component: StrictStr = Field(min_length=1, max_length=255)
    version: StrictStr = Field(min_length=1, max_length=255)
    url: StrictStr = Field(min_length=1, max_length=2048)
    wait: StrictInt = Field(default=0, ge=0, le=3600)
    """Seconds to wait after flashing it (a BMC that resets itself answers nothing for a while)."""


class FirmwareBaselineCreate(Body):
    """``POST /v1/firmware_baselines`` (metalforge's own resource)."""

    uuid: StrictStr | None = None
    name: StrictStr = Field(min_length=1, max_length=255)
    description: StrictStr | None = Field(default=None, max_length=255)
    vendor: StrictStr | None = Field(default=None, min_length=1, max_length=255)
    model: StrictStr | None = Field(default=None, min_length=1, max_length=255)
    components: list[BaselineComponent] = Field(min_length=1, max_length=64)


class RolloutSelector(Body):
    """Which nodes a rollout covers: every given criterion must hold (none given: refused)."""

    nodes: list[StrictStr] | None = Field(default=None, min_length=1, max_length=10_000)
    """Node UUIDs or names, in the order they should go."""
    resource_class: StrictStr | None = Field(default=None, max_length=80)
    traits: list[StrictStr] | None = Field(default=None, min_length=1, max_length=50)
    """Every one of these traits."""
    conductor_group: StrictStr | None = Field(default=None, max_length=255)
    owner: StrictStr | None = Field(default=None, max_length=255)
    provision_state: StrictStr | None = Field(default=None, max_length=15)
    name_pattern: StrictStr | None = Field(default=None, min_length=1, max_length=255)
    """A shell-style pattern (``rack4-*``) the node's name must match."""
    drifted_from: StrictStr | None = Field(default=None, min_length=1, max_length=255)
    """A firmware baseline (UUID or name): the nodes its drift report lists."""


class RolloutAction(Body):
    """What a rollout runs on each node: exactly one of these."""

    runbook: StrictStr | None = Field(default=None, min_length=1, max_length=255)
    baseline: StrictStr | None = Field(default=None, min_length=1, max_length=255)
    verb: Literal["manage", "provide", "inspect"] | None = None


class RolloutWindow(Body):
    """Hours (UTC) between which nodes may start: 22 to 6 spans midnight."""

    start_hour: StrictInt = Field(ge=0, le=23)
    end_hour: StrictInt = Field(ge=0, le=23)

    @model_validator(mode="after")
    def _not_empty(self) -> RolloutWindow:
        if self.start_hour == self.end_hour:
            raise ValueError("start_hour and end_hour must differ (an empty window never opens)")
        return self


class RolloutCreate(Body):
    """``POST /v1/rollouts`` (metalforge's own resource)."""

    name: StrictStr | None = Field(default=None, min_length=1, max_length=255)
    action: RolloutAction
    selector: RolloutSelector
    canary: StrictInt = Field(default=0, ge=0, le=1000)
    batch: StrictInt = Field(default=1, ge=1, le=1000)
    max_failures: StrictInt = Field(default=0, ge=0, le=10_000)
    window: RolloutWindow | None = None
