"""Who is calling: the identity every authorization decision is made on."""

from __future__ import annotations

from dataclasses import dataclass

from oslo_context.context import RequestContext

IMPLIED_ROLES: dict[str, tuple[str, ...]] = {
    "admin": ("manager", "member", "reader"),
    "manager": ("member", "reader"),
    "member": ("reader",),
}
"""Roles that imply others, as Keystone's default role hierarchy has them."""


def expand_roles(roles: frozenset[str] | set[str] | list[str]) -> frozenset[str]:
    """``roles`` with every role they imply, as Keystone puts them in a token."""
    expanded = {r.lower() for r in roles}
    for role in list(expanded):
        expanded.update(IMPLIED_ROLES.get(role, ()))
    return frozenset(expanded)


@dataclass(frozen=True)
class Identity:
    """An authenticated caller, whatever proved it (noauth, htpasswd, a Keystone token).

    ``project_id`` set means the caller acts for that project only (a
    project-scoped token, or an ``http_basic`` user given a project); none
    means the caller acts for the whole deployment (Keystone's system scope).
    """

    user: str
    roles: frozenset[str]
    project_id: str | None = None
    user_id: str | None = None
    domain_id: str | None = None
    """Set for a domain-scoped Keystone token: neither system nor project."""
    named: bool = True
    """False for ``noauth``'s caller: nobody in particular, so nobody is recorded."""

    @property
    def system_scoped(self) -> bool:
        return self.project_id is None and self.domain_id is None

    def describe(self) -> str | None:
        """``alice`` or ``carol (project p-carol)``: who asked, for history and logs.

        None for ``noauth``, where every caller is the same anonymous administrator.
        """
        if not self.named:
            return None
        if self.project_id is None:
            return self.user
        return f"{self.user} (project {self.project_id})"

    def policy_context(self) -> RequestContext:
        """The credentials oslo.policy checks rules against."""
        return RequestContext(
            user_id=self.user_id or self.user,
            user_name=self.user,
            project_id=self.project_id,
            domain_id=self.domain_id,
            roles=sorted(expand_roles(self.roles)),
            system_scope="all" if self.system_scoped else None,
            overwrite=False,
        )


NOAUTH_ADMIN = Identity(user="noauth", roles=frozenset({"admin", "member", "reader"}), named=False)
"""Every caller with ``noauth``: a system administrator, as in Ironic."""
