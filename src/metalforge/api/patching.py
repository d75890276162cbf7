"""Applying a client's JSON patch to a stored document without ever quoting the document.

jsonpatch's own messages quote the document they failed on ("member 'x'
not found in {...}"), which for a node includes its BMC credentials. A
failure's message is built from the failing operation and its path alone;
values the client sent under secret keys are masked too, since error
messages reach logs.
"""

from __future__ import annotations

from typing import Any, TypeVar

import jsonpatch
import jsonpointer
import orjson
from pydantic import BaseModel, ValidationError

from metalforge.api.schemas import BODY_LIMITS, PatchOperation, check_storable
from metalforge.errors import bad_request
from metalforge.redaction import MASK, is_secret_key, mask_document

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


def shown_operation(op: PatchOperation) -> dict[str, Any]:
    """``op`` as it may appear in a message: values under secret keys masked."""
    shown = op.as_json_patch()
    if "value" in shown:
        last = op.path.rstrip("/").rsplit("/", 1)[-1]
        hidden = is_secret_key(last) or last == "configdrive"
        shown["value"] = MASK if hidden else mask_document(shown["value"])
    return shown


def apply_patch(document: dict[str, Any], ops: list[PatchOperation]) -> dict[str, Any]:
    """``document`` with ``ops`` applied in order; a 400 naming the failing operation."""
    try:
        patched: dict[str, Any] = jsonpatch.apply_patch(
            document, [op.as_json_patch() for op in ops]
        )
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
        raise bad_request(_failure(document, ops)) from None
    _check_result(document, patched)
    return patched


def _check_result(document: dict[str, Any], patched: dict[str, Any]) -> None:
    """The document a patch leaves obeys what a request body must: no deeper than
    ``api.max_json_depth`` levels below its fields, no larger than a request body
    (``api.max_request_body_size``), only values that can be stored and read back.
    Checked on the result, since a patch of small operations, each adding to what the
    last one built, can build what no single body could carry.

    Only the fields the patch changed are checked, and a document already over the
    size limit may shrink: a row stored before a limit was lowered can still be
    repaired by PATCH (and read, and deleted)."""
    for name, value in patched.items():
        if name in document and document[name] == value:
            continue
        try:
            check_storable(value, where=name, depth=1)
        except ValueError as exc:
            raise bad_request(f"The patch leaves an invalid document: {exc}") from None
    try:
        size = len(orjson.dumps(patched))
    except (TypeError, orjson.JSONEncodeError):
        raise bad_request("The patch leaves a document that cannot be stored") from None
    limit = BODY_LIMITS.get().max_document
    if size > limit and size >= _size(document):
        raise bad_request(
            f"The patch leaves a document of {size} bytes; at most {limit} are allowed"
        )


def _size(document: dict[str, Any]) -> int:
    try:
        return len(orjson.dumps(document))
    except (TypeError, orjson.JSONEncodeError):
        return 0


def _failure(document: dict[str, Any], ops: list[PatchOperation]) -> str:
    """The message for a patch that failed: which operation, from its path alone.

    Only on the error path are the operations replayed one at a time, to
    find the one that failed.
    """
    shown = [shown_operation(o) for o in ops]
    result = document
    reason = "it could not be applied"
    for op in ops:
        try:
            jsonpointer.JsonPointer(op.path)
        except jsonpointer.JsonPointerException:
            reason = f"{op.path} is not a valid JSON pointer"
            break
        try:
            result = jsonpatch.apply_patch(result, [op.as_json_patch()])
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
            if op.op == "add":
                reason = f"cannot add at {op.path}: its parent does not exist"
            else:
                reason = f"cannot {op.op} {op.path}: it does not exist"
            break
    return f"Couldn't apply patch '{shown}'. Reason: {reason}"
