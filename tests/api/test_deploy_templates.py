"""Deploy templates: the ``/v1/deploy_templates`` resource, and deployments they shape.

The resource's shape, validation and version gating run on SQLite; the
deployments (a conductor runs the plan) on SQLite and PostgreSQL. Templates
are selected by the traits in ``instance_info.traits``, which must be traits
of the node.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.api import (
    LATEST,
    bios_of,
    error_text,
    get_node,
    make_available,
    provision,
    version,
    wait_for_state,
)
from tests.support.stack import Stack

RAID1 = {"logical_disks": [{"raid_level": "1", "size_gb": "MAX", "is_root_volume": True}]}
RAID0 = {"logical_disks": [{"raid_level": "0", "size_gb": "MAX", "is_root_volume": True}]}


def _step(name: str, priority: Any, **args: Any) -> dict[str, Any]:
    interface, step = name.split(".")
    return {"interface": interface, "step": step, "args": args, "priority": priority}


RAID1_STEP = _step("raid.apply_configuration", 90, raid_config=RAID1)
VMX_ON = _step("bios.apply_configuration", 95, settings=[{"name": "VMX", "value": "on"}])


def _create(client: TestClient, name: str, *steps: dict[str, Any], **extra: Any) -> Any:
    return client.post(
        "/v1/deploy_templates", json={"name": name, "steps": list(steps), **extra}, headers=LATEST
    )


def _template(client: TestClient, name: str, *steps: dict[str, Any]) -> dict[str, Any]:
    response = _create(client, name, *steps)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _history(client: TestClient, ident: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/nodes/{ident}/history?detail=true", headers=LATEST)
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["history"]
    return events


def _with_traits(client: TestClient, node: dict[str, Any], *traits: str) -> None:
    """Give the node ``traits`` and request them for its next deployment."""
    response = client.put(
        f"/v1/nodes/{node['uuid']}/traits", json={"traits": list(traits)}, headers=LATEST
    )
    assert response.status_code == 204, response.text
    _request_traits(client, node, *traits)


def _request_traits(client: TestClient, node: dict[str, Any], *traits: str) -> None:
    patch = [{"op": "add", "path": "/instance_info/traits", "value": list(traits)}]
    response = client.patch(f"/v1/nodes/{node['uuid']}", json=patch, headers=LATEST)
    assert response.status_code == 200, response.text


def _plan_event(client: TestClient, ident: str) -> str:
    plans: list[str] = [
        e["event"] for e in _history(client, ident) if e["event_type"] == "deploy_plan"
    ]
    assert plans, "no deploy plan recorded"
    return plans[-1]


# --- the resource -----------------------------------------------------------------------------


def test_create_show_list_patch_delete(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    response = _create(
        client,
        "CUSTOM_RAID1",
        {**RAID1_STEP, "priority": "90"},
        extra={"team": "storage"},
        description="not stored",
    )
    assert response.status_code == 201, response.text
    created = response.json()
    uuid = created["uuid"]
    assert response.headers["Location"].endswith(f"/v1/deploy_templates/{uuid}")
    assert created["name"] == "CUSTOM_RAID1"
    assert created["steps"] == [{**RAID1_STEP, "priority": "90"}]  # echoed as given
    assert created["extra"] == {"team": "storage"}
    assert "description" not in created
    assert created["updated_at"] is None
    assert {link["rel"] for link in created["links"]} == {"self", "bookmark"}

    for ident in (uuid, "CUSTOM_RAID1"):
        shown = client.get(f"/v1/deploy_templates/{ident}", headers=LATEST).json()
        assert shown["steps"] == [RAID1_STEP]  # an integer from now on
    fields = client.get(f"/v1/deploy_templates/{uuid}?fields=name,steps", headers=LATEST).json()
    assert set(fields) == {"name", "steps", "links"}

    _template(client, "CUSTOM_BIOS_VMX_ON", VMX_ON)
    listed = client.get("/v1/deploy_templates", headers=LATEST).json()
    assert [set(t) for t in listed["deploy_templates"]] == [{"uuid", "name", "links"}] * 2
    detailed = client.get("/v1/deploy_templates?detail=true", headers=LATEST).json()
    assert detailed["deploy_templates"][0]["steps"] == [RAID1_STEP]
    page = client.get("/v1/deploy_templates?limit=1&sort_key=name", headers=LATEST).json()
    assert [t["name"] for t in page["deploy_templates"]] == ["CUSTOM_BIOS_VMX_ON"]
    following = page["next"].split("/v1/", 1)[1]
    rest = client.get(f"/v1/{following}", headers=LATEST).json()
    assert [t["name"] for t in rest["deploy_templates"]] == ["CUSTOM_RAID1"]

    delete_first = _step("raid.delete_configuration", 95)
    patched = client.patch(
        f"/v1/deploy_templates/{uuid}",
        json=[
            {"op": "add", "path": "/steps/-", "value": delete_first},
            {"op": "replace", "path": "/name", "value": "CUSTOM_RAID1_CLEAN"},
            {"op": "add", "path": "/extra/owner", "value": "ops"},
        ],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert body["name"] == "CUSTOM_RAID1_CLEAN"
    assert body["steps"] == [RAID1_STEP, delete_first]
    assert body["extra"] == {"team": "storage", "owner": "ops"}
    assert body["updated_at"] is not None

    assert client.delete(f"/v1/deploy_templates/{uuid}", headers=LATEST).status_code == 204
    gone = client.get(f"/v1/deploy_templates/{uuid}", headers=LATEST)
    assert gone.status_code == 404
    assert f"Deploy template {uuid} could not be found" in error_text(gone)


def test_duplicate_name_or_uuid_is_a_conflict(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    first = _template(client, "CUSTOM_RAID1", RAID1_STEP)
    again = _create(client, "CUSTOM_RAID1", RAID1_STEP)
    assert again.status_code == 409
    assert error_text(again) == "A deploy template with name CUSTOM_RAID1 already exists."
    same_uuid = _create(client, "CUSTOM_OTHER", RAID1_STEP, uuid=first["uuid"])
    assert same_uuid.status_code == 409
    _template(client, "CUSTOM_OTHER", RAID1_STEP)
    rename = client.patch(
        "/v1/deploy_templates/CUSTOM_OTHER",
        json=[{"op": "replace", "path": "/name", "value": "CUSTOM_RAID1"}],
        headers=LATEST,
    )
    assert rename.status_code == 409


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "raid1", "steps": [RAID1_STEP]}, "must be a valid trait name"),
        ({"name": "CUSTOM_lower", "steps": [RAID1_STEP]}, "must be a valid trait name"),
        ({"name": "CUSTOM_X", "steps": []}, "steps"),
        ({"name": "CUSTOM_X"}, "'steps' is a required property"),
        ({"name": "CUSTOM_X", "steps": [RAID1_STEP, RAID1_STEP]}, "Duplicate deploy steps"),
        ({"name": "CUSTOM_X", "steps": [{**RAID1_STEP, "order": 1}]}, "'order' was unexpected"),
        ({"name": "CUSTOM_X", "steps": [{**RAID1_STEP, "interface": "boot"}]}, "interface"),
        ({"name": "CUSTOM_X", "steps": [{**RAID1_STEP, "priority": -1}]}, "priority"),
        ({"name": "CUSTOM_X", "steps": [{**RAID1_STEP, "priority": "high"}]}, "priority"),
        ({"name": "CUSTOM_X", "steps": [{**RAID1_STEP, "priority": True}]}, "priority"),
        ({"name": "CUSTOM_X", "steps": [{**RAID1_STEP, "priority": "²"}]}, "priority"),
        ({"name": "CUSTOM_X", "steps": [{**RAID1_STEP, "priority": 2**31}]}, "priority"),
        ({"name": "CUSTOM_X", "steps": [{**RAID1_STEP, "args": []}]}, "args"),
        (
            {"name": "CUSTOM_X", "steps": [{"interface": "raid", "step": "x", "priority": 1}]},
            "args",
        ),
        (
            {"name": "CUSTOM_X", "steps": [RAID1_STEP], "uuid": "nope"},
            "Expected UUID for uuid: nope",
        ),
        ({"name": "CUSTOM_X", "steps": [RAID1_STEP], "colour": "red"}, "'colour' was unexpected"),
    ],
)
def test_invalid_templates_are_refused(
    sqlite_stack: Stack, body: dict[str, Any], message: str
) -> None:
    response = sqlite_stack.client.post("/v1/deploy_templates", json=body, headers=LATEST)
    assert response.status_code == 400, response.text
    assert message in error_text(response)


@pytest.mark.parametrize(
    ("operation", "message"),
    [
        ({"op": "replace", "path": "/uuid", "value": "x"}, "Cannot patch /uuid"),
        ({"op": "add", "path": "/steps/-", "value": RAID1_STEP}, "Duplicate deploy steps"),
        ({"op": "replace", "path": "/steps", "value": []}, "Invalid deploy template"),
        ({"op": "replace", "path": "/name", "value": "bad name"}, "valid trait name"),
        ({"op": "remove", "path": "/extra/missing"}, "Couldn't apply patch"),
        ({"op": "add", "path": "/steps/0/colour", "value": 1}, "Invalid deploy template"),
    ],
)
def test_invalid_patches_are_refused(
    sqlite_stack: Stack, operation: dict[str, Any], message: str
) -> None:
    client = sqlite_stack.client
    _template(client, "CUSTOM_RAID1", RAID1_STEP)
    response = client.patch("/v1/deploy_templates/CUSTOM_RAID1", json=[operation], headers=LATEST)
    assert response.status_code == 400, response.text
    assert message in error_text(response)
    assert client.get("/v1/deploy_templates/CUSTOM_RAID1", headers=LATEST).json()["steps"] == [
        RAID1_STEP
    ]


def test_older_versions_do_not_know_deploy_templates(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    _template(client, "CUSTOM_RAID1", RAID1_STEP)
    old = version("1.54")
    assert client.get("/v1/deploy_templates", headers=old).status_code == 404
    assert client.get("/v1/deploy_templates/CUSTOM_RAID1", headers=old).status_code == 404
    for response in (
        client.post(
            "/v1/deploy_templates", json={"name": "CUSTOM_X", "steps": "junk"}, headers=old
        ),
        client.patch("/v1/deploy_templates/CUSTOM_RAID1", json=[], headers=old),
        client.delete("/v1/deploy_templates/CUSTOM_RAID1", headers=old),
    ):
        assert response.status_code == 405, response.text
        assert error_text(response) == "The API version does not allow deploy templates"
    assert "deploy_templates" not in client.get("/v1", headers=old).json()
    assert "deploy_templates" in client.get("/v1", headers=version("1.55")).json()
    assert client.get("/v1/deploy_templates", headers=version("1.55")).status_code == 200


def test_list_parameters_are_checked(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    for query, status in (
        ("colour=red", 400),
        ("sort_key=steps", 400),
        ("fields=nope", 400),
        ("fields=name&detail=true", 400),
        ("limit=0", 400),
        ("marker=5a7e3d0c-1d2f-4a9c-9d44-7c6c1a1f6b10", 400),
    ):
        response = client.get(f"/v1/deploy_templates?{query}", headers=LATEST)
        assert response.status_code == status, (query, response.text)


# --- the step catalogue and plan previews -----------------------------------------------------


def test_catalogue_lists_deploy_steps_and_previews_plans(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = make_available(client)
    _with_traits(client, node, "CUSTOM_RAID1", "CUSTOM_BIOS_VMX_ON", "CUSTOM_PLAIN")
    _template(client, "CUSTOM_RAID1", RAID1_STEP)
    _template(client, "CUSTOM_BIOS_VMX_ON", VMX_ON)
    url = f"/v1/nodes/{node['uuid']}/deploying/steps"

    catalogue = client.get(url, headers=LATEST).json()
    assert "plan" not in catalogue
    by_name = {f"{s['interface']}.{s['step']}": s for s in catalogue["steps"]}
    assert by_name["deploy.write_image"]["priority"] == 80
    assert by_name["raid.apply_configuration"]["priority"] == 0
    assert {a["name"]: a["required"] for a in by_name["raid.apply_configuration"]["args"]} == {
        "raid_config": True,
        "delete_existing": False,
    }
    assert "deploy.erase_devices" not in by_name  # a clean step only

    preview = client.get(f"{url}?traits=CUSTOM_PLAIN,CUSTOM_RAID1,CUSTOM_BIOS_VMX_ON").json()
    assert preview["deploy_templates"] == ["CUSTOM_RAID1", "CUSTOM_BIOS_VMX_ON"]
    assert [(s["interface"], s["step"], s["priority"]) for s in preview["plan"]] == [
        ("deploy", "deploy", 100),
        ("bios", "apply_configuration", 95),
        ("raid", "apply_configuration", 90),
        ("deploy", "write_image", 80),
        ("deploy", "prepare_instance_boot", 60),
        ("deploy", "tear_down_agent", 40),
        ("deploy", "boot_instance", 20),
    ]
    assert preview["plan"][2]["args"] == {"raid_config": RAID1}
    plain = client.get(f"{url}?traits=", headers=LATEST).json()
    assert [s["step"] for s in plain["plan"]] == [
        "deploy",
        "write_image",
        "prepare_instance_boot",
        "tear_down_agent",
        "boot_instance",
    ]

    lacking = client.get(f"{url}?traits=CUSTOM_RAID0", headers=LATEST)
    assert lacking.status_code == 400
    assert "CUSTOM_RAID0 are not traits of the node" in error_text(lacking)
    assert client.get(f"{url}?min_priority=1", headers=LATEST).status_code == 400
    assert client.get("/v1/nodes/nope/deploying/steps", headers=LATEST).status_code == 404


# --- deployments ------------------------------------------------------------------------------


def test_raid1_template_deploys_to_active_with_raid1(stack: Stack) -> None:
    client = stack.client
    _template(client, "CUSTOM_RAID1", RAID1_STEP)
    _template(client, "CUSTOM_RAID0", _step("raid.apply_configuration", 90, raid_config=RAID0))
    node = make_available(client)
    _with_traits(client, node, "CUSTOM_RAID1")
    validated = client.get(f"/v1/nodes/{node['uuid']}/validate", headers=LATEST).json()
    assert validated["deploy"] == {"result": True}

    assert provision(client, node["uuid"], "active").status_code == 202
    done = wait_for_state(client, node["uuid"], "active")
    assert [d["raid_level"] for d in done["raid_config"]["logical_disks"]] == ["1"]
    assert done["target_raid_config"] == RAID1
    assert done["last_error"] is None
    assert _plan_event(client, node["uuid"]) == (
        "deploy plan: deploy.deploy(100), raid.apply_configuration(90), deploy.write_image(80), "
        "deploy.prepare_instance_boot(60), deploy.tear_down_agent(40), deploy.boot_instance(20)"
    )
    events = _history(client, node["uuid"])
    assert "deploy templates applied: CUSTOM_RAID1" in [e["event"] for e in events]
    finished = [
        e["event"].split(" ")[0]
        for e in events
        if e["event_type"] == "deploy_step" and " finished in " in e["event"]
    ]
    assert finished[:3] == ["deploy.deploy", "raid.apply_configuration", "deploy.write_image"]


SEED_MIRROR: dict[str, Any] = {
    "name": "CUSTOM_BM_CONFIG_RAID_DISK_MIRROR",
    "steps": [
        {
            "interface": "raid",
            "step": "create_configuration",
            "args": {
                "logical_disks": [{"size_gb": "MAX", "raid_level": "1", "is_root_volume": True}],
                "delete_configuration": True,
            },
            "priority": 10,
        }
    ],
}


def test_the_seeds_own_raid_template_deploys_as_written(stack: Stack) -> None:
    """Seed 001's example template, verbatim: raid.create_configuration with its disks."""
    client = stack.client
    created = client.post("/v1/deploy_templates", json=SEED_MIRROR, headers=LATEST)
    assert created.status_code == 201, created.text
    node = make_available(client)
    _set = client.put(
        f"/v1/nodes/{node['uuid']}/states/raid",
        json={"logical_disks": [{"size_gb": 10, "raid_level": "0", "is_root_volume": True}]},
        headers=LATEST,
    )
    assert _set.status_code == 204, _set.text
    _with_traits(client, node, "CUSTOM_BM_CONFIG_RAID_DISK_MIRROR")
    validated = client.get(f"/v1/nodes/{node['uuid']}/validate", headers=LATEST).json()
    assert validated["deploy"] == {"result": True}
    assert provision(client, node["uuid"], "active").status_code == 202
    done = wait_for_state(client, node["uuid"], "active")
    assert [d["raid_level"] for d in done["raid_config"]["logical_disks"]] == ["1"]
    assert done["target_raid_config"] == {
        "logical_disks": SEED_MIRROR["steps"][0]["args"]["logical_disks"]
    }
    assert "raid.create_configuration(10)" in _plan_event(client, node["uuid"])


