"""The agent's session as the deploy interface sees it: client, liveness, reported steps.

Functions of a ``DriverTask``, shared by the ``direct`` deploy interface's
cleaning and deploying halves (``deploy.py``).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from metalforge.db.agent_sessions import AgentSessionInfo
from metalforge.drivers import failures
from metalforge.drivers.agent.client import AgentClient
from metalforge.drivers.base import (
    POWER_OFF,
    POWER_ON,
    REBOOT,
    BootInterface,
    DriverTask,
    PowerInterface,
    StepFailed,
    interface_of,
    set_info,
    switch_power,
)
from metalforge.redaction import mask_secrets


def power_of(task: DriverTask) -> PowerInterface:
    return interface_of(task, PowerInterface, "switch power")


def boot_of(task: DriverTask) -> BootInterface:
    return interface_of(task, BootInterface, "boot a ramdisk")


def boot_ramdisk(task: DriverTask, purpose: str) -> None:
    """Boot the agent's ramdisk with a fresh session (the old agent's token is void first)."""
    task.begin_agent_session()
    boot_of(task).prepare_ramdisk(task)
    power = power_of(task)
    target = REBOOT if power.get_power_state(task) == POWER_ON else POWER_ON
    switch_power(task, power, target)
    task.node.power_state = POWER_ON
    set_info(task, agent_command=None)
    failures.agent_started(task.node.provision_state, "booted")
    task.record("agent", f"booting the ramdisk agent for {purpose}")


def stop_ramdisk(task: DriverTask) -> None:
    """Power the node off, undo the ramdisk's boot (virtual media is ejected) and end the
    agent's session."""
    switch_power(task, power_of(task), POWER_OFF)
    task.node.power_state = POWER_OFF
    leave_ramdisk(task)


def leave_ramdisk(task: DriverTask) -> None:
    """Undo the ramdisk's boot and end the agent's session, whatever the power state: the
    next boot no longer starts the agent, and the running one's token is void."""
    boot_of(task).clean_up_ramdisk(task)
    task.end_agent_session()
    set_info(task, agent_url=None, agent_version=None, agent_last_heartbeat=None)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def merge_agent_steps(reported: Any) -> list[dict[str, Any]]:
    """One list from the agent's ``{manager: [step, ...]}``; the highest priority wins a name.

    What the agent says is checked like any input: an entry that is not a
    well-formed step (``well_formed``) is left out, so nothing an agent
    reports can break the planning that reads the list.
    """
    best: dict[tuple[str, str], dict[str, Any]] = {}
    managers = reported.values() if isinstance(reported, dict) else [reported]
    for steps in managers:
        for raw in steps if isinstance(steps, list) else []:
            step = well_formed(raw)
            if step is None:
                continue
            key = (step["interface"], step["step"])
            if key not in best or step["priority"] > best[key]["priority"]:
                best[key] = step
    return sorted(best.values(), key=lambda s: (-s["priority"], s["step"]))


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
"""A step or interface name as an agent's hardware manager declares one (a method name)."""


def well_formed(raw: Any) -> dict[str, Any] | None:
    """An agent's step with the types planning reads, or ``None`` when it is not one:
    names are identifiers, the priority an integer from 0, ``argsinfo`` an object of
    objects whose ``required`` is a boolean, the flags booleans."""
    if not isinstance(raw, dict):
        return None
    name, interface = raw.get("step"), raw.get("interface", "deploy")
    priority = raw.get("priority") or 0
    argsinfo = raw.get("argsinfo") or {}
    flags = {key: raw.get(key, False) for key in ("abortable", "reboot_requested")}
    checks = (
        isinstance(name, str) and _NAME.fullmatch(name) is not None,
        isinstance(interface, str) and _NAME.fullmatch(interface) is not None,
        type(priority) is int and 0 <= priority < 2**31,
        isinstance(argsinfo, dict)
        and all(
            isinstance(key, str)
            and isinstance(info, dict)
            and isinstance(info.get("required", False), bool)
            for key, info in argsinfo.items()
        ),
        all(isinstance(value, bool) for value in flags.values()),
    )
    if not all(checks):
        return None
    return {**raw, "step": name, "interface": interface, "priority": priority, **flags}


