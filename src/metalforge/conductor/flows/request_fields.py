"""The optional fields of a provision request, each declared once.

A verb names the fields it takes (``Verb.fields``) and the one it requires
(``Verb.requires``); everything else about a field is here: the microversion
that introduced it, the policy rule a non-empty value needs, and what a
client is told when it gives the field to a verb that does not take it or
leaves out a required one. The route's microversion and policy checks and
the service's field checks all read these values, so a new field is one
declaration (a test checks every ``FlowRequest`` field has one).
"""

from __future__ import annotations

from dataclasses import dataclass

from metalforge import states


@dataclass(frozen=True)
class RequestField:
    """One optional field of ``PUT /v1/nodes/{id}/states/provision``."""

    name: str
    """The field as the client sends it (and as ``FlowRequest`` holds it)."""
    misplaced: str
    """What a client is told when it gives the field to a verb that does not take it."""
    missing: str | None = None
    """What a client is told when a verb that requires the field lacks it."""
    since: tuple[int, int] | None = None
    """The API microversion that introduced the field (older requests get 406)."""
    since_checked_for_every_verb: bool = False
    """An older request giving the field gets 406 whichever verb it names (Ironic checks
    the version before the verb for this field); otherwise only the verbs taking it do."""
    rule: str | None = None
    """A policy rule a non-empty value needs besides the request's own."""
    holds_steps: bool = False
    """A list of steps for the verb's plan: ``FlowRequest.steps`` holds it, keyed by this
    declaration, so a new kind of step needs no field of its own there."""


CLEAN_STEPS = RequestField(
    "clean_steps",
    misplaced=f'"clean_steps" is only valid when setting target provision state to {states.CLEAN}',
    missing=f'"clean_steps" is required when setting target provision state to {states.CLEAN}',
    rule="baremetal:node:set_provision_state:clean_steps",
    holds_steps=True,
)
DEPLOY_STEPS = RequestField(
    "deploy_steps",
    misplaced='"deploy_steps" is only valid when setting target provision '
    f"state to {states.DEPLOY} or {states.REBUILD}",
    since=(1, 69),
    since_checked_for_every_verb=True,
    holds_steps=True,
)
SERVICE_STEPS = RequestField(
    "service_steps",
    misplaced='"service_steps" is only valid with the service target',
    missing=f'"service_steps" is required when setting target provision state to {states.SERVICE}',
    rule="baremetal:node:set_provision_state:service_steps",
    holds_steps=True,
)
DISABLE_RAMDISK = RequestField(
    "disable_ramdisk",
    misplaced='"disable_ramdisk" can only be used with the clean and service targets',
    since=(1, 70),
)
RUNBOOK = RequestField(
    "runbook",
    misplaced='"runbook" is only valid when setting target provision state to any of '
    f"{states.CLEAN}, {states.SERVICE}",
    since=(1, 92),
)
"""A runbook's steps instead of ``clean_steps`` or ``service_steps``; whether the caller
may use it (``baremetal:runbook:use``) depends on the runbook's owner, so the service
asks once it has read the runbook."""
CONFIGDRIVE = RequestField(
    "configdrive",
    misplaced="Adding a config drive is only supported when setting provision "
    f"state to {states.DEPLOY} or {states.REBUILD}",
)
RESCUE_PASSWORD = RequestField(
    "rescue_password",
    misplaced='"rescue_password" is only valid with the rescue target',
    missing='A non-empty "rescue_password" is required when setting target '
    "provision state to rescue",
)

ALL: tuple[RequestField, ...] = (
    CLEAN_STEPS,
    DEPLOY_STEPS,
    SERVICE_STEPS,
    DISABLE_RAMDISK,
    RUNBOOK,
    CONFIGDRIVE,
    RESCUE_PASSWORD,
)
"""Every optional provision field, in the order a request's fields are checked."""
