"""``agent`` inspection, in band: boot ironic-python-agent, which reports the hardware.

The node boots the ramdisk through its boot interface (PXE or virtual media)
with a fresh agent session, as for cleaning; the agent's inspection
collector posts its inventory to ``/v1/continue_inspection`` (the ramdisk
image or its kernel parameters name that URL: ``ipa-inspection-callback-url``,
or ``ipa-inspection-collectors`` with ``ipa-api-url``), and the conductor
processes it. Once the report is processed (or the inspection is aborted or
times out) the node is powered off and the agent's session ended, unless
fast track keeps the agent running for the next flow (``fast_track``).
"""

from __future__ import annotations

from typing import Literal

from metalforge.drivers.agent import fast_track
from metalforge.drivers.agent.session import boot_of, boot_ramdisk, power_of, stop_ramdisk
from metalforge.drivers.base import DriverTask, InspectInterface


class AgentInspect(InspectInterface):
    """Inspect with the ramdisk agent's inspection collector."""

    name = "agent"
    boots_ramdisk = True

    def validate(self, task: DriverTask) -> None:
        boot_of(task)
        power_of(task)

    def inspect_hardware(self, task: DriverTask) -> Literal["wait"]:
        boot_ramdisk(task, "inspection")
        return "wait"

    def stop_inspection(self, task: DriverTask) -> None:
        stop_ramdisk(task)

    def end_inspection(self, task: DriverTask) -> None:
        """Power off, or (fast track) leave the agent running for the cleaning to come."""
        if not fast_track.keep(task):
            stop_ramdisk(task)
