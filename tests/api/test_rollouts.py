"""``/v1/rollouts``: a change rolled out over fake-hardware nodes in waves.

Most tests advance the rollout themselves (``rollout_waves.advance``, what the
conductors' singleton task calls each round), on a stack whose conductor
advances none (``rollout_interval`` 0), so each round is one the test
chose; the nodes' flows run on the stack's conductor as always. The last
tests let the conductor's own task do it.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from metalforge import cli
from metalforge.db.models import RolloutNode
from metalforge.services import rollout_waves, rollouts
from metalforge.services.context import Services
from metalforge.startup import StartupError
from tests.support.api import (
    LATEST,
    create_node,
    error_text,
    get_node,
    make_available,
    provision,
    wait_for_state,
    wait_until,
)
from tests.support.auth import ADMIN, OTHER_ADMIN, OWNER_ADMIN, basic_auth_settings
from tests.support.stack import Stack, start_stack, test_settings

BIOS = {"component": "bios", "version": "1.0.1", "url": "http://images.example.com/bios"}
BIOS_UPDATE = {"component": "bios", "url": "http://images.example.com/bios"}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    running = start_stack(test_settings(f"sqlite:///{tmp_path}/mf.sqlite", rollout_interval=0))
    try:
        yield running
    finally:
        running.stop()


def _svc(stack: Stack) -> Services:
    svc: Services = stack.app.state.services
    return svc


def _manageable(client: TestClient, name: str, **driver_info: Any) -> str:
    node = create_node(client, name=name, driver_info=driver_info)
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    return str(node["uuid"])


def _create(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/rollouts", json=body, headers=LATEST)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _show(client: TestClient, ident: str) -> dict[str, Any]:
    response = client.get(f"/v1/rollouts/{ident}", headers=LATEST)
    assert response.status_code == 200, response.text
    shown: dict[str, Any] = response.json()
    return shown


def _by_node(shown: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node_uuid"]: n for n in shown["nodes"]}


def _act(client: TestClient, ident: str, what: str) -> Any:
    return client.post(f"/v1/rollouts/{ident}/{what}", headers=LATEST)


def _five_nodes_and_a_baseline(client: TestClient) -> dict[str, str]:
    """n1 to n5, manageable, n3 told to fail its firmware update; baseline ``q4``."""
    uuids = {
        name: _manageable(
            client, name, **({"fake_fail_steps": ["firmware.update"]} if name == "n3" else {})
        )
        for name in ("n1", "n2", "n3", "n4", "n5")
    }
    baseline = client.post(
        "/v1/firmware_baselines", json={"name": "q4", "components": [BIOS]}, headers=LATEST
    )
    assert baseline.status_code == 201, baseline.text
    return uuids


def test_a_baseline_rolls_out_with_a_canary_a_pause_and_a_failure_budget(stack: Stack) -> None:
    client, svc = stack.client, _svc(stack)
    uuids = _five_nodes_and_a_baseline(client)
    created = _create(
        client,
        name="bios-q4",
        action={"baseline": "q4"},
        selector={"drifted_from": "q4"},
        canary=1,
        batch=2,
        max_failures=1,
    )
    assert created["state"] == "pending"
    assert [n["wave"] for n in created["nodes"]] == [0, 1, 1, 2, 2]
    assert (created["node_counts"]["pending"], created["nodes"][0]["verb"]) == (5, "clean")

    rollout_waves.advance(svc)  # the canary starts
    shown = _show(client, "bios-q4")
    assert shown["state"] == "running"
    assert {k: _by_node(shown)[uuids["n1"]][k] for k in ("state", "node_name")} == {
        "state": "running",
        "node_name": "n1",
    }
    wait_for_state(client, uuids["n1"], "manageable")
    rollout_waves.advance(svc)  # the canary succeeded: wait for the operator
    shown = _show(client, "bios-q4")
    assert (shown["state"], shown["paused_reason"]) == ("paused", rollouts.CANARY_DONE)
    assert _by_node(shown)[uuids["n1"]]["state"] == "succeeded"
    assert _by_node(shown)[uuids["n2"]]["state"] == "pending"
    rollout_waves.advance(svc)
    assert _show(client, "bios-q4")["state"] == "paused", "a paused rollout starts nothing"

    assert _act(client, "bios-q4", "resume").json()["state"] == "running"
    rollout_waves.advance(svc)  # wave 1: n2 and n3
    wait_for_state(client, uuids["n2"], "manageable")
    failed = wait_for_state(client, uuids["n3"], "clean failed")
    assert "firmware.update" in failed["last_error"]
    assert _act(client, "bios-q4", "pause").json()["paused_reason"] == "paused by an operator"
    rollout_waves.advance(svc)  # the wave is settled, but the rollout is paused
    shown = _by_node(_show(client, "bios-q4"))
    assert shown[uuids["n3"]]["state"] == "failed"
    assert shown[uuids["n3"]]["outcome"] == "clean failed"
    assert "firmware.update" in shown[uuids["n3"]]["error"]
    assert shown[uuids["n4"]]["state"] == "pending"
    assert get_node(client, uuids["n4"])["provision_state"] == "manageable"

    _act(client, "bios-q4", "resume")
    rollout_waves.advance(svc)  # one failure is within the budget: wave 2
    for name in ("n4", "n5"):
        wait_for_state(client, uuids[name], "manageable")
    rollout_waves.advance(svc)
    shown = _show(client, "bios-q4")
    assert shown["state"] == "done"
    assert shown["finished_at"] is not None
    assert shown["node_counts"] == {
        "pending": 0,
        "running": 0,
        "succeeded": 4,
        "failed": 1,
        "skipped": 0,
    }
    _check_afterwards(client, created["uuid"], uuids)


def _check_afterwards(client: TestClient, rollout: str, uuids: dict[str, str]) -> None:
    """Only the failed node is off the baseline; each flow says who asked; the nodes are free."""
    drift = client.get("/v1/firmware_baselines/q4/drift", headers=LATEST).json()
    assert [n["node_name"] for n in drift["nodes"]] == ["n3"]
    url = f"/v1/nodes/{uuids['n2']}/history?detail=true"
    history = client.get(url, headers=LATEST).json()["history"]
    assert any((h["user"] or "").startswith(f"rollout {rollout}") for h in history)
    again = _create(client, action={"verb": "provide"}, selector={"nodes": [uuids["n1"]]})
    assert again["node_counts"]["pending"] == 1


def test_more_failures_than_the_budget_stop_the_rollout(stack: Stack) -> None:
    client, svc = stack.client, _svc(stack)
    failing = [_manageable(client, f"f{n}", fake_fail_steps=["firmware.update"]) for n in (1, 2)]
    spare = _manageable(client, "spare")
    step = {"interface": "firmware", "step": "update", "args": {"settings": [BIOS_UPDATE]}}
    runbook = client.post(
        "/v1/runbooks",
        json={"name": "CUSTOM_FLASH", "steps": [{**step, "order": 1}]},
        headers=LATEST,
    )
    assert runbook.status_code == 201, runbook.text
    client.put(f"/v1/runbooks/{runbook.json()['uuid']}/traits/CUSTOM_FLASH", headers=LATEST)
    for uuid in [*failing, spare]:
        client.put(f"/v1/nodes/{uuid}/traits/CUSTOM_FLASH", headers=LATEST)
    created = _create(
        client,
        action={"runbook": "CUSTOM_FLASH"},
        selector={"traits": ["CUSTOM_FLASH"]},
        batch=2,
        max_failures=1,
    )
    rollout_waves.advance(svc)
    for uuid in failing:
        wait_for_state(client, uuid, "clean failed")
    rollout_waves.advance(svc)
    shown = _show(client, created["uuid"])
    assert shown["state"] == "failed"
    assert shown["last_error"] == "2 nodes failed, more than the 1 allowed"
    spare_row = _by_node(shown)[spare]
    assert (spare_row["state"], spare_row["error"]) == ("skipped", "the rollout failed")
    assert get_node(client, spare)["provision_state"] == "manageable"
    assert _act(client, created["uuid"], "resume").status_code == 409


def test_abort_lets_the_nodes_under_way_finish_and_starts_no_other(stack: Stack) -> None:
    client, svc = stack.client, _svc(stack)
    nodes = [_manageable(client, f"a{n}") for n in range(3)]
    created = _create(client, action={"verb": "inspect"}, selector={"nodes": nodes})
    rollout_waves.advance(svc)
    aborted = _act(client, created["uuid"], "abort").json()
    assert aborted["state"] == "stopped"
    assert [n["state"] for n in aborted["nodes"]] == ["running", "skipped", "skipped"]
    wait_for_state(client, nodes[0], "manageable")
    rollout_waves.advance(svc)
    shown = _show(client, created["uuid"])
    assert [n["state"] for n in shown["nodes"]] == ["succeeded", "skipped", "skipped"]
    assert shown["finished_at"] is not None
    assert _act(client, created["uuid"], "abort").status_code == 409


def test_a_start_lost_with_its_conductor_is_made_again(stack: Stack) -> None:
    """The node was recorded as started, then the process died before starting its flow."""
    client, svc = stack.client, _svc(stack)
    node = _manageable(client, "lost")
    created = _create(client, action={"verb": "provide"}, selector={"nodes": [node]})
    # Recorded after the node's last change, as a round records it before it starts it.
    started = dt.datetime.fromisoformat(get_node(client, node)["provision_updated_at"])
    started += dt.timedelta(seconds=1)
    with stack.db.write() as session:
        session.execute(
            update(RolloutNode)
            .where(RolloutNode.node_uuid == node)
            .values(state="running", started_at=started)
        )
    rollout_waves.advance(svc)  # still manageable, unchanged since: started again
    wait_for_state(client, node, "available")
    rollout_waves.advance(svc)
    assert _show(client, created["uuid"])["state"] == "done"


def test_a_baseline_skips_the_nodes_it_is_not_for_and_refuses_a_rollout_with_none_to_do(
    stack: Stack,
) -> None:
    client = stack.client
    uuids = _five_nodes_and_a_baseline(client)  # q4: any vendor
    contoso = {"name": "contoso", "vendor": "Contoso", "components": [BIOS]}
    assert client.post("/v1/firmware_baselines", json=contoso, headers=LATEST).status_code == 201
    body = {"action": {"baseline": "contoso"}, "selector": {"name_pattern": "n*"}}
    refused = client.post("/v1/rollouts", json=body, headers=LATEST)
    assert refused.status_code == 400
    assert error_text(refused) == (
        "Invalid rollout: no selected node has anything to do "
        "(firmware baseline contoso is for another vendor or model)"
    )
    # Flashed once, n1 is at q4: the rollout skips it and says why.
    _flash(client, uuids["n1"])
    created = _create(client, action={"baseline": "q4"}, selector={"name_pattern": "n[12]"})
    rows = _by_node(created)
    assert (rows[uuids["n1"]]["state"], rows[uuids["n1"]]["error"]) == (
        "skipped",
        "already at the baseline",
    )
    assert rows[uuids["n2"]]["state"] == "pending"


def _flash(client: TestClient, uuid: str) -> None:
    step = {"interface": "firmware", "step": "update", "args": {"settings": [BIOS_UPDATE]}}
    assert provision(client, uuid, "clean", clean_steps=[step]).status_code == 202
    wait_for_state(client, uuid, "manageable")


def test_two_live_rollouts_never_hold_one_node(stack: Stack) -> None:
    client = stack.client
    node = _manageable(client, "shared")
    first = _create(client, action={"verb": "inspect"}, selector={"nodes": [node]})
    response = client.post(
        "/v1/rollouts",
        json={"action": {"verb": "provide"}, "selector": {"name_pattern": "sha*"}},
        headers=LATEST,
    )
    assert response.status_code == 409
    assert f"node {node} is in rollout {first['uuid']}" in error_text(response)


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"action": {"verb": "inspect"}, "selector": {}}, "at least one criterion"),
        (
            {"action": {"verb": "inspect"}, "selector": {"name_pattern": "none-*"}},
            "the selector matches no node",
        ),
        (
            {"action": {"verb": "inspect", "runbook": "X"}, "selector": {"name_pattern": "*"}},
            "one of runbook, baseline, verb",
        ),
        ({"action": {}, "selector": {"name_pattern": "*"}}, "one of runbook, baseline, verb"),
        ({"action": {"verb": "deploy"}, "selector": {"name_pattern": "*"}}, "verb"),
        ({"action": {"verb": "inspect"}, "selector": {"name_pattern": "*"}, "batch": 0}, "batch"),
        (
            {"action": {"verb": "inspect"}, "selector": {"name_pattern": "*"}, "canary": -1},
            "canary",
        ),
        (
            {"action": {"verb": "provide"}, "selector": {"name_pattern": "bad-*"}},
            "can not be performed",
        ),
        (
            {"action": {"runbook": "CUSTOM_NONE"}, "selector": {"name_pattern": "bad-*"}},
            "CUSTOM_NONE could not be found",
        ),
        (
            {"action": {"baseline": "none-such"}, "selector": {"name_pattern": "bad-*"}},
            "none-such could not be found",
        ),
        (
            {"action": {"verb": "inspect"}, "selector": {"nodes": [str(uuidlib.uuid4())]}},
            "could not be found",
        ),
        (
            {"action": {"verb": "inspect"}, "selector": {"nodes": ["bad-1"] * 10_000}},
            "node bad-1 is listed more than once",
        ),
        (
            {
                "action": {"verb": "inspect"},
                "selector": {"name_pattern": "*"},
                "window": {"start_hour": 24, "end_hour": 2},
            },
            "start_hour",
        ),
        (
            {
                "action": {"verb": "inspect"},
                "selector": {"name_pattern": "*"},
                "window": {"start_hour": 3, "end_hour": 3},
            },
            "an empty window never opens",
        ),
        ({"action": {"verb": "inspect"}, "selector": {"colour": "red"}}, "colour"),
    ],
)
def test_bad_rollouts_are_refused_before_anything_runs(
    stack: Stack, body: dict[str, Any], text: str
) -> None:
    client = stack.client
    node = create_node(client, name=f"bad-{uuidlib.uuid4().hex[:6]}")  # enrolled
    response = client.post("/v1/rollouts", json=body, headers=LATEST)
    assert response.status_code == 400, response.text
    assert text in error_text(response)
    assert client.get("/v1/rollouts", headers=LATEST).json()["rollouts"] == []
    assert get_node(client, node["uuid"])["provision_state"] == "enroll"


def test_a_runbook_the_node_is_not_approved_for_is_refused(stack: Stack) -> None:
    client = stack.client
    _manageable(client, "plain")
    step = {"interface": "firmware", "step": "update", "args": {"settings": [BIOS_UPDATE]}}
    made = client.post(
        "/v1/runbooks", json={"name": "CUSTOM_RB", "steps": [{**step, "order": 1}]}, headers=LATEST
    ).json()
    client.put(f"/v1/runbooks/{made['uuid']}/traits/CUSTOM_RB", headers=LATEST)
    response = client.post(
        "/v1/rollouts",
        json={"action": {"runbook": "CUSTOM_RB"}, "selector": {"name_pattern": "plain"}},
        headers=LATEST,
    )
    assert response.status_code == 400
    assert "has not been approved for use on this node" in error_text(response)


def test_listing_filters_by_state_and_shows_counts(stack: Stack) -> None:
    client = stack.client
    node = _manageable(client, "listed")
    created = _create(client, action={"verb": "inspect"}, selector={"nodes": [node]})
    listed = client.get("/v1/rollouts?state=pending", headers=LATEST).json()["rollouts"]
    assert listed == [
        {
            "uuid": created["uuid"],
            "name": None,
            "state": "pending",
            "node_counts": created["node_counts"],
            "links": created["links"],
        }
    ]
    assert client.get("/v1/rollouts?state=done", headers=LATEST).json()["rollouts"] == []
    assert client.get("/v1/rollouts?state=bogus", headers=LATEST).status_code == 400
    assert client.get("/v1/rollouts/none-such", headers=LATEST).status_code == 404
    text = client.get("/metrics", headers=LATEST).text
    assert 'metalforge_rollout_nodes{state="pending"} 1.0' in text


@pytest.fixture
def advancing(tmp_path: Path) -> Iterator[Stack]:
    """A stack whose conductor advances rollouts by itself, every 0.1 s."""
    settings = test_settings(
        f"sqlite:///{tmp_path}/mf.sqlite",
        rollout_interval=0.1,
        coordination={"election_interval": 0.1, "leader_lease": 2.0},
    )
    running = start_stack(settings)
    try:
        yield running
    finally:
        running.stop()


def _until_done(client: TestClient, ident: str) -> dict[str, Any]:
    done: dict[str, Any] = wait_until(
        "the rollout to end",
        lambda: (shown := _show(client, ident))["state"] == "done" and shown,
        timeout=60,
    )
    return done


def test_the_conductors_advance_rollouts_by_themselves(advancing: Stack) -> None:
    client = advancing.client
    nodes = [_manageable(client, f"auto{n}") for n in range(3)]
    created = _create(client, action={"verb": "provide"}, selector={"nodes": nodes}, batch=2)
    _until_done(client, created["uuid"])
    for node in nodes:
        assert get_node(client, node)["provision_state"] == "available"


def test_available_nodes_are_flashed_by_manual_cleaning_and_return_to_the_pool(
    advancing: Stack,
) -> None:
    client = advancing.client
    nodes = [make_available(client, name=f"pool{n}")["uuid"] for n in range(2)]
    baseline = {"name": "pool-bios", "components": [BIOS]}
    assert client.post("/v1/firmware_baselines", json=baseline, headers=LATEST).status_code == 201
    created = _create(client, action={"baseline": "pool-bios"}, selector={"nodes": nodes}, batch=2)
    assert created["nodes"][0]["verbs"] == ["manage", "clean", "provide"]
    done = _until_done(client, created["uuid"])
    assert [n["state"] for n in done["nodes"]] == ["succeeded", "succeeded"]
    assert [n["outcome"] for n in done["nodes"]] == ["available", "available"]
    for node in nodes:
        firmware = client.get(f"/v1/nodes/{node}/firmware", headers=LATEST).json()["firmware"]
        bios = next(c for c in firmware if c["component"] == "bios")
        assert bios["current_version"] == "1.0.1"
    assert (
        client.get("/v1/firmware_baselines/pool-bios/drift", headers=LATEST).json()["nodes"] == []
    )


def test_the_cli_creates_shows_pauses_and_aborts_rollouts(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = stack.client
    nodes = [_manageable(client, f"cli{n}") for n in range(2)]
    config = tmp_path / "metalforge.toml"
    config.write_text(f'[database]\nurl = "{stack.settings.database.url}"\n')
    body = tmp_path / "rollout.json"
    body.write_text(
        json.dumps(
            {"name": "cli-inspect", "action": {"verb": "inspect"}, "selector": {"nodes": nodes}}
        )
    )
    cli.main(["--config", str(config), "rollout", "create", str(body)])
    shown = capsys.readouterr().out
    assert "(cli-inspect)" in shown
    assert "state: pending" in shown
    assert all(node in shown for node in nodes)
    assert "cli0" in shown
    cli.main(["--config", str(config), "rollout", "list"])
    assert "cli-inspect" in capsys.readouterr().out
    cli.main(["--config", str(config), "rollout", "pause", "cli-inspect"])
    assert "state: paused - paused by an operator" in capsys.readouterr().out
    cli.main(["--config", str(config), "rollout", "abort", "cli-inspect"])
    out = capsys.readouterr().out
    assert "state: stopped" in out
    assert "nodes: pending=0 running=0 succeeded=0 failed=0 skipped=2" in out
    with pytest.raises(StartupError, match="is stopped"):
        cli.main(["--config", str(config), "rollout", "resume", "cli-inspect"])
    body.write_text(json.dumps({"action": {"verb": "inspect"}, "selector": {}}))
    with pytest.raises(StartupError, match="at least one criterion"):
        cli.main(["--config", str(config), "rollout", "create", str(body)])
    cli.main(["--config", str(config), "rollout", "list", "--state", "done"])
    assert capsys.readouterr().out.strip() == "no rollouts"


def _wait_manageable(client: TestClient, uuid: str, headers: dict[str, str]) -> None:
    def manageable() -> bool:
        node = client.get(f"/v1/nodes/{uuid}", headers=headers).json()
        return bool(node["provision_state"] == "manageable")

    wait_until(f"node {uuid} to be manageable", manageable)


def test_a_project_rolls_out_over_the_nodes_it_owns_only(tmp_path: Path) -> None:
    settings = basic_auth_settings(f"sqlite:///{tmp_path}/mf.sqlite", tmp_path)
    conductor = settings.conductor.model_copy(update={"rollout_interval": 0})
    running = start_stack(settings.model_copy(update={"conductor": conductor}))
    try:
        client = running.client
        admin, owner, other = ({**p.headers, **LATEST} for p in (ADMIN, OWNER_ADMIN, OTHER_ADMIN))
        made = {}
        for name, project in (("proj-mine", "p-owner"), ("proj-theirs", "p-other")):
            body = {"name": name, "driver": "fake-hardware", "owner": project}
            made[name] = client.post("/v1/nodes", json=body, headers=admin).json()["uuid"]
            client.put(
                f"/v1/nodes/{made[name]}/states/provision", json={"target": "manage"}, headers=admin
            )
        for uuid in made.values():
            _wait_manageable(client, uuid, admin)
        chosen = {"action": {"verb": "inspect"}, "selector": {"name_pattern": "proj-*"}}
        created = client.post("/v1/rollouts", json=chosen, headers=owner)
        assert created.status_code == 201, created.text
        rollout = created.json()
        assert [n["node_uuid"] for n in rollout["nodes"]] == [made["proj-mine"]]
        listed = {"action": {"verb": "inspect"}, "selector": {"nodes": [made["proj-theirs"]]}}
        refused = client.post("/v1/rollouts", json=listed, headers=owner)
        assert refused.status_code == 400
        assert error_text(refused) == (
            f"Invalid rollout: node {made['proj-theirs']} could not be found"
        )
        step = {"interface": "firmware", "step": "update", "args": {"settings": [BIOS_UPDATE]}}
        theirs = {"name": "CUSTOM_THEIRS", "owner": "p-other", "steps": [{**step, "order": 1}]}
        assert client.post("/v1/runbooks", json=theirs, headers=admin).status_code == 201
        borrowed = {"action": {"runbook": "CUSTOM_THEIRS"}, "selector": {"name_pattern": "proj-*"}}
        refused = client.post("/v1/rollouts", json=borrowed, headers=owner)
        assert refused.status_code == 400, refused.text
        assert "Access was denied" in error_text(refused)
        url = f"/v1/rollouts/{rollout['uuid']}"
        assert client.get(url, headers=other).status_code == 404
        assert client.post(f"{url}/pause", headers=other).status_code == 404
        assert client.get("/v1/rollouts", headers=other).json()["rollouts"] == []
        assert len(client.get("/v1/rollouts", headers=owner).json()["rollouts"]) == 1
        assert len(client.get("/v1/rollouts", headers=admin).json()["rollouts"]) == 1
        assert client.post(f"{url}/pause", headers=owner).json()["state"] == "paused"
    finally:
        running.stop()
