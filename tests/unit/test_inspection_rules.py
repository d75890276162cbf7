"""The inspection rules engine on its own: reading rules, references, operators, order."""

from __future__ import annotations

import contextlib
import copy
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metalforge.inspection_rules import inspector, references
from metalforge.inspection_rules.actions import Subject
from metalforge.inspection_rules.engine import RulesFailed, apply
from metalforge.inspection_rules.grammar import ACTIONS, CONDITIONS, Rule, RuleInvalid, parse_rule

INVENTORY: dict[str, Any] = {
    "cpu": {"count": 8, "model_name": "Xeon Gold 6338", "architecture": "x86_64"},
    "memory": {"physical_mb": 65536},
    "system_vendor": {"product_name": "PowerEdge R650", "manufacturer": "Dell"},
    "bmc_address": "10.0.0.15",
    "interfaces": [{"name": "eno1", "mac_address": "52:54:00:12:34:56"}],
    "disks": [{"name": "/dev/sda", "size": 480 * 1024**3}],
    "boot": {"current_boot_mode": "uefi"},
    "secrets": {"bmc_password": "hunter2"},
}
PORT = "1be26c0b-03f2-4d2d-ae87-c02d7f33c123"


def subject(**node: Any) -> Subject:
    fields = {
        "uuid": "9e4a4c1d-8f0e-4b8f-a6d2-7f1f1b3c0001",
        "name": "node-1",
        "driver": "redfish",
        "properties": {},
        "driver_info": {"redfish_password": "s3cret"},
        "extra": {},
        **node,
    }
    return Subject(
        node=fields,
        traits=[],
        ports={PORT: {"uuid": PORT, "address": "52:54:00:12:34:56", "extra": {}}},
        inventory=copy.deepcopy(INVENTORY),
        plugin_data={},
    )


def rule(
    actions: list[dict[str, Any]], conditions: list[dict[str, Any]] | None = None, **kw: Any
) -> Rule:
    return parse_rule({"actions": actions, "conditions": conditions or [], **kw})


# -- reading rules ------------------------------------------------------------------


