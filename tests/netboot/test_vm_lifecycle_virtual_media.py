"""A QEMU machine provisioned end to end through virtual media (``tests.support.vm_lifecycle``).

For every flow metalforge builds a boot ISO of the real agent ramdisk, the
lab's Redfish BMC downloads it into the machine's CD drive, and the machine
boots it. Nothing answers DHCP on this network: the ramdisk configures the
address of the node's ``network_data``, which metalforge put on the ISO.
After the deploy the machine boots the instance from its disk.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metalforge_lab import namespaces
from tests.support.vm_lab import DnsmasqLog, require
from tests.support.vm_lifecycle import provision_end_to_end

pytestmark = [pytest.mark.slow(longest=True), pytest.mark.timeout(3600)]


def test_a_machine_boots_the_agent_from_virtual_media_without_dhcp_for_every_flow(
    bridge: namespaces.Bridge, dnsmasq_log: DnsmasqLog, tmp_path: Path
) -> None:
    require()
    provision_end_to_end(
        "redfish-virtual-media", "52:54:00:4d:46:12", bridge, dnsmasq_log, tmp_path, static=True
    )