def test_one_template_may_repeat_a_step_with_other_arguments(stack: Stack) -> None:
    """Seed 001: a template's steps need not be distinct; each runs with its own arguments."""
    client = stack.client
    _template(
        client,
        "CUSTOM_BIOS_TWICE",
        _step("bios.apply_configuration", 95, settings=[{"name": "VMX", "value": "on"}]),
        _step("bios.apply_configuration", 94, settings=[{"name": "SRIOV", "value": "on"}]),
    )
    node = make_available(client)
    _with_traits(client, node, "CUSTOM_BIOS_TWICE")
    assert provision(client, node["uuid"], "active").status_code == 202
    wait_for_state(client, node["uuid"], "active")
    assert bios_of(client, node["uuid"]) == {"SRIOV": "on", "VMX": "on"}
    assert "bios.apply_configuration(95), bios.apply_configuration(94)" in _plan_event(
        client, node["uuid"]
    )


def test_validation_checks_every_template_the_node_s_traits_enable(sqlite_stack: Stack) -> None:
    """Seed 001: not only the requested templates; any the node's traits could select."""
    client = sqlite_stack.client
    _template(client, "CUSTOM_RAID1", RAID1_STEP)
    _template(client, "CUSTOM_BIOS_VMX_ON", VMX_ON)
    node = make_available(client, raid_interface="no-raid")
    response = client.put(
        f"/v1/nodes/{node['uuid']}/traits",
        json={"traits": ["CUSTOM_RAID1", "CUSTOM_BIOS_VMX_ON"]},
        headers=LATEST,
    )
    assert response.status_code == 204, response.text
    _request_traits(client, node, "CUSTOM_BIOS_VMX_ON")  # RAID is not requested
    validated = client.get(f"/v1/nodes/{node['uuid']}/validate", headers=LATEST).json()
    assert validated["deploy"]["result"] is False
    assert "deploy template CUSTOM_RAID1" in validated["deploy"]["reason"]
    assert "raid.apply_configuration" in validated["deploy"]["reason"]
    # Without that trait the node validates again.
    removed = client.delete(f"/v1/nodes/{node['uuid']}/traits/CUSTOM_RAID1", headers=LATEST)
    assert removed.status_code == 204
    validated = client.get(f"/v1/nodes/{node['uuid']}/validate", headers=LATEST).json()
    assert validated["deploy"] == {"result": True}


