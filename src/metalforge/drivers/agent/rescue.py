"""``agent``: rescue a deployed node by booting the agent ramdisk as its rescue system.

Ironic's rescue through ironic-python-agent: the node boots the agent's
ramdisk (through its boot interface, as for cleaning) with a fresh session;
once the agent has looked itself up and heartbeats, the conductor sends it
``rescue.finalize_rescue`` with the hashed password. The agent writes the
hash where the ramdisk's own start-up finds it, stops its API and exits, and
the ramdisk lets the tenant in as ``rescue`` with that password (the ramdisk
``make ramdisk`` builds: SSH and the serial console). Unrescue powers the
node off, undoes the ramdisk's boot and boots the instance from its disk.

The password is hashed as soon as the request is taken (bcrypt, which
Linux's libxcrypt reads in ``/etc/shadow``); its plain text is removed from
the node then, and the hash once the agent has it.
"""

from __future__ import annotations

import bcrypt

from metalforge.drivers.agent.client import AgentError
from metalforge.drivers.agent.session import (
    agent_up,
    boot_of,
    boot_ramdisk,
    client_for,
    power_of,
    stop_ramdisk,
)
from metalforge.drivers.base import (
    POWER_OFF,
    POWER_ON,
    DriverError,
    DriverTask,
    RescueInterface,
    StepFailed,
    StepOutcome,
    set_info,
    switch_power,
)

PASSWORD = "rescue_password"
"""Where the request leaves the plain password in ``instance_info`` (Ironic's key)."""
HASHED = "hashed_rescue_password"
"""Where the hash waits for the agent, in ``instance_info`` (Ironic's key)."""
MAX_PASSWORD_BYTES = 72
"""bcrypt reads no further: a longer password would be cut without a word."""
BCRYPT_ROUNDS = 12


def _without_passwords(task: DriverTask) -> None:
    info = dict(task.node.instance_info)
    info.pop(PASSWORD, None)
    info.pop(HASHED, None)
    task.node.instance_info = info


class AgentRescue(RescueInterface):
    """The agent ramdisk is the rescue system; the tenant logs in as ``rescue``."""

    name = "agent"

    def validate(self, task: DriverTask) -> None:
        boot_of(task).validate(task)

    def properties(self) -> dict[str, str]:
        return {}

    def check_password(self, password: str) -> None:
        if len(password.encode()) > MAX_PASSWORD_BYTES:
            raise DriverError(
                f"rescue_password must be at most {MAX_PASSWORD_BYTES} bytes for the agent "
                "rescue interface"
            )

    def rescue(self, task: DriverTask) -> StepOutcome:
        info = dict(task.node.instance_info)
        password = info.pop(PASSWORD, None)
        if isinstance(password, str) and password.strip():
            self.check_password(password)
            hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS))
            info[HASHED] = hashed.decode()
        elif not isinstance(info.get(HASHED), str):
            raise DriverError("no rescue_password was given for the rescue user")
        task.node.instance_info = info
        boot_of(task).clean_up_instance(task)
        boot_ramdisk(task, "rescue")
        return "wait"

    def check_rescued(self, task: DriverTask) -> StepOutcome:
        if not agent_up(task):
            return "wait"
        hashed = task.node.instance_info.get(HASHED)
        if not isinstance(hashed, str):
            raise DriverError("the rescue password's hash is gone from instance_info")
        try:
            client = client_for(task)
        except StepFailed as exc:
            raise DriverError(str(exc)) from None
        try:
            result = client.run(
                "rescue.finalize_rescue", {"rescue_password": hashed, "hashed": True}, wait=True
            )
        except AgentError as exc:
            raise DriverError(f"the agent could not set up the rescue user: {exc}") from None
        finally:
            client.close()
        if result.status != "SUCCEEDED":
            raise DriverError(
                f"the agent could not set up the rescue user: {result.error_message()}"
            )
        # The agent has stopped its API and its heartbeats. Its session (the ramdisk's
        # boot) lasts until unrescue, which keeps the rescue system's address on the
        # provisioning network; its token opens nothing while the node is rescued.
        _without_passwords(task)
        set_info(task, agent_url=None, agent_version=None, agent_last_heartbeat=None)
        return "done"

    def clean_up(self, task: DriverTask) -> None:
        _without_passwords(task)
        stop_ramdisk(task)

    def unrescue(self, task: DriverTask) -> None:
        _without_passwords(task)
        power = power_of(task)
        switch_power(task, power, POWER_OFF)
        task.node.power_state = POWER_OFF
        boot = boot_of(task)
        boot.clean_up_ramdisk(task)
        task.end_agent_session()
        boot.prepare_instance(task)
        switch_power(task, power, POWER_ON)
        task.node.power_state = POWER_ON
