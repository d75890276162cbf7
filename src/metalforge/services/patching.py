"""JSON patches, applied by the service that owns the document, against its policy.

Each resource's service declares what a PATCH may touch (``PatchPolicy``:
the top-level fields, the microversion each appeared in, the operations
each takes); the service checks a patch against it before it reads anything,
applies it to the stored document in its transaction, and checks the values
it leaves as a create's would be checked. The API only parses the body into
``Operation`` values.

A failure's message never quotes the stored document: jsonpatch's own
messages do ("member 'x' not found in {...}"), which for a node includes its
BMC credentials. It is built from the failing operation and its path alone;
values the client sent under secret keys are masked too, since error
messages reach logs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonpatch
import jsonpointer
import orjson

from metalforge.errors import RequestError, bad_request, not_acceptable
from metalforge.redaction import MASK, is_secret_key, mask_document
from metalforge.services.documents import BODY_LIMITS, check_storable
from metalforge.services.microversion import Version, fmt

Op = Literal["add", "replace", "remove"]
EVERY_OP: frozenset[Op] = frozenset({"add", "replace", "remove"})


@dataclass(frozen=True, slots=True)
class Operation:
    """One RFC 6902 operation as the client sent it (``test``, ``move`` and ``copy``
    are refused by the API's body model)."""

    op: Op
    path: str
    value: Any = None
    given: bool = False
    """Whether the client sent a ``value`` (a missing one is not ``null``)."""

    @property
    def root(self) -> str:
        """The top-level field the operation touches (``extra`` for ``/extra/a``)."""
        return self.path.lstrip("/").split("/", 1)[0]

    def as_json_patch(self) -> dict[str, Any]:
        """The RFC 6902 operation, with only the members the client gave."""
        operation: dict[str, Any] = {"op": self.op, "path": self.path}
        if self.given:
            operation["value"] = self.value
        return operation


@dataclass(frozen=True, slots=True)
class Patchable:
    """A top-level field a PATCH may touch, at its path or below it (``/extra/a``)."""

    since: Version = (1, 1)
    """The microversion the field appeared in: a patch of it at an older one is a 406."""
    ops: frozenset[Op] = EVERY_OP


@dataclass(frozen=True)
class PatchPolicy:
    """What a PATCH of one kind of resource may touch, checked before anything is read."""

    fields: Mapping[str, Patchable]
    """The patchable fields, in the order a refusal lists them."""
    refusals: Mapping[str, str] = field(default_factory=dict)
    """Fields a patch may not touch with a message of their own (a node's ``traits``)."""

    def check(self, ops: Sequence[Operation], version: Version) -> None:
        """400 for an operation on a field this policy does not list (or with an operation
        it does not take there), 406 for a field this version does not know; the
        first such operation decides."""
        for op in ops:
            root = op.root
            if root in self.refusals:
                raise bad_request(self.refusals[root])
            allowed = self.fields.get(root)
            if allowed is None or op.op not in allowed.ops:
                raise self.refusal(op)
            if version < allowed.since:
                raise not_acceptable(f"Field {root} is not available at API version {fmt(version)}")

    def refusal(self, op: Operation) -> RequestError:
        """The 400 for an operation this policy does not allow, listing what it does."""
        return bad_request(
            f"Cannot patch {op.path}. Only the following can be updated: {', '.join(self.fields)}"
        )


def shown_operation(op: Operation) -> dict[str, Any]:
    """``op`` as it may appear in a message: values under secret keys masked."""
    shown = op.as_json_patch()
    if "value" in shown:
        last = op.path.rstrip("/").rsplit("/", 1)[-1]
        hidden = is_secret_key(last) or last == "configdrive"
        shown["value"] = MASK if hidden else mask_document(shown["value"])
    return shown


def apply(document: dict[str, Any], ops: Sequence[Operation]) -> dict[str, Any]:
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


def _failure(document: dict[str, Any], ops: Sequence[Operation]) -> str:
    """The message for a patch that failed, in Ironic's words: the operation that failed
    (its value masked where secret) and why.

    Only on the error path are the operations replayed one at a time, to
    find the one that failed. jsonpatch's own reason is given when it names only
    the key ("can't remove a non-existent object 'prop'", which clients match
    on); a reason that would print the document it looked in is given without it.
    """
    result = document
    for op in ops:
        shown = shown_operation(op)
        try:
            jsonpointer.JsonPointer(op.path)
        except jsonpointer.JsonPointerException:
            return f"Couldn't apply patch '{shown}'. Reason: {op.path} is not a valid JSON pointer"
        try:
            result = jsonpatch.apply_patch(result, [op.as_json_patch()])
        except jsonpatch.JsonPatchConflict as exc:
            return f"Couldn't apply patch '{shown}'. Reason: {exc}"
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
            parent = op.path.rstrip("/").rsplit("/", 1)[0] or "/"
            return f"Couldn't apply patch '{shown}'. Reason: member {parent} not found"
    every = [shown_operation(o) for o in ops]
    return f"Couldn't apply patch '{every}'. Reason: it could not be applied"
