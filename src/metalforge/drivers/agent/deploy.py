"""``custom-agent`` and ``direct``: the deploy interfaces that drive ironic-python-agent (IPA).

The node boots the agent ramdisk (through its boot and power interfaces);
the agent looks itself up, heartbeats, and from then on runs the steps the
conductor sends it through its command API. Cleaning and deploying both
wait for the first heartbeat of *this* boot: an earlier agent's session is
voided before the node powers on (``begin_agent_session``).

What the conductor keeps on the node (``driver_internal_info``):

``agent_cached_clean_steps`` / ``agent_cached_deploy_steps``
    The steps the agent reported, by hardware manager, refreshed at every
    ramdisk boot; the step catalogue is served from them.
``agent_hardware_manager_version``
    Sent back with every step: the agent refuses a step planned against
    other hardware managers.
``agent_command``
    The asynchronous command being waited on (id, name, step).
``erasure_records``
    Per-disk records of the last cleaning's erase steps (see ``erasure``).

An agent step is polled, not pushed: every check asks the agent for the
command's status. Heartbeats only prove the agent is alive; a step fails
when none arrived for ``agent_heartbeat_timeout`` seconds, naming the step
and the last heartbeat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, cast, get_args

from metalforge.db.flow_progress import StepKind
from metalforge.drivers.agent import configdrive as config_drive
from metalforge.drivers.agent import erasure, fast_track
from metalforge.drivers.agent.client import (
    AgentBusy,
    AgentClient,
    AgentError,
    AgentUnreachable,
    CommandResult,
)
from metalforge.drivers.agent.image import image_info, oci_image_info
from metalforge.drivers.agent.session import (
    agent_up,
    boot_of,
    boot_ramdisk,
    cache_steps,
    check_alive,
    client_for,
    leave_ramdisk,
    node_for_agent,
    now,
    power_of,
    stop_ramdisk,
    well_formed,
)
from metalforge.drivers.base import (
    POWER_OFF,
    POWER_ON,
    REBOOT,
    DeployInterface,
    DriverError,
    DriverTask,
    StepFailed,
    StepOutcome,
    StepsChanged,
    StepsNotKnown,
    set_info,
    switch_power,
)
from metalforge.drivers.step_declarations import StepDecl, deploy_step, parse_argsinfo
from metalforge.netboot import oci
from metalforge.netboot.images import ImageError

ERASE_STEPS = frozenset({"erase_devices", "erase_devices_metadata"})
"""Clean steps whose results are erasure records."""


AGENT_BOOT_RETRY = 30
"""Seconds to suggest between catalogue requests while the agent's ramdisk boots."""


def _step_kind(command: str) -> StepKind:
    """Whose steps an agent command ran (``service.execute_service_step``: servicing's).

    The prefix is the step kind the command was started for; any other is a record this
    service did not write, refused rather than read as some kind's.
    """
    prefix = command.split(".", 1)[0]
    for kind in get_args(StepKind):
        if prefix == kind:
            return cast(StepKind, kind)
    raise StepFailed(f"the recorded agent command {command!r} runs no kind of step")


