"""``ramdisk``: the deploy interface whose instance runs from an ISO, nothing written to disk.

Metal3 uses it for a live ISO (a host whose image format is ``live-iso``):
``instance_info.boot_iso`` names the ISO and the node boots it every time,
from the boot interface (``prepare_ramdisk_instance``: on
``redfish-virtual-media``, in the virtual CD, the CD persistent). Its one
deploy step, ``deploy`` (priority 100, out of band), powers the node off,
points its boot at the ISO and powers it on; the node is then ``active``.
Undeploying ejects the ISO and powers the node off. Cleaning, servicing and
rescue are the agent's, as with ``direct`` (the deploy kernel and ramdisk,
or ``deploy_iso``, are then needed as usual).

As in Ironic, ``instance_info.image_source`` and ``boot_iso`` together are
refused, and the boot interface must be able to boot such an instance.
"""

from __future__ import annotations

from metalforge.db.flow_progress import StepKind
from metalforge.drivers.agent.deploy import CustomAgentDeploy
from metalforge.drivers.agent.session import boot_of, power_of
from metalforge.drivers.base import (
    POWER_OFF,
    POWER_ON,
    DriverError,
    DriverTask,
    Interface,
    StepOutcome,
    ramdisk_instance_iso,
    set_info,
    switch_power,
)
from metalforge.drivers.step_declarations import StepDecl, deploy_step


class RamdiskDeploy(CustomAgentDeploy):
    """The instance is an ISO the node boots every time (see the module's docstring)."""

    name = "ramdisk"
    agent_steps_after = None  # no agent runs while it deploys

    def validate(self, task: DriverTask) -> None:
        super().validate(task)
        boot = boot_of(task)
        if not boot.boots_ramdisk_instances:
            raise DriverError(
                f"the ramdisk deploy needs a boot interface that can boot an instance from a "
                f"ramdisk; {boot.name} cannot"
            )
        if task.node.instance_info.get("image_source"):
            raise DriverError(
                "instance_info.image_source and boot_iso cannot both be set: the ramdisk "
                "deploy writes no image"
            )
        ramdisk_instance_iso(task)

    def properties(self) -> dict[str, str]:
        return {}

    @deploy_step(priority=100)
    def deploy(self, task: DriverTask) -> StepOutcome:
        """Power off, point the node's boot at ``instance_info.boot_iso``, power on."""
        power = power_of(task)
        switch_power(task, power, POWER_OFF)
        if task.node.instance_info.get("configdrive"):
            task.record(
                "deploy",
                "the ramdisk deploy does not hand a config drive to the instance; it is kept "
                "in instance_info only",
                "WARNING",
            )
        boot_of(task).prepare_ramdisk_instance(task)
        switch_power(task, power, POWER_ON)
        task.node.power_state = POWER_ON
        return "done"

    def get_steps(self, task: DriverTask, kind: StepKind) -> list[StepDecl]:
        """Its deploy steps are its own: no agent runs while it deploys."""
        if kind == "deploy":
            return Interface.get_steps(self, task, kind)
        return super().get_steps(task, kind)

    # The agent deploy's other deploy steps leave the agent: none here.
    def prepare_instance_boot(self, task: DriverTask) -> None:
        raise DriverError("the ramdisk deploy boots its instance in its deploy step")

    def tear_down_agent(self, task: DriverTask) -> None:
        raise DriverError("the ramdisk deploy runs no agent while deploying")

    def boot_instance(self, task: DriverTask) -> None:
        raise DriverError("the ramdisk deploy powers its instance on in its deploy step")

    def tear_down(self, task: DriverTask) -> None:
        """Eject the instance's ISO and power the node off."""
        boot_of(task).clean_up_instance(task)
        if not task.node.disable_power_off:
            switch_power(task, power_of(task), POWER_OFF)
            task.node.power_state = POWER_OFF
        set_info(task, agent_cached_deploy_steps=None)
