"""A QEMU machine provisioned end to end through network boot (``tests.support.vm_lifecycle``).

Its firmware (SeaBIOS and the NIC's iPXE) asks metalforge's DHCP service for
its boot file and loads metalforge's iPXE script, which boots the real agent
ramdisk; after the deploy it boots the instance from its disk. Rescued, it
boots the ramdisk again as its rescue system, which lets its user in over
SSH; unrescued, it boots its instance again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metalforge_lab import namespaces
from tests.support.vm_lab import DnsmasqLog, require
from tests.support.vm_lifecycle import provision_end_to_end

pytestmark = [pytest.mark.slow(longest=True), pytest.mark.timeout(3600)]


def test_a_machine_network_boots_the_agent_for_inspect_clean_deploy_rescue_and_undeploy(
    bridge: namespaces.Bridge, dnsmasq_log: DnsmasqLog, tmp_path: Path
) -> None:
    require()
    provision_end_to_end("ipxe", "52:54:00:4d:46:11", bridge, dnsmasq_log, tmp_path, rescue=True)
