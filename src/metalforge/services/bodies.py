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

from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from metalforge.errors import bad_request
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
            f"{'/'.join(str(p) for p in err.get('loc', ())) or 'body'}: {err.get('msg')}"
            for err in exc.errors()
        )
        raise bad_request(f"Invalid {what}: {problems}") from None


class ChassisCreate(Body):
    uuid: str | None = None
    description: str | None = Field(default=None, max_length=255)
    extra: dict[str, Any] | None = None
