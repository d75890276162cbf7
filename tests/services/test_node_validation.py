"""Node validation through ``services.node_validation``, without HTTP.

Each interface family answers for itself: supported and valid, invalid
(with why), or not supported. ``deploy`` also plans the deployment the
node's traits select, so a deploy template the node cannot run fails
validation. Validation reads only: the node is left as it was.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import pytest
from sqlalchemy import func, select

from metalforge import states
from metalforge.db.models import DeployTemplate, DeployTemplateStep, Node, NodeHistory
from metalforge.errors import RequestError
from metalforge.services import node_validation
from metalforge.services.context import Services
from metalforge.services.node_validation import VALIDATED, Outcome
from tests.services.conftest import add_node

LATEST = (1, 115)
ALL_VALID = {family: Outcome(True) for family in VALIDATED}


def _add_node(svc: Services, traits: tuple[str, ...] = (), **fields: Any) -> Node:
    return add_node(svc, states.MANAGEABLE, traits, name="rack1-n1", **fields)


def _add_template(svc: Services, name: str, interface: str, step: str, args: Any) -> None:
    with svc.db.write() as session:
        template = DeployTemplate(uuid=str(uuidlib.uuid4()), name=name)
        template.steps = [
            DeployTemplateStep(interface=interface, step=step, args=args, priority=50)
        ]
        session.add(template)


def _epoch_and_history(svc: Services, node: Node) -> tuple[int, int]:
    with svc.db.read() as session:
        stored = session.get(Node, node.id)
        assert stored is not None
        entries = session.scalar(
            select(func.count()).select_from(NodeHistory).where(NodeHistory.node_id == node.id)
        )
        return stored.epoch, entries or 0


def test_every_interface_of_a_fake_node_is_valid(svc: Services) -> None:
    node = _add_node(svc)
    result = node_validation.validate_node(svc, "rack1-n1", LATEST)
    assert result.node.uuid == node.uuid
    assert result.outcomes == ALL_VALID
    assert _epoch_and_history(svc, node) == (node.epoch, 0), "validation writes nothing"


def test_a_no_interface_is_not_supported_rather_than_invalid(svc: Services) -> None:
    node = _add_node(svc, raid_interface="no-raid", bios_interface="no-bios")
    outcomes = node_validation.validate_node(svc, node.uuid, LATEST).outcomes
    assert outcomes["raid"] == Outcome(None, "not supported (no-raid)")
    assert outcomes["bios"] == Outcome(None, "not supported (no-bios)")
    assert {f: o for f, o in outcomes.items() if f not in ("raid", "bios")} == {
        f: o for f, o in ALL_VALID.items() if f not in ("raid", "bios")
    }


def test_a_driver_that_is_not_enabled_makes_every_interface_invalid(svc: Services) -> None:
    node = _add_node(svc, driver="ipmi")
    outcomes = node_validation.validate_node(svc, node.uuid, LATEST).outcomes
    assert outcomes == {
        family: Outcome(False, "hardware type 'ipmi' is not enabled") for family in VALIDATED
    }


def test_an_interface_the_driver_lacks_is_reported_not_raised(svc: Services) -> None:
    """A node whose raid interface is no longer one its hardware type offers."""
    node = _add_node(svc, raid_interface="hw-raid-9000")
    outcomes = node_validation.validate_node(svc, node.uuid, LATEST).outcomes
    assert outcomes["raid"] == Outcome(
        False, "raid interface 'hw-raid-9000' is not supported by fake-hardware"
    )
    assert outcomes["power"] == Outcome(True)


def test_deploy_is_invalid_when_the_requested_traits_are_not_the_nodes(svc: Services) -> None:
    node = _add_node(svc, traits=("CUSTOM_SSD",), instance_info={"traits": ["CUSTOM_GPU"]})
    outcomes = node_validation.validate_node(svc, node.uuid, LATEST).outcomes
    assert outcomes["deploy"].result is False
    assert "CUSTOM_GPU" in (outcomes["deploy"].reason or "")
    assert {f: o for f, o in outcomes.items() if f != "deploy"} == {
        f: o for f, o in ALL_VALID.items() if f != "deploy"
    }


def test_deploy_is_invalid_when_a_template_of_the_nodes_traits_cannot_run(
    svc: Services,
) -> None:
    """The template is not requested yet: a flavor could ask for it later."""
    settings = {"settings": [{"name": "VMX", "value": "on"}]}
    _add_template(svc, "CUSTOM_VMX", "bios", "apply_configuration", settings)
    node = _add_node(svc, traits=("CUSTOM_VMX",), bios_interface="no-bios")
    outcome = node_validation.validate_node(svc, node.uuid, LATEST).outcomes["deploy"]
    assert outcome.result is False
    assert "CUSTOM_VMX" in (outcome.reason or "")
    assert "bios" in (outcome.reason or "")
    with svc.db.write() as session:
        stored = session.get(Node, node.id)
        assert stored is not None
        stored.bios_interface = "fake"
    fixed = node_validation.validate_node(svc, node.uuid, LATEST).outcomes
    assert fixed["deploy"] == Outcome(True)


def test_a_node_a_conductor_holds_is_validated_all_the_same(svc: Services) -> None:
    node = _add_node(svc, reservation="conductor-1")
    assert node_validation.validate_node(svc, node.uuid, LATEST).outcomes == ALL_VALID
    with svc.db.read() as session:
        assert session.scalar(select(Node.reservation).where(Node.id == node.id)) == "conductor-1"


def test_an_unknown_node_is_404(svc: Services) -> None:
    _add_node(svc)
    with pytest.raises(RequestError) as refused:
        node_validation.validate_node(svc, "rack9-n9", LATEST)
    assert (refused.value.status, refused.value.message) == (
        404,
        "Node rack9-n9 could not be found.",
    )
