"""Authorization rules: Ironic's rule names and personas, enforced by oslo.policy.

Each rule is registered with its default check string; an operator overrides
any of them with a policy file in Ironic's YAML format (``api.policy_file``),
re-read when it changes. Scope is always enforced and the new (secure RBAC)
defaults are the only defaults: ``admin``, ``member`` and ``reader`` act on
the whole deployment when system-scoped, and on their project's nodes when
project-scoped (as the node's ``owner``, or with fewer rights as its
``lessee``). Roles imply one another as Keystone's do: admin > manager >
member > reader.

One deliberate difference from Ironic's defaults: changing ``driver_info``
(which holds BMC addresses and credentials) takes an administrator, not a
member; see docs/security.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from oslo_config import cfg
from oslo_policy import _checks
from oslo_policy import policy as oslo_policy

from metalforge.api.auth.identity import Identity

LOG = logging.getLogger(__name__)

# -- personas -----------------------------------------------------------------

SYSTEM_ADMIN = "role:admin and system_scope:all"
SYSTEM_MEMBER = "role:member and system_scope:all"
SYSTEM_READER = "(role:reader and system_scope:all) or (role:service and system_scope:all)"
SYSTEM_SERVICE = "role:service and system_scope:all"
PROJECT_SERVICE = "role:service and project_id:%(node.owner)s"
PROJECT_ADMIN = "role:admin and project_id:%(node.owner)s"
PROJECT_MEMBER = "role:member and (project_id:%(node.owner)s or project_id:%(node.lessee)s)"
PROJECT_READER = "role:reader and (project_id:%(node.owner)s or project_id:%(node.lessee)s)"
OWNER_ADMIN = "role:admin and project_id:%(node.owner)s"
OWNER_MANAGER = "role:manager and project_id:%(node.owner)s"
OWNER_MEMBER = "role:member and project_id:%(node.owner)s"
OWNER_READER = "role:reader and project_id:%(node.owner)s"
LESSEE_ADMIN = "role:admin and project_id:%(node.lessee)s"
LESSEE_MANAGER = "role:manager and project_id:%(node.lessee)s"
ALLOCATION_OWNER_MEMBER = "role:member and project_id:%(allocation.owner)s"
ALLOCATION_OWNER_READER = "role:reader and project_id:%(allocation.owner)s"


def _any(*checks: str) -> str:
    return " or ".join(f"({check})" for check in checks)


SYSTEM_OR_PROJECT_MEMBER = _any(SYSTEM_MEMBER, PROJECT_MEMBER, SYSTEM_SERVICE)
SYSTEM_OR_PROJECT_READER = _any(SYSTEM_READER, PROJECT_READER, PROJECT_SERVICE)
SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN = _any(
    SYSTEM_MEMBER, SYSTEM_SERVICE, OWNER_MEMBER, LESSEE_ADMIN, LESSEE_MANAGER, PROJECT_SERVICE
)
SYSTEM_ADMIN_OR_OWNER_ADMIN = _any(
    SYSTEM_ADMIN, SYSTEM_SERVICE, OWNER_ADMIN, OWNER_MANAGER, PROJECT_SERVICE
)
SYSTEM_MEMBER_OR_OWNER_ADMIN = _any(
    SYSTEM_MEMBER, SYSTEM_SERVICE, OWNER_ADMIN, OWNER_MANAGER, PROJECT_SERVICE
)
SYSTEM_MEMBER_OR_OWNER_MEMBER = _any(SYSTEM_MEMBER, SYSTEM_SERVICE, OWNER_MEMBER, PROJECT_SERVICE)
SYSTEM_OR_OWNER_READER = _any(SYSTEM_READER, SYSTEM_SERVICE, OWNER_READER, PROJECT_SERVICE)
SYSTEM_MEMBER_OR_OWNER_LESSEE_ADMIN = _any(
    SYSTEM_MEMBER,
    SYSTEM_SERVICE,
    OWNER_ADMIN,
    OWNER_MANAGER,
    LESSEE_ADMIN,
    LESSEE_MANAGER,
    PROJECT_SERVICE,
)
TARGET_PROPERTIES_READER = _any(SYSTEM_READER, "role:admin")
ALLOCATION_MEMBER = _any(SYSTEM_MEMBER, ALLOCATION_OWNER_MEMBER)
ALLOCATION_READER = _any(SYSTEM_READER, ALLOCATION_OWNER_READER)
ALLOCATION_CREATOR = _any(SYSTEM_MEMBER, "role:member")
RUNBOOK_OWNER_MANAGER = "role:manager and project_id:%(runbook.owner)s"
RUNBOOK_OWNER_READER = "role:reader and project_id:%(runbook.owner)s"
RUNBOOK_ADMIN = _any(SYSTEM_MEMBER, RUNBOOK_OWNER_MANAGER, "role:service")
RUNBOOK_READER = _any(SYSTEM_READER, RUNBOOK_OWNER_READER, "role:service")
RUNBOOK_CREATOR = _any(SYSTEM_MEMBER, "role:manager", "role:service")
API_READER = "(role:reader) or (role:service)"
ROLLOUT_OWNER_READER = "role:reader and project_id:%(rollout.owner)s"
ROLLOUT_OWNER_ADMIN = "(role:admin or role:manager) and project_id:%(rollout.owner)s"

# -- rules --------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """A rule's name, default, and what it guards (the documentation's text)."""

    name: str
    default: str
    description: str
    scopes: tuple[str, ...] = ("system", "project")


RULES: tuple[Rule, ...] = (
    Rule("show_password", "!", "See driver_info secrets (passwords, keys) unmasked.", ()),
    Rule("show_instance_secrets", "!", "See instance_info secrets and config drives.", ()),
    Rule("baremetal:node:create", _any(SYSTEM_ADMIN, SYSTEM_SERVICE), "Enroll a node."),
    Rule(
        "baremetal:node:create:self_owned_node",
        "(role:admin) or (role:service)",
        "Enroll a node owned by the caller's own project.",
    ),
    Rule("baremetal:node:list", API_READER, "List the nodes the caller's project may see."),
    Rule("baremetal:node:list_all", SYSTEM_READER, "List every node."),
    Rule("baremetal:node:get", SYSTEM_OR_PROJECT_READER, "Show a node (else it is not found)."),
    Rule(
        "baremetal:node:get:filter_threshold",
        SYSTEM_READER,
        "See every field of every node without the per-field rules below.",
    ),
    Rule("baremetal:node:get:last_error", SYSTEM_OR_OWNER_READER, "See a node's last_error."),
    Rule("baremetal:node:get:reservation", SYSTEM_OR_OWNER_READER, "See a node's reservation."),
    Rule(
        "baremetal:node:get:driver_internal_info",
        SYSTEM_OR_OWNER_READER,
        "See a node's driver_internal_info.",
    ),
    Rule("baremetal:node:get:driver_info", SYSTEM_OR_OWNER_READER, "See a node's driver_info."),
    Rule(
        "baremetal:node:update:driver_info",
        SYSTEM_ADMIN_OR_OWNER_ADMIN,
        "Change driver_info (BMC address and credentials).",
    ),
    Rule("baremetal:node:update:properties", SYSTEM_MEMBER_OR_OWNER_MEMBER, "Change properties."),
    Rule("baremetal:node:update:chassis_uuid", SYSTEM_ADMIN, "Change chassis_uuid."),
    Rule(
        "baremetal:node:update:instance_uuid",
        SYSTEM_MEMBER_OR_OWNER_MEMBER,
        "Change instance_uuid.",
    ),
    Rule("baremetal:node:update:lessee", SYSTEM_MEMBER_OR_OWNER_MEMBER, "Change lessee."),
    Rule("baremetal:node:update:owner", SYSTEM_MEMBER, "Change owner."),
    Rule(
        "baremetal:node:update:driver_interfaces",
        SYSTEM_MEMBER_OR_OWNER_ADMIN,
        "Change the driver or an interface.",
    ),
    Rule(
        "baremetal:node:update:network_data", SYSTEM_MEMBER_OR_OWNER_MEMBER, "Change network_data."
    ),
    Rule("baremetal:node:update:conductor_group", SYSTEM_MEMBER, "Change conductor_group."),
    Rule("baremetal:node:update:name", SYSTEM_MEMBER_OR_OWNER_MEMBER, "Change name."),
    Rule("baremetal:node:update:retired", SYSTEM_MEMBER_OR_OWNER_MEMBER, "Retire or unretire."),
    Rule("baremetal:node:update:shard", SYSTEM_ADMIN, "Change shard."),
    Rule("baremetal:node:update:parent_node", SYSTEM_MEMBER, "Change parent_node."),
    Rule("baremetal:node:update:disable_power_off", SYSTEM_ADMIN, "Change disable_power_off."),
    Rule("baremetal:node:update", SYSTEM_OR_PROJECT_MEMBER, "Change any other node field."),
    Rule("baremetal:node:update_extra", SYSTEM_OR_PROJECT_MEMBER, "Change extra."),
    Rule(
        "baremetal:node:update_instance_info",
        SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN,
        "Change instance_info or instance_name.",
    ),
    Rule("baremetal:node:disable_cleaning", SYSTEM_ADMIN, "Set automated_clean to false."),
    Rule("baremetal:node:delete", SYSTEM_ADMIN, "Delete a node."),
    Rule("baremetal:node:delete:self_owned_node", PROJECT_ADMIN, "Delete a node the project owns."),
    Rule("baremetal:node:validate", SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN, "Validate a node."),
    Rule(
        "baremetal:node:set_maintenance",
        SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN,
        "Put a node in maintenance.",
    ),
    Rule(
        "baremetal:node:clear_maintenance",
        SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN,
        "Take a node out of maintenance.",
    ),
    Rule(
        "baremetal:node:get_boot_device",
        SYSTEM_MEMBER_OR_OWNER_ADMIN,
        "Read the boot device and the supported ones.",
    ),
    Rule("baremetal:node:set_boot_device", SYSTEM_MEMBER_OR_OWNER_ADMIN, "Set the boot device."),
    Rule("baremetal:node:set_boot_mode", SYSTEM_OR_PROJECT_MEMBER, "Change the boot mode."),
    Rule("baremetal:node:set_secure_boot", SYSTEM_OR_PROJECT_MEMBER, "Change secure boot."),
    Rule("baremetal:node:inject_nmi", SYSTEM_MEMBER_OR_OWNER_ADMIN, "Inject an NMI."),
    Rule(
        "baremetal:node:get_indicator_state",
        SYSTEM_OR_PROJECT_READER,
        "List a node's indicators and read their states.",
    ),
    Rule(
        "baremetal:node:set_indicator_state",
        SYSTEM_MEMBER_OR_OWNER_MEMBER,
        "Change an indicator's state.",
    ),
    Rule(
        "baremetal:node:get_console",
        SYSTEM_MEMBER_OR_OWNER_MEMBER,
        "Read the console's connection information.",
    ),
    Rule(
        "baremetal:node:set_console_state",
        SYSTEM_MEMBER_OR_OWNER_MEMBER,
        "Start or stop the console.",
    ),
    Rule("baremetal:node:get_states", SYSTEM_OR_PROJECT_READER, "Read a node's states."),
    Rule("baremetal:node:set_power_state", SYSTEM_OR_PROJECT_MEMBER, "Change power state."),
    Rule(
        "baremetal:node:set_provision_state",
        SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN,
        "Change provision state (manage, provide, deploy, undeploy, ...).",
    ),
    Rule(
        "baremetal:node:set_provision_state:clean_steps",
        SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN,
        "Give clean steps with a provision request.",
    ),
    Rule(
        "baremetal:node:set_provision_state:service_steps",
        SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN,
        "Give service steps with a provision request.",
    ),
    Rule("baremetal:node:set_raid_state", SYSTEM_MEMBER_OR_OWNER_MEMBER, "Set target RAID."),
    Rule("baremetal:node:traits:list", SYSTEM_OR_PROJECT_READER, "List a node's traits."),
    Rule("baremetal:node:traits:set", SYSTEM_MEMBER_OR_OWNER_ADMIN, "Add or replace traits."),
    Rule("baremetal:node:traits:delete", SYSTEM_MEMBER_OR_OWNER_ADMIN, "Remove traits."),
    Rule("baremetal:node:vif:list", SYSTEM_OR_PROJECT_READER, "List a node's VIFs."),
    Rule("baremetal:node:vif:attach", SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN, "Attach a VIF."),
    Rule("baremetal:node:vif:detach", SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN, "Detach a VIF."),
    Rule("baremetal:node:history:get", SYSTEM_OR_OWNER_READER, "Read a node's history."),
    Rule("baremetal:node:inventory:get", SYSTEM_OR_OWNER_READER, "Read a node's inventory."),
    Rule("introspection:start", SYSTEM_ADMIN, "Start an introspection (inspector API)."),
    Rule("introspection:status", SYSTEM_READER, "Read introspection statuses (inspector API)."),
    Rule("introspection:abort", SYSTEM_ADMIN, "Abort an introspection (inspector API)."),
    Rule("introspection:data", SYSTEM_ADMIN, "Read introspection data (inspector API)."),
    Rule("introspection:reapply", SYSTEM_ADMIN, "Reprocess stored data (inspector API)."),
    Rule("introspection:rule:get", SYSTEM_ADMIN, "List and show rules (inspector API)."),
    Rule("introspection:rule:create", SYSTEM_ADMIN, "Create rules (inspector API)."),
    Rule("introspection:rule:delete", SYSTEM_ADMIN, "Delete rules (inspector API)."),
    Rule("baremetal:port:get", SYSTEM_OR_PROJECT_READER, "Show a port."),
    Rule("baremetal:port:list", API_READER, "List the ports of the project's nodes."),
    Rule("baremetal:port:list_all", SYSTEM_READER, "List every port."),
    Rule("baremetal:port:create", SYSTEM_ADMIN_OR_OWNER_ADMIN, "Create a port."),
    Rule("baremetal:port:delete", SYSTEM_ADMIN_OR_OWNER_ADMIN, "Delete a port."),
    Rule("baremetal:port:update", SYSTEM_MEMBER_OR_OWNER_ADMIN, "Change a port."),
    Rule("baremetal:portgroup:get", SYSTEM_OR_PROJECT_READER, "Show a port group."),
    Rule("baremetal:portgroup:list", API_READER, "List the port groups of the project's nodes."),
    Rule("baremetal:portgroup:list_all", SYSTEM_READER, "List every port group."),
    Rule("baremetal:portgroup:create", SYSTEM_ADMIN_OR_OWNER_ADMIN, "Create a port group."),
    Rule("baremetal:portgroup:delete", SYSTEM_ADMIN_OR_OWNER_ADMIN, "Delete a port group."),
    Rule("baremetal:portgroup:update", SYSTEM_MEMBER_OR_OWNER_ADMIN, "Change a port group."),
    Rule("baremetal:shards:get", SYSTEM_READER, "List shards and their node counts."),
    Rule("baremetal:driver:get", SYSTEM_READER, "List and show drivers.", ("system",)),
    Rule("baremetal:driver:get_properties", SYSTEM_READER, "Driver properties.", ("system",)),
    Rule(
        "baremetal:driver:get_raid_logical_disk_properties",
        SYSTEM_READER,
        "What a logical disk of a driver's RAID configuration may hold.",
        ("system",),
    ),
    Rule(
        "baremetal:driver:vendor_passthru",
        SYSTEM_ADMIN,
        "List and call a driver's vendor methods.",
        ("system",),
    ),
    Rule(
        "baremetal:node:vendor_passthru",
        SYSTEM_ADMIN,
        # Project scope is accepted, as Ironic's, so a policy file may grant owners.
        "List and call a node's vendor methods.",
    ),
    Rule("baremetal:conductor:get", SYSTEM_READER, "List and show conductors."),
    Rule("baremetal:metrics:get", SYSTEM_READER, "Read the cluster's figures (GET /metrics)."),
    Rule(
        "metalforge:firmware_baseline:get",
        SYSTEM_READER,
        "List and show firmware baselines and their drift reports.",
    ),
    Rule("metalforge:firmware_baseline:create", SYSTEM_ADMIN, "Create a firmware baseline."),
    Rule("metalforge:rollout:get", _any(SYSTEM_READER, ROLLOUT_OWNER_READER), "Show a rollout."),
    Rule("metalforge:rollout:list_all", SYSTEM_READER, "List every rollout."),
    Rule("metalforge:rollout:list", API_READER, "List the project's rollouts."),
    Rule(
        "metalforge:rollout:create",
        _any(SYSTEM_MEMBER, "role:admin", "role:manager"),
        "Create a rollout: a project's over the nodes it owns only, and the caller must "
        "also be allowed to change each node's provision state.",
    ),
    Rule(
        "metalforge:rollout:update",
        _any(SYSTEM_MEMBER, ROLLOUT_OWNER_ADMIN),
        "Pause, resume or abort a rollout.",
    ),
    Rule("metalforge:firmware_baseline:delete", SYSTEM_ADMIN, "Delete a firmware baseline."),
    Rule("baremetal:allocation:get", ALLOCATION_READER, "Show an allocation."),
    Rule("baremetal:allocation:list", API_READER, "List the project's allocations."),
    Rule("baremetal:allocation:list_all", SYSTEM_READER, "List every allocation."),
    Rule("baremetal:allocation:create", ALLOCATION_CREATOR, "Create an allocation."),
    Rule(
        "baremetal:allocation:create_restricted",
        SYSTEM_MEMBER,
        "Create an allocation for another project, or with any candidate node.",
    ),
    Rule("baremetal:allocation:delete", ALLOCATION_MEMBER, "Delete an allocation."),
    Rule("baremetal:allocation:update", ALLOCATION_MEMBER, "Change an allocation."),
    Rule("baremetal:node:bios:get", SYSTEM_OR_PROJECT_READER, "Read a node's BIOS settings."),
    Rule("baremetal:node:vmedia:attach", SYSTEM_OR_PROJECT_MEMBER, "Attach virtual media."),
    Rule("baremetal:node:vmedia:detach", SYSTEM_OR_PROJECT_MEMBER, "Detach virtual media."),
    Rule("baremetal:node:vmedia:get", SYSTEM_OR_PROJECT_READER, "List virtual media."),
    Rule(
        "baremetal:node:firmware:get",
        SYSTEM_OR_PROJECT_READER,
        "Read a node's firmware versions.",
    ),
    Rule("baremetal:runbook:get", RUNBOOK_READER, "Show a runbook (any public one too)."),
    Rule("baremetal:runbook:list", API_READER, "List the project's runbooks and public ones."),
    Rule("baremetal:runbook:list_all", SYSTEM_READER, "List every runbook."),
    Rule("baremetal:runbook:create", RUNBOOK_CREATOR, "Create a runbook."),
    Rule("baremetal:runbook:delete", RUNBOOK_ADMIN, "Delete a runbook."),
    Rule("baremetal:runbook:update", RUNBOOK_ADMIN, "Change a runbook and its traits."),
    Rule("baremetal:runbook:update:public", SYSTEM_MEMBER, "Make a runbook public or private."),
    Rule("baremetal:runbook:update:owner", SYSTEM_MEMBER, "Give a runbook to a project."),
    Rule("baremetal:runbook:use", RUNBOOK_ADMIN, "Clean or service a node with a runbook."),
    Rule("baremetal:chassis:get", SYSTEM_READER, "List and show chassis.", ("system",)),
    Rule("baremetal:chassis:create", SYSTEM_ADMIN, "Create a chassis.", ("system",)),
    Rule("baremetal:chassis:update", SYSTEM_MEMBER, "Change a chassis.", ("system",)),
    Rule("baremetal:chassis:delete", SYSTEM_ADMIN, "Delete a chassis.", ("system",)),
    Rule("baremetal:volume:get", SYSTEM_OR_PROJECT_READER, "Show volume connectors and targets."),
    Rule("baremetal:volume:list", API_READER, "List the volume records of the project's nodes."),
    Rule("baremetal:volume:list_all", SYSTEM_READER, "List every volume connector and target."),
    Rule(
        "baremetal:volume:create",
        SYSTEM_MEMBER_OR_OWNER_LESSEE_ADMIN,
        "Create volume connectors and targets.",
    ),
    Rule(
        "baremetal:volume:delete",
        SYSTEM_MEMBER_OR_OWNER_LESSEE_ADMIN,
        "Delete volume connectors and targets.",
    ),
    Rule(
        "baremetal:volume:update",
        SYSTEM_OR_OWNER_MEMBER_AND_LESSEE_ADMIN,
        "Change volume connectors and targets.",
    ),
    Rule(
        "baremetal:volume:view_target_properties",
        TARGET_PROPERTIES_READER,
        "See volume targets' properties (connection details) rather than a redaction notice.",
    ),
    Rule("baremetal:deploy_template:get", SYSTEM_READER, "List and show deploy templates."),
    Rule("baremetal:deploy_template:create", SYSTEM_ADMIN, "Create a deploy template."),
    Rule("baremetal:deploy_template:delete", SYSTEM_ADMIN, "Delete a deploy template."),
    Rule("baremetal:deploy_template:update", SYSTEM_ADMIN, "Change a deploy template."),
    Rule("baremetal:inspection_rule:get", SYSTEM_READER, "List and show inspection rules."),
    Rule(
        "baremetal:inspection_rule:list_all",
        SYSTEM_READER,
        "List every inspection rule (kept for Ironic's policy files; list checks get).",
    ),
    Rule("baremetal:inspection_rule:create", SYSTEM_ADMIN, "Create an inspection rule."),
    Rule("baremetal:inspection_rule:update", SYSTEM_ADMIN, "Change an inspection rule."),
    Rule("baremetal:inspection_rule:delete", SYSTEM_ADMIN, "Delete inspection rules."),
)
RULE_NAMES = frozenset(rule.name for rule in RULES)


class UnknownRule(KeyError):
    """Code asked for a rule nobody registered: a bug, never a silent allow."""


def _enforcer(policy_file: Path | None) -> oslo_policy.Enforcer:
    """oslo.policy with metalforge's rules as defaults and the operator's file over them."""
    conf = cfg.ConfigOpts()
    conf([], project="metalforge", default_config_files=[], default_config_dirs=[])
    enforcer = oslo_policy.Enforcer(
        conf,
        policy_file=str(policy_file) if policy_file else None,
        use_conf=True,
    )
    conf.set_override("enforce_new_defaults", True, group="oslo_policy")
    conf.set_override("policy_dirs", [], group="oslo_policy")
    if policy_file is not None:
        if not policy_file.is_file():
            raise FileNotFoundError(f"policy file {policy_file} does not exist")
        conf.set_override("policy_file", str(policy_file), group="oslo_policy")
    enforcer.register_defaults(
        [
            oslo_policy.RuleDefault(
                rule.name,
                rule.default,
                description=rule.description,
                scope_types=list(rule.scopes) or None,
            )
            for rule in RULES
        ]
    )
    return enforcer


def _warn_unused_rules(enforcer: oslo_policy.Enforcer, policy_file: Path | None) -> None:
    unused = sorted(name for name in enforcer.file_rules if name not in RULE_NAMES and ":" in name)
    if unused:
        # An Ironic policy file names rules for resources metalforge does not
        # serve (runbooks, inspection rules...); they are kept, and said so once.
        LOG.warning("policy file %s: rules metalforge does not use: %s", policy_file, unused)


class Policy:
    """The registered rules, with the operator's overrides, checked for one caller."""

    def __init__(
        self, policy_file: Path | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self._enforcer = _enforcer(policy_file)
        self._policy_file = policy_file
        self._mtime = self._file_mtime()
        self._enforcer.load_rules()
        # Checked for changes here, at most once a second, rather than by
        # oslo.policy on every check (a search of the file system each time).
        self._enforcer.use_conf = False
        self._next_look = clock() + 1.0
        self._reload_lock = threading.Lock()
        self._decisions: dict[tuple[str, Identity, tuple[tuple[str, str], ...]], bool] = {}
        self._monotone: dict[str, bool] = {}
        _warn_unused_rules(self._enforcer, policy_file)

    def _file_mtime(self) -> int:
        try:
            return self._policy_file.stat().st_mtime_ns if self._policy_file else 0
        except OSError:
            return -1

    def _reload_if_changed(self) -> None:
        now = self._clock()
        if now < self._next_look or not self._reload_lock.acquire(blocking=False):
            return
        try:
            self._next_look = now + 1.0
            mtime = self._file_mtime()
            if mtime != self._mtime:
                self._mtime = mtime
                self._enforcer.use_conf = True
                try:
                    self._enforcer.load_rules(force_reload=True)
                except Exception:  # a half-written file breaks any of its parsers
                    # A half-written policy file keeps the rules in force.
                    LOG.exception("policy file %s could not be read", self._policy_file)
                finally:
                    self._enforcer.use_conf = False
                self._decisions.clear()
                self._monotone.clear()
                LOG.info("policy file %s reloaded", self._policy_file)
        finally:
            self._reload_lock.release()

    def allows(self, rule: str, caller: Identity, target: Mapping[str, str] | None = None) -> bool:
        """Whether ``caller`` passes ``rule`` on ``target`` (``node.owner``, ``node.lessee``...).

        A token of the wrong scope for the rule is a refusal, not an error.
        """
        if rule not in RULE_NAMES:
            raise UnknownRule(rule)
        self._reload_if_changed()
        # A decision depends only on the rule, the caller and the target, and
        # oslo.policy takes ~0.1 ms to reach one: remember recent ones.
        key = (rule, caller, tuple(sorted((target or {}).items())))
        decision = self._decisions.get(key)
        if decision is None:
            try:
                decision = bool(
                    self._enforcer.enforce(rule, dict(target or {}), caller.policy_context())
                )
            except oslo_policy.InvalidScope:
                decision = False
            if len(self._decisions) >= 8192:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def allows_any_target(self, rule: str, caller: Identity, target_keys: tuple[str, ...]) -> bool:
        """True only if ``caller`` passes ``rule`` whatever the target's values.

        Lets a guard skip reading a resource's owner when the answer cannot
        depend on it (a system administrator, ``noauth``). Sound because a
        rule built only of and/or over role, rule and field checks is
        monotone: with target values no project can have, every check on
        the target is false, so a rule that passes then passes for any
        target. A rule with ``not`` (or an external check) is never
        shortcut.
        """
        if not self._is_monotone(rule):
            return False
        return self.allows(rule, caller, dict.fromkeys(target_keys, NOBODY))

    def _is_monotone(self, rule: str) -> bool:
        known = self._monotone.get(rule)
        if known is None:
            known = self._monotone[rule] = _monotone(self._enforcer.rules, rule, set())
        return known


def _monotone(rules: Mapping[str, object], name: str, seen: set[str]) -> bool:
    """Whether rule ``name`` is built only of and/or over plain checks (no ``not``)."""
    if name in seen:
        return True
    seen.add(name)
    check = rules.get(name)
    return check is not None and _monotone_check(rules, check, seen)


def _monotone_check(rules: Mapping[str, object], check: object, seen: set[str]) -> bool:
    if isinstance(check, _checks.AndCheck | _checks.OrCheck):
        return all(_monotone_check(rules, sub, seen) for sub in check.rules)
    if isinstance(check, _checks.RuleCheck):
        return _monotone(rules, check.match, seen)
    return type(check) in (
        _checks.GenericCheck,
        _checks.RoleCheck,
        _checks.TrueCheck,
        _checks.FalseCheck,
    )


NOBODY = "\x00nobody"
"""Stands for a missing owner or lessee in a target: no project id can equal it
(an empty string could, for a caller configured with an empty project)."""


def node_target(owner: str | None, lessee: str | None) -> dict[str, str]:
    """The target of a node rule; a missing owner or lessee matches no project."""
    return {"node.owner": owner or NOBODY, "node.lessee": lessee or NOBODY}


def allocation_target(owner: str | None) -> dict[str, str]:
    return {"allocation.owner": owner or NOBODY}


def runbook_target(owner: str | None) -> dict[str, str]:
    return {"runbook.owner": owner or NOBODY}


def rollout_target(owner: str | None) -> dict[str, str]:
    return {"rollout.owner": owner or NOBODY}
