"""``make run VIRTUAL_NODES=1 LAB_MACHINES=qemu``: the demo with a QEMU machine as its node.

The demo runs as a subprocess. It enrolls the machine (``ipxe``, the agent
ramdisk ``make test`` built), and the first printed step is run as printed:
``baremetal node inspect`` makes the machine network-boot the agent through
the demo's metalforge (its DHCP service on the demo's bridge, its iPXE
scripts), and the agent reports the machine's hardware. Ctrl-C then leaves
no machine, tap, bridge or process behind; so does the next start after a
SIGKILL.
"""

from __future__ import annotations

import contextlib
import re
import signal
from pathlib import Path

import pytest

from metalforge_lab import demo, namespaces, vm_nodes
from metalforge_lab.ports import free_port
from tests.clients.conftest import BAREMETAL, BaremetalCli
from tests.lab.test_demo import printed_commands, running_demo
from tests.support.vm_lab import require
from tests.support.vm_lifecycle import RAMDISK_DIR, agent_ramdisk_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

READY_TIMEOUT = 300.0
"""Seconds to the ready line: metalforge, the BMC, the DHCP service, enrollment (and the
ramdisk, were it not built yet)."""
INSPECT_TIMEOUT = 900


def _leftovers(state_dir: Path) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if str(state_dir).encode() in cmdline.read_bytes():
                found.append(cmdline.read_bytes().replace(b"\0", b" ").decode())
    return found


def test_a_qemu_machine_is_enrolled_and_inspected_as_printed_and_ctrl_c_leaves_nothing(
    tmp_path: Path,
) -> None:
    require()
    if not BAREMETAL.exists():
        pytest.fail("python-ironicclient's `baremetal` is part of the test dependencies")
    agent_ramdisk_for_tests()  # built before the suite; here only when run alone
    state_dir, port = tmp_path / "state", free_port()
    extra = ("--machines", "qemu", "--ramdisk-dir", str(RAMDISK_DIR))
    with running_demo(state_dir, port, extra=extra) as process:
        output = process.wait_for(demo.READY_LINE, READY_TIMEOUT)
        assert "1 QEMU machine(s), enrolled and manageable" in output
        assert (state_dir / vm_nodes.STATE_FILE).exists()
        config = (state_dir / demo.CONFIG_FILE).read_text()
        assert "[dhcp]\nenabled = true" in config
        commands = printed_commands(output)
        inspect = next(c for c in commands if c[:3] == ["baremetal", "node", "inspect"])
        assert inspect[-2] == "--wait"  # the test waits itself: a CLI call has a short timeout
        cli = BaremetalCli(f"http://127.0.0.1:{port}")
        cli.run(*inspect[1:-2])
        node = cli.until(
            "vm-1",
            ["provision_state", "target_provision_state", "properties", "last_error"],
            lambda n: n["target_provision_state"] is None,
            timeout=INSPECT_TIMEOUT,
        )
        assert node["provision_state"] == "manageable", node
        assert node["properties"]["cpus"] == 1, node
        console = (state_dir / "machines" / "vm-1.console.log").read_text(errors="replace")
        assert "METALFORGE-AGENT-RAMDISK agent starting" in console
        found = re.search(r"bridge (mfdemo\d+) ", output)
        assert found is not None, output
        bridge = found.group(1)
        assert process.stop(signal.SIGINT, group=True) == 0, process.output
    assert not (state_dir / vm_nodes.STATE_FILE).exists()
    assert not namespaces.exists(bridge)
    assert _leftovers(state_dir) == []
    assert not demo.port_in_use("127.0.0.1", port)
