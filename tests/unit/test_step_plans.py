"""Step ordering, overrides and requested plans (deploy-plan merging: test_deploy_plan.py)."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from metalforge.cli import main as cli_main
from metalforge.conductor import step_plans
from metalforge.config import load_settings
from metalforge.db.flow_progress import StepKind
from metalforge.db.models import Node
from metalforge.drivers import step_declarations
from metalforge.drivers.base import DeployInterface, DriverTask
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.fake import FAKE_HARDWARE
from metalforge.drivers.hardware import ConflictingSteps, DriverRegistry, HardwareType
from metalforge.drivers.step_declarations import clean_step
from metalforge.startup import StartupError, build_registry


def _node() -> Node:
    return Node(uuid="u", driver="fake-hardware", driver_info={}, provision_state="cleaning")


def _supported(kind: str, overrides: dict[str, int] | None = None) -> list[step_plans.Step]:
    registry = DriverRegistry(HARDWARE_TYPES.values())
    return step_plans.supported_steps(registry, _node(), kind, overrides or {})  # type: ignore[arg-type]


def test_clean_steps_are_ordered_by_priority_and_overrides_apply() -> None:
    plan = step_plans.automated_plan(_supported("clean"))
    assert [s.name for s in plan] == ["deploy.erase_devices_metadata", "deploy.erase_devices"]
    overridden = step_plans.automated_plan(
        _supported("clean", {"deploy.erase_devices": 0, "raid.create_configuration": 50})
    )
    assert [s.name for s in overridden] == [
        "deploy.erase_devices_metadata",
        "raid.create_configuration",
    ]


def test_ties_between_interfaces_follow_interface_order() -> None:
    tied = _supported(
        "clean",
        {
            "raid.delete_configuration": 99,
            "bios.apply_configuration": 99,
            "management.reset_bios": 99,
        },
    )
    top = [s.name for s in tied if s.priority == 99]
    assert top == [
        "management.reset_bios",
        "deploy.erase_devices_metadata",
        "bios.apply_configuration",
        "raid.delete_configuration",
    ]


def test_requested_plan_keeps_order_and_checks_arguments() -> None:
    supported = _supported("clean")
    plan = step_plans.requested_plan(
        supported,
        [
            {"interface": "raid", "step": "delete_configuration"},
            {
                "interface": "raid",
                "step": "create_configuration",
                "args": {"create_nonroot_volumes": False},
            },
        ],
    )
    assert [(s.name, dict(s.args)) for s in plan] == [
        ("raid.delete_configuration", {}),
        ("raid.create_configuration", {"create_nonroot_volumes": False}),
    ]
    with pytest.raises(
        step_plans.StepRequestError, match=r"does not support the step deploy\.nope"
    ):
        step_plans.requested_plan(supported, [{"interface": "deploy", "step": "nope"}])
    with pytest.raises(step_plans.StepRequestError, match=r"does not accept argument.*colour"):
        step_plans.requested_plan(
            supported,
            [{"interface": "raid", "step": "delete_configuration", "args": {"colour": 1}}],
        )
    with pytest.raises(step_plans.StepRequestError, match=r"requires argument.*settings"):
        step_plans.requested_plan(supported, [{"interface": "bios", "step": "apply_configuration"}])


class _Clashing(DeployInterface):
    name = "clashing"

    def validate(self, task: DriverTask) -> None:
        return None

    def tear_down(self, task: DriverTask) -> None:
        return None

    @clean_step(priority=10)
    def first(self, task: DriverTask) -> None:
        """One step."""

    @clean_step(priority=10)
    def second(self, task: DriverTask) -> None:
        """Another with the same priority."""


def test_equal_priorities_in_one_interface_stop_start_up() -> None:
    bad = HardwareType("clash", {**FAKE_HARDWARE.supported, "deploy": (_Clashing,)})
    with pytest.raises(ConflictingSteps, match=r"deploy\.first and deploy\.second"):
        DriverRegistry([bad])


@pytest.mark.parametrize("kind", get_args(StepKind))
def test_equal_priorities_are_refused_for_every_kind_of_step(kind: StepKind) -> None:
    """The check covers each kind the flows declare, not a hand-kept pair of them."""

    class Tied(DeployInterface):
        name = "tied"

        def validate(self, task: DriverTask) -> None:
            return None

        def tear_down(self, task: DriverTask) -> None:
            return None

    for method in ("one", "two"):

        def step(self: Tied, task: DriverTask) -> None:
            """A step."""

        declare = step_declarations.StepDecl(kind, "", 20)
        setattr(Tied, method, step_declarations._record(declare)(step))
    bad = HardwareType("tie", {**FAKE_HARDWARE.supported, "deploy": (Tied,)})
    with pytest.raises(ConflictingSteps, match=rf"{kind} steps deploy\.one and deploy\.two"):
        DriverRegistry([bad])


@pytest.mark.parametrize(
    ("setting", "entry", "steps"),
    [
        # erase_devices_metadata is 99 by default, erase_devices 10.
        (
            "clean_step_priority_override",
            "deploy.erase_devices:99",
            r"clean steps deploy\.erase_devices and deploy\.erase_devices_metadata",
        ),
        # The fake deploy interface's core deploy steps: deploy 100, write_image 80.
        (
            "deploy_step_priority_override",
            "deploy.write_image:100",
            r"deploy steps deploy\.deploy and deploy\.write_image",
        ),
        # The same priority in two interfaces is no tie: interfaces run in a fixed order.
        (
            "clean_step_priority_override",
            "raid.delete_configuration:10",
            None,
        ),
    ],
)
def test_an_override_that_ties_two_steps_stops_the_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, entry: str, steps: str | None
) -> None:
    """Through the ``metalforge`` command, as an operator starts it."""
    config = tmp_path / "metalforge.toml"
    config.write_text(
        f'[database]\nurl = "sqlite:///{tmp_path}/db.sqlite"\n'
        f'[conductor]\n{setting} = ["{entry}"]\n'
    )
    if steps is None:  # no tie: the service may start (only its registry is built here)
        settings = load_settings(config)
        build_registry(settings)
        return
    with pytest.raises(StartupError, match=steps + r" both have priority \d+ \(after the op"):
        cli_main(["--config", str(config), "conductor"])
