"""``direct``: the deploy interface that drives ironic-python-agent (IPA).

Work in progress: the agent protocol lands here.
"""

from __future__ import annotations

from metalforge.drivers.base import DeployInterface, DriverTask


class AgentDeploy(DeployInterface):
    """Deploy and clean through the ramdisk agent."""

    name = "direct"

    def validate(self, task: DriverTask) -> None:
        return None

    def tear_down(self, task: DriverTask) -> None:
        return None
