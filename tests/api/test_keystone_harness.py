"""The Keystone harness itself: tokens of the scope and roles a test asked for.

The token-validation tests trust what this harness sets up; if it handed out
a token with the wrong scope or roles, they would prove nothing. Keystone's
own validation (``GET /v3/auth/tokens``) is the judge here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metalforge_lab.http_errors import HttpError
from tests.support.keystone import running_keystone


@pytest.mark.slow
def test_project_and_system_tokens_carry_the_granted_roles(tmp_path: Path) -> None:
    with running_keystone(tmp_path) as keystone:
        assert keystone.auth_url == f"{keystone.url}/v3"
        assert keystone.admin.id
        assert keystone.admin_project.id

        p1 = keystone.create_project("p1")
        u1 = keystone.create_user("u1", "u1-secret")
        keystone.grant_project_role(u1, p1, "member")
        sys_reader = keystone.create_user("sys-reader", "reader-secret")
        keystone.grant_system_role(sys_reader, "reader")

        project_token = keystone.validate(keystone.project_token(u1, p1))
        assert project_token["user"]["id"] == u1.id
        assert project_token["project"]["id"] == p1.id
        assert "system" not in project_token
        # member implies reader, and nothing more.
        assert {r["name"] for r in project_token["roles"]} == {"member", "reader"}
        assert any(entry["type"] == "identity" for entry in project_token["catalog"])

        system_token = keystone.validate(keystone.system_token(sys_reader))
        assert system_token["user"]["id"] == sys_reader.id
        assert system_token["system"] == {"all": True}
        assert "project" not in system_token
        assert {r["name"] for r in system_token["roles"]} == {"reader"}

        # A scope the user holds no role on is refused, not silently narrowed.
        with pytest.raises(HttpError) as refused:
            keystone.system_token(u1)
        assert refused.value.status == 401
        with pytest.raises(HttpError) as refused:
            keystone.project_token(sys_reader, p1)
        assert refused.value.status == 401