def client_for(task: DriverTask) -> AgentClient:
    session = task.agent_session()
    if session is None or session.agent_url is None or session.token is None:
        raise StepFailed("the ramdisk agent's session ended (it was powered off or rebooted)")
    return AgentClient(
        session.agent_url, session.token, session.verify_ca, task.settings.agent_command_timeout
    )


def show(task: DriverTask, session: AgentSessionInfo | None) -> None:
    """Copy the agent's address, version and last heartbeat where operators look.

    Ironic's clients show them from ``driver_internal_info``; the session
    itself lives in its own table (see db/agent_sessions.py).
    """
    if session is None or session.last_heartbeat_at is None:
        return
    set_info(
        task,
        agent_url=session.agent_url,
        agent_version=session.agent_version,
        agent_last_heartbeat=session.last_heartbeat_at.isoformat(timespec="seconds"),
    )


def agent_up(task: DriverTask) -> bool:
    session = task.agent_session()
    show(task, session)
    return session is not None and session.heard_since_boot


def check_alive(task: DriverTask, what: str) -> None:
    """Fail ``what`` when the agent has not heartbeated within the timeout."""
    session = task.agent_session()
    show(task, session)
    timeout = task.settings.agent_heartbeat_timeout
    last = session.last_heartbeat_at if session is not None else None
    if last is None:
        raise StepFailed(f"the ramdisk agent never heartbeated while running {what}")
    age = (now() - last).total_seconds()
    if age > timeout:
        raise StepFailed(
            f"no heartbeat from the ramdisk agent for {age:.0f}s (timeout {timeout}s) while "
            f"running {what}; last heartbeat at {last.isoformat(timespec='seconds')}"
        )


def cache_steps(task: DriverTask, kind: str) -> None:
    client = client_for(task)
    try:
        params = {"node": node_for_agent(task), "ports": []}
        result = client.run(f"{kind}.get_{kind}_steps", params, wait=True)
    finally:
        client.close()
    if result.status != "SUCCEEDED" or not isinstance(result.result, dict):
        raise StepFailed(f"the agent could not list its {kind} steps: {result.error_message()}")
    reported = result.result.get(f"{kind}_steps", {})
    steps = merge_agent_steps(reported)
    lists = reported.values() if isinstance(reported, dict) else []
    offered = sum(len(entries) for entries in lists if isinstance(entries, list))
    if offered > len(steps):
        task.record(
            "agent",
            f"the agent reported {offered - len(steps)} {kind} step(s) that are malformed or "
            "repeated; they are left out",
            "WARNING",
        )
    set_info(
        task,
        **{
            f"agent_cached_{kind}_steps": steps,
            "agent_hardware_manager_version": result.result.get("hardware_manager_version", {}),
        },
    )
    names = ", ".join(f"{s.get('interface', 'deploy')}.{s['step']}" for s in steps) or "none"
    task.record("agent", f"the agent reported its {kind} steps: {names}")


def node_for_agent(task: DriverTask, *, with_configdrive: bool = False) -> dict[str, Any]:
    """The node as the agent's hardware managers see it: without the config drive
    (it may be large, and holds the tenant's data) unless the step is to write it."""
    node = task.node
    info = mask_secrets(node.instance_info)  # what the agent needs comes in its step's args
    return {
        "uuid": node.uuid,
        "properties": node.properties,
        "instance_info": {k: v for k, v in info.items() if with_configdrive or k != "configdrive"},
        "driver_internal_info": {
            k: v for k, v in node.driver_internal_info.items() if not k.startswith("agent_cached")
        },
        "target_raid_config": node.target_raid_config,
    }