def test_a_rule_keeps_its_arguments_as_given_to_show_them_back() -> None:
    """Ironic's API suite posts list arguments and loops, and reads them back unchanged."""
    conditions = [
        {
            "op": "eq",
            "args": ["{inventory.system.product_name}", "{item}"],
            "loop": ["product_name_1", "product_name_2"],
            "multiple": "any",
        }
    ]
    actions = [
        {
            "op": "set-attribute",
            "args": ["{item[path]}", "{item[value]}"],
            "loop": [{"path": "/driver_info/ipmi_username", "value": "admin"}],
        }
    ]
    parsed = parse_rule({"conditions": conditions, "actions": actions})
    assert parsed.shown_conditions == conditions
    assert parsed.shown_actions == actions
    # eq, lt and gt given a list compare the list.
    assert parsed.conditions[0].args == {
        "values": ["{inventory.system.product_name}", "{item}"],
        "force_strings": False,
    }
    plain = parse_rule(
        {"conditions": [{"op": "eq", "args": ["{{ inventory.cpu.count }}", 8]}],
         "actions": [{"op": "log", "args": ["CPU model updated via rule."]}]}
    )  # fmt: skip
    assert plain.shown_conditions == [{"op": "eq", "args": ["{{ inventory.cpu.count }}", 8]}]
    assert (plain.priority, plain.phase, plain.sensitive) == (0, "main", False)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"actions": []}, "at least one action"),
        ({"conditions": []}, "actions is required"),
        ({"actions": [{"op": "log", "args": {"msg": "x"}}], "priority": -1}, "negative"),
        ({"actions": [{"op": "log", "args": {"msg": "x"}}], "priority": 10000}, "9999"),
        ({"actions": [{"op": "log", "args": {"msg": "x"}}], "priority": 5000.5}, "integer"),
        ({"actions": [{"op": "log", "args": {"msg": "x"}}], "phase": "early"}, "Invalid phase"),
        ({"actions": [{"op": "log", "args": {"msg": "x"}}], "scope": "x"}, "unknown field"),
        ({"actions": [{"op": "launch", "args": {}}]}, "unknown op 'launch'"),
        ({"actions": [{"op": "log", "args": {}}]}, "missing required argument(s): msg"),
        ({"actions": [{"op": "log", "args": {"msg": "x", "colour": 1}}]}, "unexpected"),
        ({"actions": [{"op": "log", "args": "x"}]}, "list or an object"),
        ({"actions": [{"op": "log", "args": {"msg": "x", "level": "loud"}}]}, "level"),
        (
            {"actions": [{"op": "log", "args": {"msg": "x"}}],
             "conditions": [{"op": "matches", "args": {"value": "x", "regex": "("}}]},
            "invalid regular expression",
        ),
        (
            {"actions": [{"op": "log", "args": {"msg": "x"}}],
             "conditions": [{"op": "matches", "args": {"value": "x", "regex": r"(a)\1"}}]},
            "no backreferences or lookaround",
        ),
        (
            {"actions": [{"op": "log", "args": {"msg": "x"}}],
             "conditions": [{"op": "contains", "args": {"value": "x", "regex": "a(?=b)"}}]},
            "no backreferences or lookaround",
        ),
        (
            {"actions": [{"op": "log", "args": {"msg": "x"}}],
             "conditions": [{"op": "in-net", "args": {"address": "x", "subnet": "10.0/99"}}]},
            "not a subnet",
        ),
        ({"actions": [{"op": "log", "args": {"msg": "{inventry[cpu]}"}}]}, "'inventry'"),
        ({"actions": [{"op": "log", "args": {"msg": "{item}"}}]}, "only in a loop"),
        ({"actions": [{"op": "log", "args": {"msg": "{inventory!r}"}}]}, "not supported"),
        ({"actions": [{"op": "set-attribute", "args": ["/", "y"]}]}, "path must name a key"),
        ({"actions": [{"op": "api-call", "args": {"url": "http://x"}}]}, "not supported"),
        (
            {"actions": [{"op": "log", "args": {"msg": "x"}, "loop": list(range(1001))}]},
            "at most 1000",
        ),
        ({"actions": [{"op": "log", "args": {"msg": "x"}, "invert": True}]}, "unknown key"),
    ],
)  # fmt: skip
def test_a_bad_rule_is_refused_naming_what_is_wrong(body: dict[str, Any], message: str) -> None:
    with pytest.raises(RuleInvalid) as raised:
        parse_rule(body)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "action",
    [
        {"op": "log", "args": {"msg": "{node.instance_uuid} {node.driver_internal_info}"}},
        {"op": "log", "args": {"msg": "{node.__class__}"}},
        {"op": "set-attribute", "args": ["/driver", "idrac"]},
        {"op": "set-attribute", "args": ["/name/x", "y"]},
        {"op": "set-attribute", "args": ["/provision_state", "active"]},
    ],
)
def test_a_rule_ironic_stores_is_stored(action: dict[str, Any]) -> None:
    """Ironic checks a rule's operators and arguments when it is written, not which node
    fields it reads or writes; what cannot be read or written is found when it runs."""
    parse_rule({"actions": [action]})


def test_built_in_rules_may_have_any_priority() -> None:
    body = {"actions": [{"op": "log", "args": {"msg": "x"}}], "priority": 20000}
    assert parse_rule(body, built_in=True).priority == 20000


# -- references ----------------------------------------------------------------------


def test_a_whole_object_a_reference_names_shows_no_secret() -> None:
    """``{node[driver_info]}`` once printed the BMC password; no action can copy one now."""
    target = subject(
        driver_info={
            "redfish_password": "s3cret",
            "redfish_address": "https://10.0.0.9",
            "deploy_kernel": "http://user:kernel-pw@images.example/vmlinuz",
            "nested": {"ipmi_password": "t0p"},
        }
    )
    actions = [
        {"op": "set-attribute", "args": {"path": "/extra/copy", "value": "{node[driver_info]}"}},
        {
            "op": "set-attribute",
            "args": {"path": "/extra/url", "value": "{node.driver_info.deploy_kernel}"},
        },
        {"op": "set-attribute", "args": {"path": "/properties/inv", "value": "{inventory}"}},
        {"op": "log", "args": {"msg": "{node}"}},
    ]
    inventory = cast(dict[str, Any], target.inventory)
    inventory["bmc"] = {"bmc_password": "from-the-report"}
    applied = apply([rule(actions)], target)
    assert applied[0].matched
    shown = repr((target.node["extra"], target.node["properties"], applied))
    for secret in ("s3cret", "kernel-pw", "t0p", "from-the-report"):
        assert secret not in shown
    assert "https://10.0.0.9" in target.node["extra"]["copy"]


