"""One QEMU machine provisioned from ``enroll`` to ``available`` again, on the real agent.

The machine is behind the lab's Redfish BMC, has a 5 GiB virtual disk (a raw
file the test reads) and boots ``make ramdisk``'s kernel and initramfs (the
``cloud`` kernel) from its firmware: over the network through metalforge's
DHCP service and iPXE (``ipxe``), or from the ISO metalforge built for it
(``redfish-virtual-media``; with ``static`` on a network where nothing
answers DHCP, so the ramdisk takes its address from the node's
``network_data``, which metalforge put on the ISO). It is inspected, cleaned (the agent erases the
disk's metadata), deployed (the agent writes a bootable image and, after
it, the config drive metalforge built from the JSON one Metal3 would send,
except with ``static``; the machine then boots the image from its disk and
says so on its serial console) and
undeployed (cleaned again). Fast track is on: the agent the inspection boots
also cleans and deploys, so the ramdisk boots twice in all, not four times.
The network-booted one is also rescued on the way: its ramdisk becomes the
rescue system, logged in to over SSH.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from metalforge_lab import agent_ramdisk, instance_image, namespaces
from metalforge_lab.ports import free_port
from metalforge_lab.redfish_emulator import EmulatorProcess, FakeSystem
from tests.support.api import LATEST, get_node, provision, wait_until
from tests.support.lab import image_server
from tests.support.vm_lab import DnsmasqLog, all_in_one, lab_settings, missing

REPOSITORY = Path(__file__).resolve().parents[2]
RAMDISK_DIR = REPOSITORY / "var" / "ramdisk-cloud"
"""Where ``make test`` builds the ramdisk before the suite (a test builds it if absent), and
``make run LAB_MACHINES=qemu`` finds it."""

DISK_BYTES = 5 << 30
"""The agent installs on a disk of 4 GiB or more; the raw file stays sparse."""
MEMORY_MIB = 2048
_MBR_SECOND_ENTRY, _MBR_END = 446 + 16, 510
"""Where the MBR's second partition entry starts, and where its table ends."""
CONFIG_DRIVE_USER_DATA = "#cloud-config\n# metalforge-vm-config-drive\n"
"""The user data of the deployment's config drive, found on the disk afterwards."""
"""The ramdisk unpacks into memory (about 500 MiB) and the agent runs beside it."""
FLOW_TIMEOUT = 900.0
"""Seconds for one flow: a boot of the ramdisk and the agent's work, under software emulation
on a loaded 2-core machine."""
STOPPED = ("inspect failed", "clean failed", "deploy failed", "error")


def agent_ramdisk_for_tests() -> agent_ramdisk.AgentRamdisk:
    """The ramdisk the VMs boot, built once per checkout (root, Debian's mirror and PyPI)."""
    if lacking := agent_ramdisk.missing_tools() + instance_image.missing_tools():
        missing(f"building the ramdisk and the instance needs {', '.join(lacking)}")
    return agent_ramdisk.build(RAMDISK_DIR, kernel="cloud")


@dataclass
class Machine:
    emulator: EmulatorProcess
    console: Path
    disk: Path

    def console_text(self) -> str:
        return self.console.read_text(errors="replace") if self.console.exists() else ""

    def disk_head(self, size: int = 1 << 20) -> bytes:
        with self.disk.open("rb") as handle:
            return handle.read(size)

    def disk_tail(self, size: int) -> bytes:
        with self.disk.open("rb") as handle:
            handle.seek(-size, os.SEEK_END)
            return handle.read(size)


def machine_behind_bmc(
    bridge: namespaces.Bridge, tmp_path: Path, mac: str, tap: str
) -> EmulatorProcess:
    """A Redfish BMC whose one system is a QEMU machine with a disk full of old data."""
    disk = tmp_path / "disk.raw"
    with disk.open("wb") as handle:
        handle.write(os.urandom(1 << 20))  # a previous tenant's data, for cleaning to erase
        handle.truncate(DISK_BYTES)
    system = FakeSystem(
        uuid=str(uuid.uuid4()),
        name=tap,
        macs=[mac],
        machine={
            "tap": tap,
            "bridge": bridge.name,
            "console": str(tmp_path / "console.log"),
            "disk": str(disk),
            "memory_mib": MEMORY_MIB,
        },
    )
    return EmulatorProcess(tmp_path / "bmc", free_port(), [system])