class CustomAgentDeploy(DeployInterface):
    """Deploy, clean and service through the ramdisk agent; the deployment's work between
    booting the agent and booting the instance is the agent's own deploy steps.

    ``custom-agent`` writes no image itself: the operator's hardware manager
    does, in an in-band deploy step the deployment requests (Metal3's custom
    deploy, priority 80) or one the agent enables. ``direct`` adds
    ``write_image``.
    """

    name = "custom-agent"
    boots_ramdisk = True
    agent_steps_after: ClassVar[str | None] = "deploy"

    def validate(self, task: DriverTask) -> None:
        fast_track.enabled(task)  # a fast_track that is neither true nor false is refused

    def properties(self) -> dict[str, str]:
        return {}

    # The ramdisk -----------------------------------------------------------

    def _boot_ramdisk(self, task: DriverTask, purpose: str) -> None:
        boot_ramdisk(task, purpose)

    def _stop_ramdisk(self, task: DriverTask) -> None:
        stop_ramdisk(task)

    # Cleaning --------------------------------------------------------------

    def prepare_cleaning(self, task: DriverTask) -> StepOutcome:
        set_info(task, erasure_records=[])
        return fast_track.start(task, "clean", "cleaning")

    def check_cleaning_prepared(self, task: DriverTask) -> StepOutcome:
        return fast_track.agent_ready(task, "clean", "cleaning")

    def tear_down_cleaning(self, task: DriverTask) -> None:
        self._stop_ramdisk(task)
        boot_of(task).clean_up_instance(task)

    def finish_cleaning(self, task: DriverTask) -> None:
        """Stop the agent, or (fast track) leave it running for the deployment to come."""
        if not fast_track.keep(task):
            self._stop_ramdisk(task)
        boot_of(task).clean_up_instance(task)

    def get_steps(self, task: DriverTask, kind: StepKind) -> list[StepDecl]:
        """The declared steps, then the agent's (one named as a declared step is the
        declared one: the agent's is shadowed, as in Ironic)."""
        declared = super().get_steps(task, kind)
        own = {d.method for d in declared}
        reported = self._reported_steps(task, kind)
        return declared + [d for d in reported if d.method not in own]

    def execute_step(
        self, task: DriverTask, kind: StepKind, step: Mapping[str, Any]
    ) -> StepOutcome:
        if self._declares(step, kind):
            return super().execute_step(task, kind, step)
        self._start_agent_step(task, kind, step)
        return "wait"

    def _reported_steps(self, task: DriverTask, kind: StepKind) -> list[StepDecl]:
        """This interface's ``kind`` steps as the agent last reported them."""
        cached = task.node.driver_internal_info.get(f"agent_cached_{kind}_steps")
        if cached is None:
            booting = task.progress.ramdisk_booting_since is not None
            raise StepsNotKnown(
                f"the ramdisk agent has not reported its {kind} steps yet; it reports them "
                "once it has booted on the node in a flow that runs them",
                # While the ramdisk boots the answer is a boot away; otherwise nobody
                # knows when an agent will run (seed 002: -1).
                retry_after=AGENT_BOOT_RETRY if booting else -1,
            )
        # Checked again: a cache written by an older release was not checked when stored.
        steps = list(map(well_formed, cached if isinstance(cached, list) else []))
        return [
            StepDecl(
                kind,
                step["step"],
                step["priority"],
                step["abortable"],
                parse_argsinfo(step.get("argsinfo")),
                requires_ramdisk=True,
                asynchronous=True,
                in_band=True,
            )
            for step in steps
            if step is not None and step["interface"] == self.interface_type
        ]

    def _declares(self, step: Mapping[str, Any], kind: StepKind) -> bool:
        """Whether ``step`` is one of this class's own (out-of-band), not the agent's."""
        return any(d.method == step["step"] and d.kind == kind for d in self.steps())

    def _start_agent_step(self, task: DriverTask, kind: StepKind, step: Mapping[str, Any]) -> None:
        """Have the agent run ``step`` (``clean.execute_clean_step``, ``service.execute_...``),
        with the hardware managers' versions the plan was made against.

        A deploy step gets the config drive in the node's ``instance_info``, as
        Ironic sends it: a custom hardware manager that writes the instance
        writes its config drive too (Metal3's ``install_coreos`` reads it there).
        """
        name = str(step["step"])
        agent_step = {
            "interface": self.interface_type,
            "step": name,
            "priority": step.get("priority", 0),
            "args": dict(step.get("args") or {}),
            "abortable": bool(step.get("abortable", False)),
            "reboot_requested": False,
        }
        self._start(
            task,
            f"{kind}.execute_{kind}_step",
            {
                "step": agent_step,
                "node": node_for_agent(task, with_configdrive=kind == "deploy"),
                "ports": [],
                f"{kind}_version": task.node.driver_internal_info.get(
                    "agent_hardware_manager_version", {}
                ),
            },
            name,
        )

    # Servicing -------------------------------------------------------------

    def prepare_service(self, task: DriverTask) -> StepOutcome:
        """Boot the agent on the active node; the instance stays on its disk, untouched.

        The node is rebooted (or powered on) into the ramdisk, never left off,
        so ``disable_power_off`` holds here too.
        """
        boot_of(task).clean_up_instance(task)
        self._boot_ramdisk(task, "servicing")
        return "wait"

    def check_service_prepared(self, task: DriverTask) -> StepOutcome:
        if not agent_up(task):
            return "wait"
        cache_steps(task, "service")
        return "done"

    def tear_down_service(self, task: DriverTask) -> None:
        """Stop the agent and boot the instance again.

        A node with ``disable_power_off`` is never switched off: the agent is
        locked down first (it stops serving and takes its interfaces down, so
        nothing can reach it until the reboot), then the node reboots into
        its instance.
        """
        power = power_of(task)
        if task.node.disable_power_off:
            self._lock_down(task)
            leave_ramdisk(task)
            boot_of(task).prepare_instance(task)
            switch_power(task, power, REBOOT)
        else:
            self._stop_ramdisk(task)
            boot_of(task).prepare_instance(task)
            switch_power(task, power, POWER_ON)
        task.node.power_state = POWER_ON
        task.record("agent", "the node boots its instance again")

    @staticmethod
    def _lock_down(task: DriverTask) -> None:
        """Ask the agent to lock itself down; one that no longer answers is no failure
        (the reboot that follows ends it anyway)."""
        try:
            client = client_for(task)
        except StepFailed:
            return
        try:
            client.run("system.lockdown", {}, wait=True)
        except AgentError as exc:
            task.record("agent", f"the agent was not locked down before the reboot: {exc}")
        finally:
            client.close()

    # Asynchronous agent commands ------------------------------------------

    def _start(self, task: DriverTask, command: str, params: dict[str, Any], step: str) -> None:
        client = client_for(task)
        try:
            result = client.run(command, params)
        except AgentBusy:
            # The agent runs one command at a time. A conductor that died after
            # starting this step and before recording it leaves it running: the
            # running command of the same kind is that step, so adopt it.
            result = self._running(client, command, step)
        except AgentError as exc:
            raise StepFailed(f"the agent did not start {step}: {exc}") from None
        finally:
            client.close()
        if result.status == "FAILED":
            raise StepFailed(f"the agent failed {step}: {result.error_message()}")
        set_info(task, agent_command={"id": result.id, "name": command, "step": step})

    @staticmethod
    def _running(client: AgentClient, command: str, step: str) -> CommandResult:
        try:
            history = client.commands()
        except AgentError as exc:
            raise StepFailed(f"the agent is busy and did not say with what: {exc}") from None
        short = command.split(".", 1)[1]
        for entry in reversed(history):
            if entry.status == "RUNNING" and entry.name == short:
                return entry
        raise StepFailed(f"the agent is busy with another command; {step} was not started")

    def check_step(self, task: DriverTask, method: str) -> StepOutcome:
        if method == "deploy":
            return self._check_deploy_boot(task)
        command = task.node.driver_internal_info.get("agent_command")
        if not command or command.get("step") != method:
            # Every asynchronous step here but ``deploy`` runs on the agent and
            # records its command first; without the record, success is unknown.
            raise StepFailed(
                f"no record of the agent command running {self.interface_type}.{method}; "
                "it cannot be told whether the step ran"
            )
        what = f"{self.interface_type}.{method}"
        client = client_for(task)
        try:
            result = client.command(str(command["id"]))
        except AgentUnreachable:
            check_alive(task, what)
            return "wait"
        except AgentError as exc:
            raise StepFailed(str(exc)) from None
        finally:
            client.close()
        if result is None:
            raise StepFailed(
                f"the agent no longer knows command {command['id']} ({what}): it has restarted"
            )
        if result.status == "RUNNING":
            check_alive(task, what)
            # Alive and working: the step's wait timeout counts from now (noted
            # every few seconds, not at every poll, to spare the database).
            now = task.now()
            progress = task.progress
            if now - (progress.step_heartbeat_at or 0.0) > 5:
                task.progress = dataclasses.replace(progress, step_heartbeat_at=now)
            return "wait"
        set_info(task, agent_command=None)
        if result.status == "SUCCEEDED":
            self._finished(task, method, result)
            return "done"
        if result.status == "CLEAN_VERSION_MISMATCH":
            # (The agent's name for any step's version mismatch.) Read what the
            # agent offers now (and its managers' versions), so the flow plans
            # again from the steps it would run.
            cache_steps(task, _step_kind(str(command.get("name", ""))))
            raise StepsChanged(
                f"the agent's hardware managers changed since the plan was made; {what} was not run"
            )
        raise StepFailed(f"the agent reported a failure: {result.error_message()}")

    def _finished(self, task: DriverTask, method: str, result: CommandResult) -> None:
        if method not in ERASE_STEPS or not isinstance(result.result, dict):
            return
        records = erasure.records_from_result(
            result.result.get("clean_result"), method, now().isoformat(timespec="seconds")
        )
        if not records:
            return
        kept = list(task.node.driver_internal_info.get("erasure_records", []))
        set_info(task, erasure_records=kept + list(records))
        for record in records:
            task.record("erasure", erasure.describe(record))

    def abort_step(self, task: DriverTask, method: str) -> None:
        # The agent cannot stop a running step; powering the node off does (a reboot,
        # on a node that must never be switched off).
        set_info(task, agent_command=None)
        try:
            if task.node.disable_power_off:
                switch_power(task, power_of(task), REBOOT)
                leave_ramdisk(task)
            else:
                self._stop_ramdisk(task)
        except DriverError as exc:
            task.record("agent", f"could not stop the agent to abort {method}: {exc}", "WARNING")

    # Deploying -------------------------------------------------------------

    @deploy_step(priority=100, asynchronous=True)
    def deploy(self, task: DriverTask) -> StepOutcome:
        """Boot the agent ramdisk (or, fast track, use the one cleaning left running) and
        wait for its heartbeat."""
        return fast_track.start(task, "deploy", "deployment")

    def _check_deploy_boot(self, task: DriverTask) -> StepOutcome:
        return fast_track.agent_ready(task, "deploy", "deployment")

    @deploy_step(priority=60)
    def prepare_instance_boot(self, task: DriverTask) -> None:
        """Make the written disk the node's boot device."""
        boot_of(task).prepare_instance(task)

    @deploy_step(priority=40)
    def tear_down_agent(self, task: DriverTask) -> None:
        """Power the node off: the agent's work is done.

        The agent is asked first (``standby.power_off``): it flushes the disks
        and shuts its system down cleanly. If the node is still on after
        ``agent_power_off_timeout`` seconds, or the agent refuses, the BMC
        switches it off.
        """
        if self._agent_powers_off(task):
            task.node.power_state = POWER_OFF
            task.end_agent_session()
            set_info(task, agent_url=None, agent_version=None, agent_last_heartbeat=None)
            task.record("agent", "the agent powered the node off")
            return
        self._stop_ramdisk(task)

    def _agent_powers_off(self, task: DriverTask) -> bool:
        power = power_of(task)
        try:
            client = client_for(task)
        except StepFailed:
            return False
        try:
            command = client.run("standby.power_off", {})
            deadline = task.now() + task.settings.agent_power_off_timeout
            while task.now() < deadline:
                if power.get_power_state(task) == POWER_OFF:
                    return True
                try:
                    current = client.command(command.id)
                except AgentUnreachable:
                    current = None  # expected: the agent goes down with its system
                if current is not None and current.status == "FAILED":
                    task.record(
                        "agent",
                        f"the agent could not power the node off ({current.error_message()}); "
                        "powering off through the BMC",
                        "WARNING",
                    )
                    return False
                task.sleep(0.5)
        except AgentError as exc:
            task.record("agent", f"the agent was not asked to power off: {exc}", "WARNING")
            return False
        finally:
            client.close()
        task.record(
            "agent",
            f"the node was still on {task.settings.agent_power_off_timeout:.0f}s after the agent "
            "was asked to power off; powering off through the BMC",
            "WARNING",
        )
        return False

    @deploy_step(priority=20)
    def boot_instance(self, task: DriverTask) -> None:
        """Power the node on into its instance."""
        switch_power(task, power_of(task), POWER_ON)
        task.node.power_state = POWER_ON

    def tear_down(self, task: DriverTask) -> None:
        self._stop_ramdisk(task)
        boot_of(task).clean_up_instance(task)
        set_info(task, agent_cached_deploy_steps=None)