def test_references_read_data_only_and_mask_secrets() -> None:
    scope = references.Scope(INVENTORY, {"extra": [1, 2]}, {"uuid": "u-1", "driver_info": {}})
    render = references.render
    assert render("{inventory[cpu][count]} cpus", scope) == "8 cpus"
    assert render("{inventory.cpu.model_name}", scope) == "Xeon Gold 6338"
    assert render("{inventory[interfaces][0][name]}", scope) == "eno1"
    assert render("{plugin_data[extra][1]}", scope) == "2"
    assert render("{node.uuid}", scope) == "u-1"
    # A node field no rule reads stays as written, as Ironic leaves what it cannot format.
    assert render("{node.driver_internal_info}", scope) == "{node.driver_internal_info}"
    assert render("{node.__class__}", scope) == "{node.__class__}"
    assert render("{{literal}}", scope) == "{literal}"
    assert render("{inventory[secrets][bmc_password]}", scope) == "******"
    assert render("{inventory[nothing]}", scope) == "{inventory[nothing]}"
    assert references.render_or_none("{inventory[nothing]}", scope) is None
    assert render({"k": ["{inventory[bmc_address]}"]}, scope) == {"k": ["10.0.0.15"]}
    assert render(8, scope) == 8


# -- operators and the engine ----------------------------------------------------------


def op(operator: str, **args: Any) -> dict[str, Any]:
    return {"op": operator, "args": args}


MODEL = "{inventory[cpu][model_name]}"
PRODUCT = "{inventory[system_vendor][product_name]}"
R6X0 = ["PowerEdge R640", "PowerEdge R650"]


@pytest.mark.parametrize(
    ("condition", "holds"),
    [
        (op("eq", values=["{inventory[cpu][count]}", "8"]), True),
        (op("eq", values=[8, 8]), True),
        (op("!eq", values=[8, 8]), False),
        (op("gt", values=[16, 8, 4]), True),
        (op("lt", values=[1, 3, 2]), False),
        (op("lt", values=["{inventory[memory][physical_mb]}", 131072]), True),
        (op("is-empty", value="{inventory[missing]}"), True),
        (op("is-empty", value=MODEL), False),
        (op("is-none", value="{inventory[missing]}"), True),
        (op("is-true", value="yes"), True),
        (op("is-false", value=0), True),
        (op("in-net", address="{inventory[bmc_address]}", subnet="10.0.0.0/24"), True),
        (op("in-net", address="not-an-ip", subnet="10.0.0.0/24"), False),
        (op("matches", value=MODEL, regex="Xeon.*"), True),
        (op("matches", value=MODEL, regex="Gold"), False),
        (op("contains", value=MODEL, regex="Gold"), True),
        (op("one-of", value="{inventory[boot][current_boot_mode]}", values=["bios", "uefi"]), True),
        ({**op("eq"), "args": [PRODUCT, "{item}"], "loop": R6X0, "multiple": "any"}, True),
        ({**op("eq"), "args": [PRODUCT, "{item}"], "loop": R6X0, "multiple": "all"}, False),
        ({**op("eq", values=[PRODUCT, "{item}"]), "loop": R6X0[::-1], "multiple": "last"}, False),
    ],
)
def test_conditions(condition: dict[str, Any], holds: bool) -> None:
    target = subject()
    applied = apply(
        [rule([{"op": "add-trait", "args": {"name": "CUSTOM_X"}}], [condition])], target
    )
    assert applied[0].matched is holds
    assert (target.traits == ["CUSTOM_X"]) is holds