def _history(client: Any, node: str) -> list[str]:
    response = client.get(f"/v1/nodes/{node}/history?detail=true", headers=LATEST)
    return [f"{e['severity']} {e['event']}" for e in response.json()["history"]]


def wait_for(client: Any, node: str, wanted: str, console: Machine) -> dict[str, Any]:
    """Until the node is ``wanted`` and settled; fails early on a failed state, with the
    node's last events and the console's tail."""
    seen: dict[str, Any] = {}

    def arrived() -> bool:
        seen.update(get_node(client, node))
        state = seen["provision_state"]
        if state in STOPPED and state != wanted:
            pytest.fail(
                f"the node stopped in {state}: {seen['last_error']}\n"
                f"history: {_history(client, node)[-8:]}\n"
                f"console: {console.console_text()[-3000:]}"
            )
        return bool(state == wanted and seen["target_provision_state"] is None)

    try:
        wait_until(f"the node to become {wanted}", arrived, timeout=FLOW_TIMEOUT)
    except AssertionError:
        pytest.fail(
            f"the node is {seen.get('provision_state')}, not {wanted}; last_error: "
            f"{seen.get('last_error')}\nhistory: {_history(client, node)[-8:]}\n"
            f"console: {console.console_text()[-3000:]}"
        )
    return seen


RESCUE_PASSWORD = "c0rrect horse"


