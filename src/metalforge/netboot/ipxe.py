"""The iPXE scripts metalforge serves, and the kernel parameters the agent boots with.

A machine's iPXE (chainloaded by DHCP, or in its firmware) first fetches
``boot.ipxe``, which asks for the script of each of its network interfaces
in turn by MAC address. A node that is booting the agent's ramdisk gets one
that loads the deploy kernel and ramdisk from metalforge and boots them; any
other machine gets a 404 for every interface, and the chain script exits so
that the firmware goes on to the next boot device (its disk).

Everything interpolated into a script is produced here from checked values
(a MAC, a digest, URLs built from settings): an iPXE script is a program,
and a node's free-form fields never reach it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAC_IN_PATH = re.compile(r"^[0-9a-f]{2}([-:][0-9a-f]{2}){5}$")
"""A MAC as iPXE writes it in the chain script (``${mac:hexhyp}``) or with colons."""

RETRIES = 10
"""Times a node's iPXE tries the kernel and ramdisk again before it gives up."""


def mac_from_path(raw: str) -> str | None:
    """The MAC of a script request (``52-54-00-12-34-56`` or with colons), normalised to
    colons; ``None`` when it is not one."""
    lowered = raw.lower()
    if not MAC_IN_PATH.match(lowered):
        return None
    return lowered.replace("-", ":")


def chain_script(base_url: str) -> str:
    """What DHCP hands an iPXE client: find this machine's script by each of its MACs."""
    return f"""#!ipxe
# metalforge: ask for this machine's script by the MAC of each network interface.
set index:int32 0
:next
isset ${{net${{index}}/mac}} || goto nothing
chain --autofree {base_url}/boot/${{net${{index}}/mac:hexhyp}}.ipxe || goto another
:another
inc index
goto next
:nothing
echo metalforge: nothing to boot from the network for this machine; trying its next device
exit 1
"""


@dataclass(frozen=True)
class RamdiskBoot:
    """One node's boot of the agent ramdisk, as its script spells it."""

    node_uuid: str
    purpose: str
    """What the ramdisk boots for (``clean``, ``deploy``, ``inspect``...), shown on the console."""
    mac: str
    kernel_url: str
    ramdisk_url: str
    params: tuple[str, ...]


def agent_params(
    *, api_url: str, mac: str | None, inspect: bool, append: list[str]
) -> tuple[str, ...]:
    """The kernel parameters of the agent's ramdisk: where metalforge is, which interface
    booted it (unknown for virtual media), what to report; then the operator's own
    (``netboot.kernel_append``)."""
    params = [f"ipa-api-url={api_url}"]
    if mac is not None:
        params.append(f"BOOTIF={mac}")
    if inspect:
        params += [
            f"ipa-inspection-callback-url={api_url}/v1/continue_inspection",
            "ipa-inspection-collectors=default,logs",
            "ipa-collect-lldp=1",
        ]
    return (*params, *append)


def ramdisk_script(boot: RamdiskBoot) -> str:
    """Load the agent's kernel and ramdisk and boot them; retry a failed download with a
    growing pause, and power off after ``RETRIES`` (the flow's timeout then reports it)."""
    cmdline = " ".join(("initrd=ramdisk", *boot.params))
    return f"""#!ipxe
# metalforge: node {boot.node_uuid} boots the agent ramdisk ({boot.purpose})
set attempt:int32 0
:load
imgfree
kernel --name kernel {boot.kernel_url} {cmdline} || goto again
initrd --name ramdisk {boot.ramdisk_url} || goto again
boot || goto again
:again
iseq ${{attempt}} {RETRIES} && goto give_up ||
inc attempt
echo metalforge: loading the ramdisk failed; trying again in ${{attempt}} s
sleep ${{attempt}}
goto load
:give_up
echo metalforge: the ramdisk could not be loaded; powering off
poweroff
"""


def wait_script(base_url: str, mac: str, delay: int) -> str:
    """Asked for while the node's images are still being fetched: ask again shortly."""
    hyphens = mac.replace(":", "-")
    return f"""#!ipxe
echo metalforge: this machine's ramdisk is being fetched; asking again in {delay} s
sleep {delay}
chain --replace {base_url}/boot/{hyphens}.ipxe
"""
