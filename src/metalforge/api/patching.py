"""What is left of patching in the API: a patched document read as a create's body.

The services apply patches (``services.patching``); routes whose resource is
still checked against an API body model after a patch use ``checked_as``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from metalforge.api.schemas import PatchOperation, operations
from metalforge.errors import bad_request
from metalforge.services import patching

M = TypeVar("M", bound=BaseModel)


def checked_as(model: type[M], document: dict[str, Any], what: str) -> M:
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


def apply_patch(document: dict[str, Any], ops: list[PatchOperation]) -> dict[str, Any]:
    """``document`` with ``ops`` applied in order (``services.patching.apply``)."""
    return patching.apply(document, operations(ops))