def rescue_and_back(client: Any, node: str, machine: Machine, tmp_path: Path) -> None:
    """Rescue the deployed machine: its ramdisk lets ``rescue`` in over SSH with the
    password, as root through sudo; unrescue boots the instance from its disk again."""
    instance_boots = machine.console_text().count(instance_image.MARK)
    assert provision(client, node, "rescue", rescue_password=RESCUE_PASSWORD).status_code == 202
    rescued = wait_for(client, node, "rescue", machine)
    assert rescued["last_error"] is None
    assert "rescue_password" not in rescued["instance_info"]
    assert "hashed_rescue_password" not in rescued["instance_info"]
    ready = f"{agent_ramdisk.MARK} rescue ready"
    wait_until(
        "the rescue system to let its user in",
        lambda: ready in machine.console_text(),
        timeout=FLOW_TIMEOUT,
    )
    console = machine.console_text()
    network = console[: console.rindex(ready)].rsplit(f"{agent_ramdisk.MARK} network ", 1)[1]
    address = network.split()[1].split("/")[0]
    login = subprocess.run(
        [
            "dbclient", "-y", "-y", "-o", "ConnectTimeout=30", f"rescue@{address}",
            "sudo id -un; hostname -I",
        ],
        env={**os.environ, "DROPBEAR_PASSWORD": RESCUE_PASSWORD, "HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert login.returncode == 0, login.stderr
    assert login.stdout.split()[:2] == ["root", address], login.stdout
    refused = subprocess.run(
        ["dbclient", "-y", "-y", f"rescue@{address}", "true"],
        env={**os.environ, "DROPBEAR_PASSWORD": "wrong", "HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode != 0, "the rescue user took a wrong password"

    assert provision(client, node, "unrescue").status_code == 202
    back = wait_for(client, node, "active", machine)
    assert back["power_state"] == "power on"
    wait_until(
        "the machine to boot its instance again",
        lambda: machine.console_text().count(instance_image.MARK) > instance_boots,
        timeout=FLOW_TIMEOUT,
    )


def provision_end_to_end(  # noqa: PLR0915 - one linear enroll-to-undeploy scenario
    boot: str,
    mac: str,
    bridge: namespaces.Bridge,
    dnsmasq_log: DnsmasqLog,
    tmp_path: Path,
    *,
    static: bool = False,
    rescue: bool = False,
) -> None:
    """The whole cycle on one machine booted through ``boot`` (module doc); with ``rescue``,
    the deployed machine is rescued (and logged in to) and unrescued before the undeploy."""
    ramdisk = agent_ramdisk_for_tests()
    image = instance_image.build(tmp_path / "instance")  # each test its own: they run at once
    images = tmp_path / "images"
    images.mkdir()
    (images / "instance.raw").write_bytes(image.read_bytes())
    checksum = hashlib.sha256(image.read_bytes()).hexdigest()
    emulator = machine_behind_bmc(bridge, tmp_path, mac, f"mfl{boot[:2]}{os.getpid() % 100000}")
    settings = lab_settings(
        bridge,
        ramdisk.kernel.parent,
        tmp_path,
        # The agent erases metadata only: writing 5 GiB under emulation would take an hour.
        conductor={"clean_step_priority_override": ["deploy.erase_devices:0"]},
        kernel_append="ipa-lldp-timeout=5",
        dhcp_service=not static,
    )
    address = f"{bridge.network.network_address + 50}/{bridge.network.prefixlen}"
    network_data = {
        "links": [{"id": "nic0", "type": "phy", "ethernet_mac_address": mac}],
        "networks": [
            {
                "id": "provisioning",
                "type": "ipv4",
                "link": "nic0",
                "ip_address": address.split("/")[0],
                "netmask": str(bridge.network.netmask),
                "routes": [],
            }
        ],
        "services": [],
    }
    machine = Machine(emulator, tmp_path / "console.log", tmp_path / "disk.raw")
    old_data = machine.disk_head()
    emulator.start()
    try:
        with all_in_one(settings) as running, image_server(images, bridge.address) as served:
            client = running.client
            created = client.post(
                "/v1/nodes",
                json={
                    "driver": "redfish",
                    "name": f"vm-{boot}",
                    "boot_interface": boot,
                    "deploy_interface": "direct",
                    "inspect_interface": "agent",
                    "rescue_interface": "agent" if rescue else "no-rescue",
                    **({"network_data": network_data} if static else {}),
                    "driver_info": {
                        "redfish_address": emulator.address,
                        "redfish_system_id": emulator.system_path(emulator.systems[0].uuid),
                        "deploy_kernel": str(ramdisk.kernel),
                        "deploy_ramdisk": str(ramdisk.initramfs),
                        # One boot of the agent serves inspect, provide and deploy.
                        "fast_track": True,
                    },
                },
                headers=LATEST,
            )
            assert created.status_code == 201, created.text
            node = created.json()["uuid"]
            port = client.post(
                "/v1/ports", json={"address": mac, "node_uuid": node}, headers=LATEST
            )
            assert port.status_code == 201, port.text

            assert provision(client, node, "manage").status_code == 202
            wait_for(client, node, "manageable", machine)

            # inspect: the agent reports the machine's hardware.
            assert provision(client, node, "inspect").status_code == 202
            if boot == "redfish-virtual-media":
                http_url = str(settings.conductor.netboot.http_url)
                inserted = wait_until(
                    "the ISO's URL on the node",
                    lambda: get_node(client, node)["driver_internal_info"].get(
                        "redfish_virtual_media"
                    ),
                    timeout=FLOW_TIMEOUT,
                )
                assert inserted.startswith(f"{http_url}/boot/images/"), inserted
            inspected = wait_for(client, node, "manageable", machine)
            if boot == "redfish-virtual-media":  # ejected when the flow ended
                assert "redfish_virtual_media" not in inspected["driver_internal_info"]
            assert inspected["properties"]["memory_mb"] > 0, inspected["properties"]
            assert inspected["properties"]["cpus"] == 1
            inventory = client.get(f"/v1/nodes/{node}/inventory", headers=LATEST)
            assert inventory.status_code == 200, inventory.text
            disks = inventory.json()["inventory"]["disks"]
            assert [d["size"] for d in disks if d["name"] == "/dev/vda"] == [DISK_BYTES], disks
            interfaces = inventory.json()["inventory"]["interfaces"]
            assert mac in {i["mac_address"] for i in interfaces}

            # provide: automated cleaning erases the previous tenant's disk metadata, with
            # the agent the inspection left running (fast track), which stays up.
            assert provision(client, node, "provide").status_code == 202
            available = wait_for(client, node, "available", machine)
            assert available["power_state"] == "power on"
            assert machine.disk_head() != old_data, "cleaning left the disk as it was"
            assert machine.disk_head(512) == bytes(512), "the disk's first sector survived"

            # deploy: the agent writes the image; the machine then boots it from its disk.
            patched = client.patch(
                f"/v1/nodes/{node}",
                json=[
                    {
                        "op": "add",
                        "path": "/instance_info",
                        "value": {
                            "image_source": f"{served}/instance.raw",
                            "image_checksum": f"sha256:{checksum}",
                        },
                    }
                ],
                headers=LATEST,
            )
            assert patched.status_code == 200, patched.text
            # The config drive as Metal3 gives it, JSON: the conductor builds the ISO and
            # the agent writes it into a partition of its own at the end of the disk. Not
            # with ``static``: the ramdisk's init takes its network from the first volume
            # labelled config-2, which would then be the disk's, not the boot ISO's.
            drive = {"meta_data": {"metal3-name": "vm"}, "user_data": CONFIG_DRIVE_USER_DATA}
            extra = {} if static else {"configdrive": drive}
            assert provision(client, node, "active", **extra).status_code == 202
            active = wait_for(client, node, "active", machine)
            assert active["last_error"] is None
            written = image.read_bytes()[: 1 << 20]  # boot code, partition table, boot sector
            head = machine.disk_head(len(written))
            # The MBR's partition table gained the config drive's entry after the image's one.
            kept = (slice(0, _MBR_SECOND_ENTRY), slice(_MBR_END, len(written)))
            assert all(head[part] == written[part] for part in kept), "the disk lacks the image"
            if not static:
                assert head[_MBR_SECOND_ENTRY:_MBR_END] != written[_MBR_SECOND_ENTRY:_MBR_END]
                tail = machine.disk_tail(65 << 20)
                assert b"config-2" in tail, "no config drive at the end of the disk"
                assert CONFIG_DRIVE_USER_DATA.encode() in tail, "the drive lacks the user data"
            wait_until(
                "the machine to boot its instance from its disk",
                lambda: instance_image.MARK in machine.console_text(),
                timeout=FLOW_TIMEOUT,
            )

            if rescue:
                rescue_and_back(client, node, machine, tmp_path)

            # undeploy: cleaned again, the image's partition table is gone.
            assert provision(client, node, "deleted").status_code == 202
            wait_for(client, node, "available", machine)
            assert machine.disk_head(512) == bytes(512), "the deployed image survived cleaning"

            console = machine.console_text()
            boots = console.count(f"{agent_ramdisk.MARK} init")
            wanted = 3 if rescue else 2
            assert boots == wanted, f"inspect (kept for clean, deploy), (rescue,) clean: {boots}"
            events = [line for line in _history(client, node) if "(fast track)" in line]
            assert any("kept running for cleaning" in line for line in events), events
            assert any("kept running for deployment" in line for line in events), events
            if static:
                assert console.count(f"{agent_ramdisk.MARK} network ") == wanted
                assert console.count(f" {address} ") >= wanted, "the address is not network_data's"
                assert not dnsmasq_log.lines, "nothing answers DHCP on this network"
                return
            if boot == "ipxe":
                assert dnsmasq_log.saw("PXEClient") or dnsmasq_log.saw("iPXE")
            else:
                assert not dnsmasq_log.saw("PXEClient"), "the firmware network-booted"
            assert dnsmasq_log.saw("DHCPACK", mac)
    finally:
        emulator.stop()