def test_two_templates_and_user_steps_contribute_in_documented_order(stack: Stack) -> None:
    client = stack.client
    _template(client, "CUSTOM_RAID1", RAID1_STEP)
    _template(client, "CUSTOM_BIOS_VMX_ON", VMX_ON)
    node = make_available(client)
    _with_traits(client, node, "CUSTOM_RAID1", "CUSTOM_BIOS_VMX_ON")
    # The request's own step overrides the template's priority: RAID now first.
    override = [_step("raid.apply_configuration", "98", raid_config=RAID1)]
    response = provision(client, node["uuid"], "active", deploy_steps=override)
    assert response.status_code == 202, response.text
    done = wait_for_state(client, node["uuid"], "active")
    assert _plan_event(client, node["uuid"]).startswith(
        "deploy plan: deploy.deploy(100), raid.apply_configuration(98), "
        "bios.apply_configuration(95), deploy.write_image(80)"
    )
    assert bios_of(client, node["uuid"]) == {"VMX": "on"}
    assert done["raid_config"]["logical_disks"][0]["raid_level"] == "1"


def test_a_trait_the_node_lacks_refuses_the_deploy_before_anything_runs(stack: Stack) -> None:
    client = stack.client
    _template(client, "CUSTOM_RAID1", RAID1_STEP)
    node = make_available(client)
    _request_traits(client, node, "CUSTOM_RAID1")
    before = len(_history(client, node["uuid"]))

    validated = client.get(f"/v1/nodes/{node['uuid']}/validate", headers=LATEST).json()
    assert validated["deploy"]["result"] is False
    assert "CUSTOM_RAID1 are not traits of the node" in validated["deploy"]["reason"]
    response = provision(client, node["uuid"], "active")
    assert response.status_code == 400
    assert "CUSTOM_RAID1 are not traits of the node" in error_text(response)
    after = get_node(client, node["uuid"])
    assert (after["provision_state"], after["target_provision_state"]) == ("available", None)
    assert after["raid_config"] == {}
    assert len(_history(client, node["uuid"])) == before


