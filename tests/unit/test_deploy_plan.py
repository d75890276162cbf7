"""The deploy plan's merge rules: defaults, then templates, then the request's steps."""

from __future__ import annotations

from typing import Any

import pytest

from metalforge.conductor import step_plans
from metalforge.conductor.deploy_plan import (
    PlanError,
    Source,
    check_traits,
    merge,
    merge_provisional,
)
from metalforge.db.models import Node
from metalforge.drivers.base import StepsNotKnown
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.hardware import DriverRegistry

CORE = [
    ("deploy.deploy", 100),
    ("deploy.write_image", 80),
    ("deploy.prepare_instance_boot", 60),
    ("deploy.tear_down_agent", 40),
    ("deploy.boot_instance", 20),
]
RAID1 = {"logical_disks": [{"raid_level": "1", "size_gb": "MAX", "is_root_volume": True}]}


def _supported(overrides: dict[str, int] | None = None) -> list[step_plans.Step]:
    node = Node(uuid="u", driver="fake-hardware", driver_info={}, provision_state="deploying")
    return step_plans.supported_steps(
        DriverRegistry(HARDWARE_TYPES.values()), node, "deploy", overrides or {}
    )


def _step(name: str, priority: Any, **args: Any) -> dict[str, Any]:
    interface, step = name.split(".")
    return {"interface": interface, "step": step, "args": args, "priority": priority}


def _template(name: str, *entries: dict[str, Any]) -> Source:
    return Source(f"deploy template {name}", list(entries))


def _names(plan: list[step_plans.Step]) -> list[tuple[str, int]]:
    return [(s.name, s.priority) for s in plan]


def test_defaults_alone_are_the_core_steps_in_ironic_order() -> None:
    assert _names(merge(_supported(), [])) == CORE


def test_optional_steps_are_deploy_steps_at_priority_zero() -> None:
    optional = {s.name: s.priority for s in _supported() if s.interface != "deploy"}
    assert optional == {
        "management.reset_bios": 0,
        "bios.apply_configuration": 0,
        "raid.apply_configuration": 0,
        "raid.create_configuration": 0,
        "raid.delete_configuration": 0,
    }


def test_a_template_enables_a_step_between_core_steps_with_its_arguments() -> None:
    plan = merge(
        _supported(),
        [[_template("CUSTOM_RAID1", _step("raid.apply_configuration", 90, raid_config=RAID1))]],
    )
    assert _names(plan)[:3] == [
        ("deploy.deploy", 100),
        ("raid.apply_configuration", 90),
        ("deploy.write_image", 80),
    ]
    assert dict(plan[1].args) == {"raid_config": RAID1}


def test_user_steps_override_template_priority_and_arguments() -> None:
    template = _template(
        "CUSTOM_BIOS", _step("bios.apply_configuration", 95, settings=[{"name": "a", "value": 1}])
    )
    user = Source("deploy_steps", [_step("bios.apply_configuration", "85", settings=[])])
    plan = merge(_supported(), [[template], [user]])
    bios = [s for s in plan if s.interface == "bios"]
    assert [(s.priority, dict(s.args)) for s in bios] == [(85, {"settings": []})]


def test_priority_zero_disables_a_template_step_and_a_core_step() -> None:
    template = _template("CUSTOM_X", _step("raid.delete_configuration", 70))
    user = Source(
        "deploy_steps",
        [_step("raid.delete_configuration", 0), _step("deploy.boot_instance", 0)],
    )
    plan = merge(_supported(), [[template], [user]])
    assert _names(plan) == CORE[:-1]


def test_repetition_across_templates_runs_each_occurrence_in_priority_order() -> None:
    disk = {"logical_disks": [{"raid_level": "0", "size_gb": 10}]}
    first = _template("CUSTOM_A", _step("raid.apply_configuration", 70, raid_config=RAID1))
    second = _template(
        "CUSTOM_B",
        _step("raid.apply_configuration", 90, raid_config=disk, delete_existing=False),
    )
    plan = merge(_supported(), [[first, second]])
    raid = [(s.priority, dict(s.args)) for s in plan if s.interface == "raid"]
    assert raid == [
        (90, {"raid_config": disk, "delete_existing": False}),
        (70, {"raid_config": RAID1}),
    ]
    assert [s.name for s in plan].index("raid.apply_configuration") == 1


def test_equal_priorities_keep_template_order() -> None:
    a = _template("CUSTOM_A", _step("raid.apply_configuration", 70, raid_config=RAID1))
    b = _template("CUSTOM_B", _step("raid.apply_configuration", 70, raid_config={}))
    plan = merge(_supported(), [[b, a]])
    raid = [dict(s.args)["raid_config"] for s in plan if s.interface == "raid"]
    assert raid == [{}, RAID1]