def test_actions_change_the_subject() -> None:
    target = subject(properties={"capabilities": "boot_mode:bios"})
    mac = "52:54:00:12:34:56"
    actions = [
        op("set-attribute", path="/properties/cpu_model", value=MODEL),
        {"op": "set-attribute", "args": ["driver_info.redfish_address", "https://{inventory[bmc_address]}"]},
        op("extend-attribute", path="/extra/tags", value="gpu", unique=True),
        op("extend-attribute", path="/extra/tags", value="gpu", unique=True),
        op("del-attribute", path="/driver_info/redfish_password"),
        op("set-capability", name="boot_mode", value="{inventory[boot][current_boot_mode]}"),
        op("set-capability", name="cpu_vt", value="true"),
        op("unset-capability", name="cpu_vt"),
        op("add-trait", name="CUSTOM_GOLD"),
        op("add-trait", name="CUSTOM_TEMP"),
        op("remove-trait", name="CUSTOM_TEMP"),
        op("set-plugin-data", path="rack.row", value="B"),
        op("extend-plugin-data", path="seen", value=1),
        op("unset-plugin-data", path="rack.row"),
        op("set-port-attribute", port_id=mac, path="/physical_network", value="fabric-a"),
        op("set-port-attribute", port_id=PORT, path="/extra/switch", value="leaf-1"),
        op("log", msg="{inventory[cpu][count]} cpus", level="WARNING"),
    ]  # fmt: skip
    applied = apply([rule(actions, description="fleet facts")], target)
    node = target.node
    assert node["properties"]["cpu_model"] == "Xeon Gold 6338"
    assert node["properties"]["capabilities"] == "boot_mode:uefi"
    assert node["driver_info"] == {"redfish_address": "https://10.0.0.15"}
    assert node["extra"] == {"tags": ["gpu"]}
    assert target.traits == ["CUSTOM_GOLD"]
    assert target.plugin_data == {"rack": {}, "seen": [1]}
    assert target.ports[PORT]["physical_network"] == "fabric-a"
    assert target.ports[PORT]["extra"] == {"switch": "leaf-1"}
    assert target.changed_fields == {"properties", "driver_info", "extra", "traits"}
    assert target.changed_ports == {PORT}
    assert applied[0].log == (("warning", "8 cpus"),)
    assert "fleet facts" in applied[0].rule


def test_looped_actions_run_once_per_item() -> None:
    target = subject()
    actions = [
        {
            "op": "set-attribute",
            "args": ["{item[path]}", "{item[value]}"],
            "loop": [
                {"path": "/driver_info/ipmi_username", "value": "admin"},
                {"path": "/driver_info/ipmi_address", "value": "{inventory[bmc_address]}"},
            ],
        }
    ]
    apply([rule(actions)], target)
    assert target.node["driver_info"]["ipmi_username"] == "admin"
    assert target.node["driver_info"]["ipmi_address"] == "10.0.0.15"


def test_rules_run_by_priority_and_a_fail_stops_them() -> None:
    low = rule([{"op": "add-trait", "args": {"name": "CUSTOM_LOW"}}], priority=1)
    small = rule(
        [{"op": "fail", "args": {"msg": "only {inventory[memory][physical_mb]} MiB"}}],
        [{"op": "lt", "args": {"values": ["{inventory[memory][physical_mb]}", 131072]}}],
        priority=50,
        description="memory floor",
    )
    high = rule([{"op": "add-trait", "args": {"name": "CUSTOM_HIGH"}}], priority=90)
    target = subject()
    with pytest.raises(RulesFailed) as raised:
        apply([low, small, high], target)
    # fail's message is shown as written; the rule is named.
    assert "memory floor" in str(raised.value)
    assert "only {inventory[memory][physical_mb]} MiB" in str(raised.value)
    assert target.traits == ["CUSTOM_HIGH"], "the higher rule ran first, the lower never"


def test_a_rule_that_cannot_run_fails_the_inspection_naming_it() -> None:
    bad = rule([{"op": "set-port-attribute", "args": ["aa:bb:cc:dd:ee:ff", "/extra/x", 1]}])
    with pytest.raises(RulesFailed, match="has no port"):
        apply([bad], subject())
    renamed = rule([{"op": "set-port-attribute", "args": [PORT, "/address", "x"]}])
    with pytest.raises(RulesFailed, match="cannot change a port's address"):
        apply([renamed], subject())
    rendered = rule([{"op": "set-attribute", "args": ["{item}", "x"], "loop": ["/uuid"]}])
    with pytest.raises(RulesFailed, match="cannot change the node's uuid"):
        apply([rendered], subject())
    for path in ("/provision_state", "/name/x", "/driver/x"):
        with pytest.raises(RulesFailed, match=r"cannot change the node's|is text, not an object"):
            apply([rule([{"op": "set-attribute", "args": [path, "x"]}])], subject())
    with pytest.raises(RulesFailed, match="driver cannot be removed"):
        apply([rule([{"op": "del-attribute", "args": ["/driver"]}])], subject())
    escaped = rule([{"op": "set-attribute", "args": ["{{ /properties/cpu_model }}", "x"]}])
    with pytest.raises(RulesFailed, match="does not name a node field"):
        apply([escaped], subject())


# -- ironic-inspector's format ---------------------------------------------------------


def inspector_rule(
    actions: list[dict[str, Any]], conditions: list[dict[str, Any]] | None = None, **kw: Any
) -> Rule:
    return inspector.parse_rule({"actions": actions, "conditions": conditions or [], **kw})


