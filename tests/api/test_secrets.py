"""Secrets stay secret: masked in every view, never quoted in errors, never moved elsewhere."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from metalforge.api.auth.basic import HtpasswdVerifier, UserFileError, parse_user_file
from metalforge.api.auth.identity import Identity
from metalforge.api.auth.policy import Policy, node_target
from metalforge.api.node_view import REDACTED
from metalforge.config import load_settings
from metalforge.db.engine import Database
from metalforge.db.models import Node
from metalforge.redaction import mask_secrets, mask_url
from metalforge.serving import banner
from tests.support.api import error_text, make_available, provision, wait_for_state
from tests.support.auth import (
    ADMIN,
    LESSEE_ADMIN,
    OWNER_ADMIN,
    OWNER_MEMBER,
    OWNER_READER,
    basic_auth_settings,
    write_htpasswd,
)
from tests.support.stack import Stack, start_stack

PASSWORD = "bmc-pa55word-zq"
INFO = {
    "redfish_address": "https://192.0.2.10",
    "redfish_username": "root",
    "redfish_password": PASSWORD,
    "snmp": {"auth_key": "snmp-auth-key-zq", "community_secret": "community-zq"},
}


@pytest.fixture
def stack(sqlite_url: str, tmp_path: Path) -> Iterator[Stack]:
    running = start_stack(basic_auth_settings(sqlite_url, tmp_path))
    try:
        yield running
    finally:
        running.stop()


def _node(stack: Stack, **fields: Any) -> dict[str, Any]:
    body = {"driver": "fake-hardware", "driver_info": INFO, **fields}
    response = stack.client.post("/v1/nodes", json=body, headers=ADMIN.headers)
    assert response.status_code == 201, response.text
    node: dict[str, Any] = response.json()
    return node


def _no_secret(text: str) -> None:
    for secret in (PASSWORD, "snmp-auth-key-zq", "community-zq"):
        assert secret not in text


def _patch(stack: Stack, uuid: str, ops: list[dict[str, Any]], who: Any = ADMIN) -> Any:
    return stack.client.patch(f"/v1/nodes/{uuid}", json=ops, headers=who.headers)


def test_views_mask_passwords_at_every_depth(stack: Stack) -> None:
    node = _node(stack)
    shown = stack.client.get(f"/v1/nodes/{node['uuid']}", headers=ADMIN.headers)
    assert shown.json()["driver_info"]["redfish_password"] == "******"
    assert shown.json()["driver_info"]["snmp"] == {
        "auth_key": "******",
        "community_secret": "******",
    }
    assert shown.json()["driver_info"]["redfish_username"] == "root"
    detail = stack.client.get("/v1/nodes/detail", headers=ADMIN.headers)
    _no_secret(shown.text + detail.text + json.dumps(node))


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/driver_info/redfish_password", "value": "x"}],
        [{"op": "copy", "from": "/driver_info/redfish_password", "path": "/extra/pw"}],
        [{"op": "move", "from": "/driver_info/redfish_password", "path": "/extra/pw"}],
        [{"op": "remove", "path": "/driver_info/no_such_key"}],
        [{"op": "replace", "path": "/driver_info/snmp/missing/deeper", "value": 1}],
        [{"op": "add", "path": "/driver_info/a~b", "value": 1}],
    ],
    ids=["test", "copy", "move", "remove-missing", "replace-missing", "bad-pointer"],
)
def test_patch_probes_are_refused_without_quoting_the_node(
    stack: Stack, ops: list[dict[str, Any]]
) -> None:
    node = _node(stack)
    response = _patch(stack, node["uuid"], ops)
    assert response.status_code == 400, response.text
    _no_secret(response.text)
    after = stack.client.get(f"/v1/nodes/{node['uuid']}", headers=ADMIN.headers).json()
    assert after["extra"] == {}
    _no_secret(json.dumps(after))


def test_a_patch_error_masks_the_secret_the_client_sent(stack: Stack) -> None:
    node = _node(stack)
    response = _patch(
        stack,
        node["uuid"],
        [
            {"op": "add", "path": "/driver_info/ipmi_password", "value": "fresh-secret-zq"},
            {"op": "remove", "path": "/extra/missing"},
        ],
    )
    assert response.status_code == 400
    assert "fresh-secret-zq" not in response.text
    assert "can't remove a non-existent object 'missing'" in error_text(response)
    # The failing operation itself is shown, as Ironic shows it: its secret masked.
    failing = [{"op": "replace", "path": "/driver_info/bmc_password", "value": "fresh-secret-zq"}]
    response = _patch(stack, node["uuid"], failing)
    assert response.status_code == 400
    assert "fresh-secret-zq" not in response.text
    assert "'value': '******'" in error_text(response)


def test_history_of_updates_names_fields_and_who_never_values(stack: Stack) -> None:
    node = _node(stack)
    ops = [{"op": "replace", "path": "/driver_info/redfish_password", "value": "new-pass-zq"}]
    assert _patch(stack, node["uuid"], ops).status_code == 200
    history = stack.client.get(
        f"/v1/nodes/{node['uuid']}/history?detail=true", headers=ADMIN.headers
    )
    assert history.status_code == 200
    assert "new-pass-zq" not in history.text
    _no_secret(history.text)
    events = history.json()["history"]
    update = next(e for e in events if "updated driver_info" in e["event"])
    assert update["user"] == "alice"


def test_moving_the_bmc_needs_the_credentials_again(stack: Stack) -> None:
    node = _node(stack)
    move = [{"op": "replace", "path": "/driver_info/redfish_address", "value": "https://evil"}]
    refused = _patch(stack, node["uuid"], move)
    assert refused.status_code == 403, refused.text
    assert "redfish_address" in error_text(refused)
    assert "redfish_password" in error_text(refused)
    added = [{"op": "add", "path": "/driver_info/ipmi_address", "value": "198.51.100.7"}]
    assert _patch(stack, node["uuid"], added).status_code == 403
    kept = stack.client.get(f"/v1/nodes/{node['uuid']}", headers=ADMIN.headers).json()
    assert kept["driver_info"]["redfish_address"] == "https://192.0.2.10"
    again: list[dict[str, Any]] = [
        *move,
        {"op": "replace", "path": "/driver_info/redfish_password", "value": "other-zq"},
        {"op": "replace", "path": "/driver_info/snmp", "value": {}},
    ]
    assert _patch(stack, node["uuid"], again).status_code == 200
    # Without stored credentials an address is just an address.
    bare = _node(stack, driver_info={"redfish_address": "https://192.0.2.11"})
    assert _patch(stack, bare["uuid"], move).status_code == 200


def test_show_password_granted_by_a_policy_file(sqlite_url: str, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text('"show_password": "role:admin and system_scope:all"\n')
    running = start_stack(basic_auth_settings(sqlite_url, tmp_path, policy_file=policy))
    try:
        node = _node(running)
        shown = running.client.get(f"/v1/nodes/{node['uuid']}", headers=ADMIN.headers)
        assert shown.json()["driver_info"]["redfish_password"] == PASSWORD
        # ...and moving the BMC is then allowed: the caller could read them anyway.
        move = [{"op": "replace", "path": "/driver_info/redfish_address", "value": "https://x"}]
        assert _patch(running, node["uuid"], move).status_code == 200
    finally:
        running.stop()


def test_a_lessee_sees_ironic_redactions_and_the_owner_does_not(stack: Stack) -> None:
    node = _node(stack, owner="p-owner", lessee="p-lessee")
    url = f"/v1/nodes/{node['uuid']}"
    as_lessee = stack.client.get(url, headers=LESSEE_ADMIN.headers).json()
    for field, text in REDACTED.items():
        assert as_lessee[field] == text
    as_owner = stack.client.get(url, headers=OWNER_READER.headers).json()
    assert as_owner["driver_info"]["redfish_password"] == "******"
    assert as_owner["driver_info"]["redfish_username"] == "root"
    assert as_owner["last_error"] is None
    listed = stack.client.get("/v1/nodes/detail", headers=LESSEE_ADMIN.headers).json()
    assert [n["driver_info"] for n in listed["nodes"]] == [REDACTED["driver_info"]]


def test_instance_secrets_are_masked(stack: Stack) -> None:
    info = {
        "image_source": "http://user:img-pass-zq@203.0.113.5/i.raw?temp_url_sig=sig-zq",
        "image_url": "https://203.0.113.5/i.raw?temp_url_sig=sig-zq&temp_url_expires=9",
        "configdrive": {"meta_data": {"admin_pass": "cd-pass-zq"}},
        "rescue_password": "rescue-zq",
    }
    node = _node(stack, instance_info=info)
    text = stack.client.get(f"/v1/nodes/{node['uuid']}", headers=ADMIN.headers).text
    for secret in ("img-pass-zq", "sig-zq", "cd-pass-zq", "rescue-zq"):
        assert secret not in text
    shown = json.loads(text)["instance_info"]
    assert shown["image_url"] == "https://203.0.113.5/i.raw?temp_url_sig=******&temp_url_expires=9"
    assert shown["configdrive"] == "******"


def test_masking_rules() -> None:
    assert mask_secrets({"a": [{"ipmi_password": "x"}], "deploy_kernel": "k"}) == {
        "a": [{"ipmi_password": "******"}],
        "deploy_kernel": "k",
    }
    assert mask_secrets({"private_key": "", "api_token": None}) == {
        "private_key": "",
        "api_token": None,
    }
    assert (
        mask_url("postgresql+psycopg://mf:db-pass@db/mf") == "postgresql+psycopg://mf:******@db/mf"
    )


def test_sqlite_file_and_its_directory_are_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "metalforge.sqlite"
    db = Database(f"sqlite:///{path}")
    try:
        db.upgrade()
        with db.read():  # the WAL and shared-memory files exist while a connection is open
            for companion in ("-wal", "-shm"):
                mode = path.with_name(path.name + companion).stat().st_mode
                assert stat.S_IMODE(mode) == 0o600, companion
    finally:
        db.dispose()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_the_banner_hides_the_database_password(capsys: pytest.CaptureFixture[str]) -> None:
    banner(load_settings(database={"url": "postgresql+psycopg://mf:db-pass-zq@db:5432/mf"}))
    out = capsys.readouterr().out
    assert "db-pass-zq" not in out
    assert "mf:******@db:5432/mf" in out


# -- htpasswd -------------------------------------------------------------------


def test_htpasswd_users_passwords_and_reload(tmp_path: Path) -> None:
    path = write_htpasswd(tmp_path / "htpasswd", (ADMIN,))
    verifier = HtpasswdVerifier(path, cache_seconds=0)
    assert verifier.verify("alice", ADMIN.password)
    assert not verifier.verify("alice", "wrong")
    assert not verifier.verify("mallory", ADMIN.password)
    write_htpasswd(path, (OWNER_READER,))
    assert not verifier.verify("alice", ADMIN.password)
    assert verifier.verify("frank", OWNER_READER.password)


def test_an_unknown_user_costs_a_bcrypt_check_of_the_same_cost(tmp_path: Path) -> None:
    path = write_htpasswd(tmp_path / "htpasswd", (ADMIN, OWNER_READER))
    users = parse_user_file(path)
    assert users.decoy[:7] == b"$2b$04$"
    assert {h[:7] for h in users.hashes.values()} == {b"$2b$04$"}


def test_a_non_bcrypt_entry_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "htpasswd"
    path.write_text("alice:$apr1$abc$abcdefghijklmnopqrstuv\n")
    with pytest.raises(UserFileError, match="not a bcrypt hash"):
        parse_user_file(path)


def test_a_broken_edit_keeps_the_previous_file(tmp_path: Path) -> None:
    path = write_htpasswd(tmp_path / "htpasswd", (ADMIN,))
    verifier = HtpasswdVerifier(path, cache_seconds=0)
    path.write_text("alice:plain-text\n")
    assert verifier.verify("alice", ADMIN.password)
    assert not verifier.verify("alice", "plain-text")


def test_a_removed_file_refuses_everybody(tmp_path: Path) -> None:
    path = write_htpasswd(tmp_path / "htpasswd", (ADMIN,))
    verifier = HtpasswdVerifier(path, cache_seconds=60)
    assert verifier.verify("alice", ADMIN.password)
    path.unlink()
    assert not verifier.verify("alice", ADMIN.password)
    write_htpasswd(path, (ADMIN,))
    assert verifier.verify("alice", ADMIN.password)


def test_verified_passwords_are_remembered_only_for_a_while(tmp_path: Path) -> None:
    now = [0.0]
    path = write_htpasswd(tmp_path / "htpasswd", (ADMIN,))
    verifier = HtpasswdVerifier(path, cache_seconds=60, clock=lambda: now[0])
    assert verifier.verify("alice", ADMIN.password)
    assert len(verifier._verified) == 1
    assert not verifier.verify("alice", "wrong")
    now[0] = 61.0
    assert verifier.verify("alice", ADMIN.password)
    assert list(verifier._verified.values()) == [121.0]


# -- found in review ---------------------------------------------------------------


def test_driver_messages_are_scrubbed_of_the_nodes_secrets(stack: Stack) -> None:
    # The stored "password" is a phrase the fake driver's failure message contains:
    # whatever a driver quotes, the node's secrets never reach last_error or history.
    stack.client.headers.update(ADMIN.headers)
    info = {"fake_fail_steps": "deploy.write_image", "ipmi_password": "was told to fail"}
    node = make_available(stack.client, driver_info=info)
    assert provision(stack.client, node["uuid"], "active").status_code == 202
    failed = wait_for_state(stack.client, node["uuid"], "deploy failed")
    assert "was told to fail" not in failed["last_error"]
    assert "fake-hardware ****** deploy.write_image" in failed["last_error"]
    assert failed["last_error"].endswith("(requested by alice)")  # who asked for the deploy
    history = stack.client.get(f"/v1/nodes/{node['uuid']}/history?detail=true")
    assert "was told to fail" not in history.text


def test_automated_clean_off_in_any_spelling_needs_disable_cleaning(stack: Stack) -> None:
    node = _node(stack, owner="p-owner")
    for value in ("no", "0", "off", "FALSE", False):
        ops = [{"op": "replace", "path": "/automated_clean", "value": value}]
        refused = _patch(stack, node["uuid"], ops, OWNER_MEMBER)
        assert refused.status_code == 403, (value, refused.text)
        assert "baremetal:node:disable_cleaning" in error_text(refused)
    on = [{"op": "replace", "path": "/automated_clean", "value": "yes"}]
    assert _patch(stack, node["uuid"], on, OWNER_MEMBER).status_code == 200


def test_what_a_lessee_may_not_see_stays_hidden_on_every_route(stack: Stack) -> None:
    node = _node(stack, owner="p-owner", lessee="p-lessee")
    url = f"/v1/nodes/{node['uuid']}"
    states = stack.client.get(f"{url}/states", headers=LESSEE_ADMIN.headers)
    assert states.json()["last_error"] == REDACTED["last_error"]
    preview = stack.client.get(f"{url}/deploying/steps?traits=", headers=OWNER_READER.headers)
    assert preview.status_code == 403, preview.text
    validate = stack.client.get(f"{url}/validate", headers=LESSEE_ADMIN.headers)
    assert validate.status_code == 200, validate.text
    _no_secret(validate.text)


def test_a_hidden_node_is_no_marker(stack: Stack) -> None:
    hidden = _node(stack, owner="p-other")
    _node(stack, owner="p-owner")
    answer = stack.client.get(f"/v1/nodes?marker={hidden['uuid']}", headers=OWNER_MEMBER.headers)
    assert answer.status_code == 400
    assert "could not be found" in error_text(answer)
    mine = stack.client.get(f"/v1/nodes?marker={hidden['uuid']}", headers=ADMIN.headers)
    assert mine.status_code == 200


def test_a_project_admin_enrolls_only_with_fields_it_may_set(stack: Stack) -> None:
    ok = stack.client.post(
        "/v1/nodes", json={"driver": "fake-hardware", "name": "own"}, headers=OWNER_ADMIN.headers
    )
    assert ok.status_code == 201, ok.text
    assert ok.json()["owner"] == "p-owner"
    for extra in ({"conductor_group": "elsewhere"}, {"automated_clean": False}):
        refused = stack.client.post(
            "/v1/nodes", json={"driver": "fake-hardware", **extra}, headers=OWNER_ADMIN.headers
        )
        assert refused.status_code == 403, (extra, refused.text)


def test_a_guard_skips_the_owner_only_when_no_owner_could_change_the_answer(
    tmp_path: Path,
) -> None:
    keys = ("node.owner", "node.lessee")
    admin = Identity("alice", frozenset({"admin"}))
    member = Identity("carol", frozenset({"member"}), project_id="p-owner")
    defaults = Policy()
    assert defaults.allows_any_target("baremetal:node:get", admin, keys)
    assert not defaults.allows_any_target("baremetal:node:get", member, keys)
    policy = tmp_path / "policy.yaml"
    policy.write_text('"baremetal:node:get": "role:admin and not project_id:%(node.owner)s"\n')
    negated = Policy(policy)
    assert negated.allows("baremetal:node:get", admin, node_target("p-x", None))
    assert not negated.allows_any_target("baremetal:node:get", admin, keys)


def test_the_policy_file_is_followed_as_it_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    path = tmp_path / "policy.yaml"
    path.write_text('"baremetal:widget:get": "role:admin"\n')  # a rule nothing checks
    policy = Policy(path, clock=lambda: now[0])
    assert "baremetal:widget:get" in caplog.text
    admin = Identity("alice", frozenset({"admin"}))
    assert not policy.allows("show_password", admin)

    path.write_text('"show_password": "role:admin"\n')
    os.utime(path, ns=(1, 10**18))
    assert not policy.allows("show_password", admin)  # looked at most once a second
    now[0] = 1.5
    assert policy.allows("show_password", admin)

    path.write_text('"show_password": "role:admin and (\n')  # half-written
    os.utime(path, ns=(1, 2 * 10**18))
    now[0] = 3.0
    assert policy.allows("show_password", admin)  # the rules in force stay


def test_a_running_steps_secret_arguments_are_masked(stack: Stack) -> None:
    """A step under way shows its arguments (``clean_step``, ``deploy_step``,
    ``service_step``); those under secret keys, or URLs with credentials, are masked
    for every reader, as ``driver_info`` is."""
    node = _node(stack)
    step = {
        "interface": "firmware",
        "step": "update",
        "args": {
            "settings": [{"component": "bmc", "url": f"https://admin:{PASSWORD}@files/fw.bin"}],
            "bmc_password": PASSWORD,
        },
        "priority": 0,
    }
    with stack.db.write() as session:
        session.execute(
            update(Node)
            .where(Node.uuid == node["uuid"])
            .values(clean_step=step, deploy_step=step, service_step=step)
        )
    shown = stack.client.get(f"/v1/nodes/{node['uuid']}", headers=ADMIN.headers)
    for field in ("clean_step", "deploy_step", "service_step"):
        assert shown.json()[field]["args"]["bmc_password"] == "******"
        assert shown.json()[field]["step"] == "update"
    detail = stack.client.get("/v1/nodes/detail", headers=ADMIN.headers)
    only = stack.client.get(f"/v1/nodes/{node['uuid']}?fields=clean_step", headers=ADMIN.headers)
    _no_secret(shown.text + detail.text + only.text)