def test_user_layer_replaces_every_template_occurrence() -> None:
    a = _template("CUSTOM_A", _step("raid.apply_configuration", 70, raid_config=RAID1))
    b = _template("CUSTOM_B", _step("raid.apply_configuration", 60, raid_config=RAID1))
    user = Source("deploy_steps", [_step("raid.apply_configuration", 50, raid_config={})])
    plan = merge(_supported(), [[a, b], [user]])
    assert [(s.priority, dict(s.args)) for s in plan if s.interface == "raid"] == [
        (50, {"raid_config": {}})
    ]


def test_core_steps_cannot_be_reordered_or_repeated() -> None:
    moved = _template("CUSTOM_X", _step("deploy.prepare_instance_boot", 90))
    with pytest.raises(PlanError, match=r"CUSTOM_X: deploy\.prepare_instance_boot is a core"):
        merge(_supported(), [[moved]])
    same = _template("CUSTOM_Y", _step("deploy.write_image", "80"))
    assert _names(merge(_supported(), [[same]])) == CORE
    twice = [_template("CUSTOM_A", _step("deploy.write_image", 80)), same]
    with pytest.raises(PlanError, match="can run only once"):
        merge(_supported(), [twice])


def test_operator_override_moves_the_core_priority_the_rules_compare_with() -> None:
    supported = _supported({"deploy.boot_instance": 10})
    ok = Source("deploy_steps", [_step("deploy.boot_instance", 10)])
    assert _names(merge(supported, [[ok]]))[-1] == ("deploy.boot_instance", 10)
    with pytest.raises(PlanError, match="not moved from priority 10"):
        merge(supported, [[Source("deploy_steps", [_step("deploy.boot_instance", 20)])]])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_step("raid.nope", 10), r"CUSTOM_X: the node does not support the deploy step raid\.nope"),
        (_step("deploy.erase_devices", 10), "does not support the deploy step"),
        (_step("bios.apply_configuration", 10), r"requires argument\(s\) settings"),
        (_step("raid.delete_configuration", 10, colour=1), "does not accept argument"),
        (_step("raid.delete_configuration", -1), "invalid priority"),
        (_step("raid.delete_configuration", True), "invalid priority"),
    ],
)
def test_refusals_name_the_template_and_step(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        merge(_supported(), [[_template("CUSTOM_X", entry)]])


def test_disabling_a_step_needs_none_of_its_arguments() -> None:
    plan = merge(_supported(), [[_template("CUSTOM_X", _step("bios.apply_configuration", 0))]])
    assert _names(plan) == CORE


def test_requested_traits_must_be_the_nodes() -> None:
    check_traits(["CUSTOM_A"], {"CUSTOM_A", "CUSTOM_B"})
    with pytest.raises(PlanError, match="CUSTOM_C are not traits of the node"):
        check_traits(["CUSTOM_A", "CUSTOM_C"], {"CUSTOM_A"})


# -- in-band deploy steps (custom-agent, direct): a provisional plan ---------------------

AGENT_STEPS = [
    {"interface": "deploy", "step": "install_coreos", "priority": 0, "argsinfo": {}},
    {"interface": "deploy", "step": "write_image", "priority": 0, "argsinfo": {}},
    {
        "interface": "deploy",
        "step": "tune",
        "priority": 0,
        "argsinfo": {"level": {"description": "how much", "required": True}},
    },
]
BMO_CUSTOM_DEPLOY = Source("deploy_steps", [_step("deploy.install_coreos", 80)])


def _agent_node(cached: list[dict[str, Any]] | None = None) -> Node:
    info = {} if cached is None else {"agent_cached_deploy_steps": cached}
    return Node(
        uuid="u",
        driver="fake-hardware",
        deploy_interface="custom-agent",
        driver_info={},
        driver_internal_info=info,
        provision_state="deploying",
    )


def _catalogue(node: Node, *, agent_steps: bool, **overrides: int) -> step_plans.Catalogue:
    registry = DriverRegistry(HARDWARE_TYPES.values())
    return step_plans.deploy_catalogue(registry, node, overrides, agent_steps=agent_steps)


def test_custom_agent_declares_no_write_image_and_waits_for_its_agent() -> None:
    catalogue = _catalogue(_agent_node(), agent_steps=False)
    assert "deploy.write_image" not in {s.name for s in catalogue.steps}
    assert catalogue.waiting["deploy"].name == "deploy.deploy"


def test_an_earlier_agents_cached_steps_are_not_read_before_this_agent_boots() -> None:
    catalogue = _catalogue(_agent_node(AGENT_STEPS), agent_steps=False)
    assert not any(s.in_band for s in catalogue.steps)


def test_an_agent_step_sorting_after_the_boot_step_is_deferred_not_refused() -> None:
    catalogue = _catalogue(_agent_node(), agent_steps=False)
    plan, deferred = merge_provisional(catalogue.steps, [[BMO_CUSTOM_DEPLOY]], catalogue.waiting)
    assert [str(d) for d in deferred] == ["deploy.install_coreos(80) from deploy_steps"]
    assert [s.name for s in plan] == [
        "deploy.deploy",
        "deploy.prepare_instance_boot",
        "deploy.tear_down_agent",
        "deploy.boot_instance",
    ]


@pytest.mark.parametrize(
    ("entries", "overrides", "message"),
    [
        (
            [_step("deploy.install_coreos", 100)],
            {},
            r"deploy\.install_coreos \(priority 100\) is not a step the deploy interface "
            r"declares.*after deploy\.deploy \(priority 100\).*below 100",
        ),
        (
            [_step("deploy.install_coreos", 90)],
            {"deploy.deploy": 90},
            r"priority below 90",
        ),
        (
            [_step("deploy.deploy", 0), _step("deploy.install_coreos", 80)],
            {},
            r"deploy\.deploy, which boots the agent, is disabled in this plan",
        ),
        (
            [_step("deploy.install_coreos", 80)],
            {"deploy.deploy": 0},
            r"deploy\.deploy, which boots the agent, is disabled in this plan",
        ),
        ([_step("raid.install_coreos", 80)], {}, "does not support the deploy step"),
        ([_step("deploy.install_coreos", "high")], {}, "invalid priority"),
    ],
)
def test_what_cannot_be_an_agent_step_is_refused_at_once(
    entries: list[dict[str, Any]], overrides: dict[str, int], message: str
) -> None:
    catalogue = _catalogue(_agent_node(), agent_steps=False, **overrides)
    with pytest.raises(PlanError, match=message):
        merge_provisional(catalogue.steps, [[Source("deploy_steps", entries)]], catalogue.waiting)


def test_a_deploy_interface_without_an_agent_refuses_undeclared_steps() -> None:
    node = _agent_node()
    node.deploy_interface = "fake"
    catalogue = _catalogue(node, agent_steps=False)
    assert not catalogue.waiting
    with pytest.raises(PlanError, match=r"does not support the deploy step deploy\.install_coreos"):
        merge_provisional(catalogue.steps, [[BMO_CUSTOM_DEPLOY]], catalogue.waiting)


def test_once_the_agent_reported_the_step_runs_where_it_was_asked() -> None:
    catalogue = _catalogue(_agent_node(AGENT_STEPS), agent_steps=True)
    assert not catalogue.waiting
    plan = merge(catalogue.steps, [[BMO_CUSTOM_DEPLOY]])
    assert _names(plan)[:3] == [
        ("deploy.deploy", 100),
        ("deploy.install_coreos", 80),
        ("deploy.prepare_instance_boot", 60),
    ]


def test_an_agent_step_is_never_a_core_step() -> None:
    node = _agent_node([{**AGENT_STEPS[0], "priority": 70}])
    catalogue = _catalogue(node, agent_steps=True)
    moved = Source(
        "deploy_steps", [_step("deploy.install_coreos", 80), _step("deploy.install_coreos", 75)]
    )
    assert [
        s.priority for s in merge(catalogue.steps, [[moved]]) if s.step == "install_coreos"
    ] == [80, 75]


def test_after_the_agent_reported_a_missing_step_names_what_it_offers() -> None:
    catalogue = _catalogue(_agent_node(AGENT_STEPS), agent_steps=True)
    with pytest.raises(
        PlanError,
        match=r"deploy\.nope; the ramdisk agent offers: deploy\.install_coreos, deploy\.tune, "
        r"deploy\.write_image",
    ):
        merge(catalogue.steps, [[Source("deploy_steps", [_step("deploy.nope", 80)])]])
    with pytest.raises(PlanError, match=r"deploy\.tune requires argument\(s\) level"):
        merge(catalogue.steps, [[Source("deploy_steps", [_step("deploy.tune", 70)])]])


def test_the_agents_steps_are_not_known_without_its_report() -> None:
    with pytest.raises(StepsNotKnown, match="has not reported its deploy steps"):
        _catalogue(_agent_node(), agent_steps=True)
