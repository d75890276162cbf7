"""``metalforge-lab``: run the virtual lab in the foreground (``up``) and take it down (``down``).

``demo`` runs a lab together with a metalforge that has its nodes enrolled
(see ``metalforge_lab.demo``): what ``make run VIRTUAL_NODES=N`` starts.

``ramdisk`` builds the agent's kernel and initramfs (``metalforge_lab.agent_ramdisk``):
what ``make ramdisk`` runs.

``up`` keeps running: it is the process that turns the emulator's
notifications into agent starts and stops. It prints the nodes as JSON once
everything is ready (and writes the same into ``STATE_DIR/lab.json``), so a
script can start it in the background and enrol the nodes in metalforge.
SIGTERM or SIGINT takes the lab down. ``down`` sends that SIGTERM, and then
removes whatever a lab killed without a chance to clean up left behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from metalforge_lab import agent_ramdisk, demo, vm_nodes
from metalforge_lab.lab import STATE_FILE, Lab, LabConfig, clean_up


def _delay(value: str) -> tuple[int, int]:
    low, _, high = value.partition(",")
    return int(low), int(high or low)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metalforge-lab", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the lab and keep it running until SIGTERM")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument(
        "--api-url",
        required=True,
        help="metalforge's agents' endpoint as the agent reaches it, e.g. http://10.251.0.1:6385",
    )
    up.add_argument("--state-dir", type=Path, required=True)
    up.add_argument("--bridge", default="mflab0", help="host bridge name (default mflab0)")
    up.add_argument("--subnet", default="10.251.0.0/24", help="bridge subnet (default %(default)s)")
    up.add_argument("--disks", type=int, default=1, help="loop disks per node")
    up.add_argument("--disk-size-mib", type=int, default=64)
    up.add_argument("--emulator-port", type=int, default=0, help="Redfish port (0: any free one)")
    up.add_argument("--power-delay", type=_delay, default=(0, 0), help="LO,HI seconds")
    up.add_argument(
        "--kernel-param",
        action="append",
        default=[],
        help="extra ipa-* parameter for the agents' kernel command line (repeatable)",
    )
    down = commands.add_parser("down", help="stop a running lab and remove what it left")
    down.add_argument("--state-dir", type=Path, required=True)
    down.add_argument("--timeout", type=float, default=30.0)
    run_demo = commands.add_parser(
        "demo",
        help="a lab plus metalforge with the nodes enrolled, until Ctrl-C (needs root)",
    )
    run_demo.add_argument("--nodes", type=int, default=2)
    run_demo.add_argument(
        "--state-dir", type=Path, default=Path("var/lab"), help="default %(default)s"
    )
    run_demo.add_argument(
        "--api-port",
        type=int,
        default=demo.DEFAULT_API_PORT,
        help="operator API port on 127.0.0.1, also the agents' port on the bridge "
        "(default %(default)s)",
    )
    run_demo.add_argument(
        "--inspector-port",
        type=int,
        default=demo.DEFAULT_INSPECTOR_PORT,
        help="ironic-inspector API port on 127.0.0.1 (default %(default)s)",
    )
    run_demo.add_argument("--disks", type=int, default=1, help="loop disks per node")
    run_demo.add_argument("--disk-size-mib", type=int, default=64)
    run_demo.add_argument(
        "--machines",
        choices=("namespaces", "qemu"),
        default="namespaces",
        help="namespaces: the agent in namespaces on loop disks (default); qemu: QEMU "
        "machines that network-boot the agent ramdisk through metalforge's DHCP and iPXE",
    )
    run_demo.add_argument(
        "--ramdisk-dir",
        type=Path,
        default=Path("var/ramdisk-cloud"),
        help="where the QEMU machines' agent ramdisk is built once (default %(default)s)",
    )
    ramdisk = commands.add_parser(
        "ramdisk", help="build the agent's kernel and initramfs from Debian packages (root)"
    )
    ramdisk.add_argument("--out", type=Path, default=Path("var/ramdisk"), help="%(default)s")
    ramdisk.add_argument(
        "--kernel",
        choices=sorted(agent_ramdisk.KERNELS),
        default="generic",
        help="generic: Debian's kernel with every driver, for servers (default); "
        "cloud: the smaller virtual-machine kernel",
    )
    ramdisk.add_argument("--mirror", help="a Debian mirror's URL (default: deb.debian.org)")
    return parser


def _ramdisk(args: argparse.Namespace) -> int:
    try:
        built = agent_ramdisk.build(
            args.out, kernel=args.kernel, mirror=args.mirror, log=logging.getLogger(__name__).info
        )
    except agent_ramdisk.RamdiskError as error:
        print(f"metalforge-lab ramdisk: {error}", file=sys.stderr)
        return 1
    print(f"deploy_kernel={built.kernel.resolve()}\ndeploy_ramdisk={built.initramfs.resolve()}")
    return 0


def _up(args: argparse.Namespace) -> int:
    lab = Lab(
        LabConfig(
            nodes=args.nodes,
            api_url=args.api_url,
            state_dir=args.state_dir,
            bridge=args.bridge,
            subnet=args.subnet,
            disks_per_node=args.disks,
            disk_size_mib=args.disk_size_mib,
            emulator_port=args.emulator_port,
            power_delay=args.power_delay,
            extra_kernel_params=args.kernel_param,
        )
    )
    stopping = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    lab.start()
    try:
        print(json.dumps(lab.describe(), indent=2), flush=True)
        while not stopping.wait(1.0):
            pass
    finally:
        lab.stop()
    return 0


def _is_lab_manager(pid: int) -> bool:
    """Whether ``pid`` still is a lab manager: PIDs get reused after a crash."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"metalforge-lab" in cmdline or b"metalforge_lab" in cmdline


def _down(args: argparse.Namespace) -> int:
    state_file = args.state_dir / STATE_FILE
    machines = args.state_dir / vm_nodes.STATE_FILE
    if not state_file.exists() and not machines.exists():
        print(f"no lab state in {state_file}", file=sys.stderr)
        return 1
    removed: list[str] = []
    if state_file.exists():
        state = json.loads(state_file.read_text())
        pid = int(state.get("pid") or 0)
        if state.get("running") and pid and pid != os.getpid() and _is_lab_manager(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + args.timeout
            while _is_lab_manager(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _is_lab_manager(pid):
                os.kill(pid, signal.SIGKILL)
        removed.extend(clean_up(state_file))
    removed.extend(vm_nodes.clean_up(args.state_dir))
    removed.extend(demo.stop_leftover_metalforge(args.state_dir))
    for item in removed:
        print(f"removed leftover {item}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    return demo.run(
        demo.DemoOptions(
            nodes=args.nodes,
            state_dir=args.state_dir,
            api_port=args.api_port,
            inspector_port=args.inspector_port,
            disks_per_node=args.disks,
            disk_size_mib=args.disk_size_mib,
            machines=args.machines,
            ramdisk_dir=args.ramdisk_dir,
        )
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        # The demo logs into its state directory and keeps the terminal for its next steps.
        sys.exit(_demo(args))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    commands = {"up": _up, "down": _down, "ramdisk": _ramdisk}
    sys.exit(commands[args.command](args))


if __name__ == "__main__":
    main()