def test_inspector_paths_find_every_value() -> None:
    data = {"macs": ["a", "b"], "interfaces": {"eno1": {"ip": "10.0.0.5"}, "eno2": {"ip": None}}}
    assert inspector.find(inspector.parse_path("macs"), data) == [["a", "b"]]
    assert inspector.find(inspector.parse_path("macs[*]"), data) == ["a", "b"]
    assert inspector.find(inspector.parse_path("macs[1]"), data) == ["b"]
    assert inspector.find(inspector.parse_path("interfaces.*.ip"), data) == ["10.0.0.5", None]
    assert inspector.find(inspector.parse_path("nothing.here"), data) == []


@pytest.mark.parametrize(
    ("conditions", "holds"),
    [
        ([{"op": "eq", "field": "memory_mb", "value": 65536}], True),  # the inventory says
        ([{"op": "ge", "field": "cpus", "value": 8}], True),
        ([{"op": "lt", "field": "memory_mb", "value": 1024.5}], False),
        ([{"op": "ne", "field": "cpu_arch", "value": "x86_64", "invert": True}], True),
        ([{"op": "eq", "field": "inventory.cpu.architecture", "value": "x86_64"}], True),
        ([{"op": "matches", "field": "inventory.cpu.model_name", "value": "Xeon.*"}], True),
        ([{"op": "contains", "field": "inventory.cpu.model_name", "value": "Gold"}], True),
        ([{"op": "in-net", "field": "ipmi_address", "value": "10.0.0.0/24"}], True),
        ([{"op": "is-empty", "field": "inventory.nothing"}], True),
        ([{"op": "eq", "field": "inventory.nothing", "value": 1}], False),
        ([{"op": "eq", "field": "inventory.nothing", "value": 1, "invert": True}], False),
        ([{"op": "eq", "field": "node://driver", "value": "redfish"}], True),
        (
            [{"op": "eq", "field": "inventory.interfaces[*].name", "value": "eth9",
              "multiple": "any"}],
            False,
        ),
        (
            [{"op": "eq", "field": "inventory.interfaces[*].name", "value": "eno1",
              "multiple": "all"}],
            True,
        ),
    ],
)  # fmt: skip
def test_inspector_conditions(conditions: list[dict[str, Any]], holds: bool) -> None:
    target = subject(properties={"cpus": 2, "memory_mb": 32768, "cpu_arch": "aarch64"})
    applied = apply(
        [inspector_rule([{"action": "add-trait", "name": "CUSTOM_X"}], conditions)], target
    )
    assert applied[0].matched is holds


def test_inspector_actions_and_scope() -> None:
    target = subject(properties={"capabilities": "boot_mode:bios,x:1", "inspection_scope": "gpu"})
    actions: list[dict[str, Any]] = [
        {"action": "set-attribute", "path": "/driver_info/ipmi_address",
         "value": "{data[inventory][bmc_address]}"},
        {"action": "set-capability", "name": "x", "value": None},
        {"action": "set-capability", "name": "boot_mode", "value": "uefi"},
        {"action": "extend-attribute", "path": "/extra/seen", "value": "{data[macs]}",
         "unique": True},
        {"action": "add-trait", "name": "CUSTOM_GPU"},
    ]  # fmt: skip
    apply([inspector_rule(actions, scope="gpu")], target)
    assert target.node["driver_info"]["ipmi_address"] == "10.0.0.15"
    assert target.node["properties"]["capabilities"] == "boot_mode:uefi"
    assert target.traits == ["CUSTOM_GPU"]
    other = subject(properties={"inspection_scope": "storage"})
    assert apply([inspector_rule(actions, scope="gpu")], other)[0].matched is False


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"actions": []}, "should be non-empty"),
        ({"actions": [{"action": "explode"}]}, "Validation failed for actions"),
        ({"actions": [{"action": "fail"}]}, "missing required parameter(s): message"),
        ({"actions": [{"action": "fail", "message": "x", "colour": 1}]}, "unexpected"),
        (
            {"actions": [{"action": "fail", "message": "x"}],
             "conditions": [{"op": "eq", "field": "ftp://x", "value": 1}]},
            "Unsupported scheme for field: ftp",
        ),
        (
            {"actions": [{"action": "fail", "message": "x"}],
             "conditions": [{"op": "matches", "field": "x", "value": "("}]},
            "invalid regular expression",
        ),
        (
            {"actions": [{"action": "fail", "message": "x"}],
             "conditions": [{"op": "eq", "field": "a..b", "value": 1}]},
            "Unable to parse field JSON path",
        ),
        ({"actions": [{"action": "fail", "message": "x"}], "scope": "s" * 256}, "Invalid scope"),
    ],
)  # fmt: skip
def test_a_bad_inspector_rule_is_refused(body: dict[str, Any], message: str) -> None:
    with pytest.raises(RuleInvalid) as raised:
        inspector.parse_rule(body)
    assert message in str(raised.value)