def test_a_template_step_the_driver_lacks_refuses_the_deploy(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    _template(client, "CUSTOM_RAID1", RAID1_STEP)
    node = make_available(client, raid_interface="no-raid")
    _with_traits(client, node, "CUSTOM_RAID1")
    validated = client.get(f"/v1/nodes/{node['uuid']}/validate", headers=LATEST).json()
    assert (
        "deploy template CUSTOM_RAID1: the node does not support the deploy step"
        in (validated["deploy"]["reason"])
    )
    response = provision(client, node["uuid"], "active")
    assert response.status_code == 400
    assert "raid.apply_configuration" in error_text(response)
    moved = [_step("deploy.write_image", 99)]
    _request_traits(client, node)
    response = provision(client, node["uuid"], "active", deploy_steps=moved)
    assert response.status_code == 400
    assert "deploy.write_image is a core deploy step" in error_text(response)
    assert get_node(client, node["uuid"])["provision_state"] == "available"


def test_a_failing_template_step_fails_the_deploy_naming_it(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    _template(client, "CUSTOM_RAID1", RAID1_STEP)
    node = make_available(client, driver_info={"fake_fail_steps": "raid.apply_configuration"})
    _with_traits(client, node, "CUSTOM_RAID1")
    assert provision(client, node["uuid"], "active").status_code == 202
    failed = wait_for_state(client, node["uuid"], "deploy failed")
    assert "raid.apply_configuration" in failed["last_error"]
    assert failed["deploy_step"] == {}


def test_an_asynchronous_template_step_waits_in_wait_call_back(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    _template(client, "CUSTOM_RAID1", RAID1_STEP)
    node = make_available(client, driver_info={"fake_step_delay": 0.3})
    _with_traits(client, node, "CUSTOM_RAID1")
    assert provision(client, node["uuid"], "active").status_code == 202
    waiting = wait_for_state(client, node["uuid"], "wait call-back")
    assert waiting["deploy_step"]["step"] == "apply_configuration"
    done = wait_for_state(client, node["uuid"], "active")
    assert done["raid_config"]["logical_disks"][0]["raid_level"] == "1"


BMO_CUSTOM_DEPLOY = [_step("deploy.install_coreos", 80)]
"""Metal3's custom deploy: a step of the operator's hardware manager, at priority 80."""


def test_a_custom_deploy_may_name_a_step_the_agent_reports_only_once_it_runs(
    sqlite_stack: Stack,
) -> None:
    client = sqlite_stack.client
    node = make_available(client)
    patch = [{"op": "replace", "path": "/deploy_interface", "value": "custom-agent"}]
    assert client.patch(f"/v1/nodes/{node['uuid']}", json=patch, headers=LATEST).status_code == 200

    too_early = provision(
        client, node["uuid"], "active", deploy_steps=[_step("deploy.install_coreos", 100)]
    )
    assert too_early.status_code == 400
    assert (
        "deploy.install_coreos (priority 100) is not a step the deploy interface declares; it "
        "can only be one of the ramdisk agent's deploy steps, which run after deploy.deploy "
        "(priority 100) boots the agent: give it a priority below 100"
    ) in error_text(too_early)
    no_agent = [_step("deploy.deploy", 0), *BMO_CUSTOM_DEPLOY]
    refused = provision(client, node["uuid"], "active", deploy_steps=no_agent)
    assert refused.status_code == 400
    assert "deploy.deploy, which boots the agent, is disabled in this plan" in error_text(refused)
    assert get_node(client, node["uuid"])["provision_state"] == "available"

    response = provision(
        client,
        node["uuid"],
        "active",
        deploy_steps=BMO_CUSTOM_DEPLOY,
        configdrive={"user_data": "ignition"},
    )
    assert response.status_code == 202, response.text
    waiting = wait_for_state(client, node["uuid"], "wait call-back")
    assert waiting["deploy_step"]["step"] == "deploy", "the boot step waits for the agent"
    plans = [e["event"] for e in _history(client, node["uuid"]) if e["event_type"] == "deploy_plan"]
    assert plans == [
        "deploy plan: deploy.deploy(100), deploy.prepare_instance_boot(60), "
        "deploy.tear_down_agent(40), deploy.boot_instance(20)",
        "waiting for the ramdisk agent's deploy steps: deploy.install_coreos(80) from deploy_steps",
    ]


def test_a_deploy_interface_without_an_agent_refuses_a_step_it_lacks(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = make_available(client)
    response = provision(client, node["uuid"], "active", deploy_steps=BMO_CUSTOM_DEPLOY)
    assert response.status_code == 400
    assert "the node does not support the deploy step deploy.install_coreos" in error_text(response)


def test_a_preview_lists_the_agent_steps_apart_from_the_plan(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = make_available(client)
    patch = [{"op": "replace", "path": "/deploy_interface", "value": "custom-agent"}]
    assert client.patch(f"/v1/nodes/{node['uuid']}", json=patch, headers=LATEST).status_code == 200
    _template(client, "CUSTOM_COREOS", _step("deploy.install_coreos", 80))
    _with_traits(client, node, "CUSTOM_COREOS")
    validated = client.get(f"/v1/nodes/{node['uuid']}/validate", headers=LATEST).json()
    assert validated["deploy"] == {"result": True}, "an agent step is judged when it reports"

    url = f"/v1/nodes/{node['uuid']}/deploying/steps?traits=CUSTOM_COREOS"
    preview = client.get(url, headers=LATEST).json()
    assert [s["step"] for s in preview["plan"]] == [
        "deploy",
        "prepare_instance_boot",
        "tear_down_agent",
        "boot_instance",
    ]
    assert preview["agent_steps"] == [
        {"step": "deploy.install_coreos", "priority": 80, "from": "deploy template CUSTOM_COREOS"}
    ]
    assert "agent_steps" not in client.get(url.split("?")[0], headers=LATEST).json()