class AgentDeploy(CustomAgentDeploy):
    """``direct``: the conductor has the agent write the instance's image (``write_image``)."""

    name = "direct"

    @deploy_step(priority=80, asynchronous=True)
    def write_image(self, task: DriverTask) -> StepOutcome:
        """Have the agent download the image, check its hash and write it to the root disk
        (an ``oci://`` image is first resolved to its blob in the registry)."""
        args: dict[str, Any] = {"image_info": self._image_info(task)}
        configdrive = config_drive.for_image(task.node)
        if configdrive is not None:
            args["configdrive"] = configdrive
        self._start(
            task,
            "deploy.execute_deploy_step",
            {
                "step": {
                    "interface": "deploy",
                    "step": "write_image",
                    "priority": 80,
                    "args": args,
                    "reboot_requested": False,
                },
                "node": node_for_agent(task),
                "ports": [],
                "deploy_version": task.node.driver_internal_info.get(
                    "agent_hardware_manager_version", {}
                ),
            },
            "write_image",
        )
        return "wait"

    @staticmethod
    def _image_info(task: DriverTask) -> dict[str, Any]:
        info = task.node.instance_info
        source = info.get("image_source")
        if not (isinstance(source, str) and source.startswith("oci://")):
            return image_info(dict(info), task.node.uuid)
        secret = info.get("image_pull_secret")
        arch = task.node.properties.get("cpu_arch")
        try:
            found = oci.resolve(
                source,
                task.settings.netboot,
                secret=secret if isinstance(secret, str) else None,
                cpu_arch=arch if isinstance(arch, str) else None,
            )
        except ImageError as exc:
            raise StepFailed(f"instance_info.image_source: {exc}") from None
        task.record("deploy", f"{source} is {found.manifest}, layer sha256:{found.sha256}")
        return oci_image_info(found, task.node.uuid)
