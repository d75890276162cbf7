"""Authenticated stacks for tests: an htpasswd file, users with roles and projects.

The htpasswd file is written with bcrypt at the lowest cost (4), so a test
spends microseconds, not a quarter second, per check; the verifier treats
every cost alike.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt

from metalforge.config import Settings, load_settings
from metalforge_lab.ports import free_port
from tests.support.stack import FAST_CONDUCTOR


@dataclass(frozen=True)
class Persona:
    """A user of the tests' http_basic setup."""

    name: str
    roles: tuple[str, ...]
    project_id: str | None = None

    @property
    def password(self) -> str:
        return f"{self.name}-password"

    @property
    def headers(self) -> dict[str, str]:
        token = base64.b64encode(f"{self.name}:{self.password}".encode()).decode()
        return {"Authorization": f"Basic {token}", "X-OpenStack-Ironic-API-Version": "latest"}


ADMIN = Persona("alice", ("admin",))
READER = Persona("bob", ("reader",))
MEMBER = Persona("dave", ("member",))
OWNER_ADMIN = Persona("erin", ("admin",), "p-owner")
OWNER_MEMBER = Persona("carol", ("member",), "p-owner")
OWNER_READER = Persona("frank", ("reader",), "p-owner")
LESSEE_ADMIN = Persona("grace", ("admin",), "p-lessee")
LESSEE_MEMBER = Persona("heidi", ("member",), "p-lessee")
OTHER_ADMIN = Persona("ivan", ("admin",), "p-other")
NO_ROLE = Persona("judy", ())

PERSONAS = (
    ADMIN,
    READER,
    MEMBER,
    OWNER_ADMIN,
    OWNER_MEMBER,
    OWNER_READER,
    LESSEE_ADMIN,
    LESSEE_MEMBER,
    OTHER_ADMIN,
    NO_ROLE,
)
"""System admin, reader and member; admin, member and reader of the project owning the
test nodes; admin and member of the project leasing them; an admin of an unrelated
project; a user with no role."""


def write_htpasswd(path: Path, personas: tuple[Persona, ...] = PERSONAS) -> Path:
    lines = [
        f"{p.name}:{bcrypt.hashpw(p.password.encode(), bcrypt.gensalt(4)).decode()}"
        for p in personas
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def basic_auth_settings(
    db_url: str, tmp_path: Path, personas: tuple[Persona, ...] = PERSONAS, **api: Any
) -> Settings:
    """Settings for an http_basic stack where every persona can log in."""
    users = {
        p.name: {"roles": list(p.roles), **({"project_id": p.project_id} if p.project_id else {})}
        for p in personas
    }
    return load_settings(
        database={"url": db_url},
        conductor={**FAST_CONDUCTOR, "hostname": "test-conductor"},
        # Each served stack's inspector API on a port of its own (as ``test_settings``).
        inspector={"port": free_port()},
        api={
            "auth_strategy": "http_basic",
            "http_basic_auth_user_file": write_htpasswd(tmp_path / "htpasswd", personas),
            "users": users,
            **api,
        },
    )