# -- hostile input -----------------------------------------------------------------------


BACKTRACKER = "(a+)+$"
"""A pattern Python's ``re`` needs minutes for against a long run of ``a`` and a ``b``."""


def test_a_backtracking_pattern_runs_in_linear_time_on_a_hostile_report() -> None:
    """With a backtracking engine this test would not end (pytest's timeout fails it)."""
    target = subject()
    target.inventory["cpu"]["model_name"] = "a" * 50_000 + "b"
    for operator in ("matches", "contains"):
        condition = op(operator, value=MODEL, regex=BACKTRACKER)
        trait = [{"op": "add-trait", "args": {"name": "CUSTOM_X"}}]
        assert apply([rule(trait, [condition])], target)[0].matched is False
    dialect = inspector_rule(
        [{"action": "add-trait", "name": "CUSTOM_X"}],
        [{"op": "matches", "field": "inventory.cpu.model_name", "value": BACKTRACKER}],
    )
    assert apply([dialect], target)[0].matched is False


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
OPS = st.sampled_from([*CONDITIONS, *(f"!{op}" for op in CONDITIONS), *ACTIONS, "nope"])
TEMPLATES = st.sampled_from(
    ["{inventory[cpu][count]}", "{item}", "{node.uuid}", "{plugin_data[x]}", "{{", "}", "{", "x"]
)


@settings(max_examples=300, deadline=None)
@given(
    body=st.fixed_dictionaries(
        {},
        optional={
            "conditions": st.lists(
                st.fixed_dictionaries(
                    {"op": OPS},
                    optional={
                        "args": JSON | st.lists(TEMPLATES | JSON),
                        "loop": JSON,
                        "multiple": JSON,
                    },
                ),
                max_size=3,
            ),
            "actions": st.lists(
                st.fixed_dictionaries(
                    {"op": OPS},
                    optional={
                        "args": JSON | st.dictionaries(st.text(max_size=8), TEMPLATES | JSON),
                        "loop": JSON,
                    },
                ),
                max_size=3,
            ),
            "priority": JSON,
            "phase": JSON,
            "sensitive": JSON,
            "description": JSON,
        },
    ),
    inventory=st.dictionaries(st.text(max_size=8), JSON, max_size=5),
)
def test_any_rule_is_refused_or_runs_and_any_report_only_fails_it(
    body: dict[str, Any], inventory: dict[str, Any]
) -> None:
    """Whatever a client stores and whatever a ramdisk reports: a ``RuleInvalid`` or a
    rule, and running it changes the subject or fails the inspection, nothing else."""
    try:
        parsed = parse_rule(body)
    except RuleInvalid:
        return
    target = subject()
    target.inventory = inventory
    with contextlib.suppress(RulesFailed):
        apply([parsed], target)


@settings(max_examples=200, deadline=None)
@given(
    body=st.fixed_dictionaries(
        {},
        optional={
            "conditions": st.lists(
                st.fixed_dictionaries(
                    {"op": OPS, "field": st.text(max_size=12) | JSON},
                    optional={"value": JSON, "invert": JSON, "multiple": JSON},
                ),
                max_size=3,
            ),
            "actions": st.lists(
                st.fixed_dictionaries(
                    {"action": OPS},
                    optional={"message": JSON, "path": JSON, "value": JSON, "name": JSON},
                ),
                max_size=3,
            ),
            "scope": JSON,
            "uuid": JSON,
        },
    ),
    inventory=st.dictionaries(st.text(max_size=8), JSON, max_size=5),
)
def test_any_inspector_rule_is_refused_or_runs(
    body: dict[str, Any], inventory: dict[str, Any]
) -> None:
    try:
        parsed = inspector.parse_rule(body)
    except RuleInvalid:
        return
    target = subject()
    target.inventory = inventory
    with contextlib.suppress(RulesFailed):
        apply([parsed], target)
