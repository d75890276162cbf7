"""The only hardware manager of a virtual node's agent: loop devices and a veth, nothing else.

ironic-python-agent normally loads every manager it finds, and its generic
one would inspect and erase whatever disks the machine has. A virtual node
runs on a shared host, so ``install`` makes this manager the agent's only
one before the agent starts (the generic manager's ``initialize`` then never
runs either), and every disk operation is bounded to the loop devices named
in ``METALFORGE_LAB_DISKS``: anything that is not ``/dev/loopN`` is refused
at start.

The steps themselves are the agent's real code: metadata erasure calls the
agent's own ``disk_utils.destroy_disk_metadata`` and full erasure its own
shred routine, and ``write_image`` goes through the standby extension's
download, stream and checksum path exactly as the generic manager's step
does. Only hardware discovery is faked.
"""

from __future__ import annotations

import os
import re
import stat
import time

from ironic_python_agent import disk_utils, errors, hardware, netutils, tls_utils
from ironic_python_agent.extensions import base as ext_base
from oslo_concurrency import processutils
from oslo_log import log

LOG = log.getLogger(__name__)

DISKS_ENV = "METALFORGE_LAB_DISKS"
"""Comma-separated ``/dev/loopN`` paths; the first one is the root (install) device."""
SERIALS_ENV = "METALFORGE_LAB_DISK_SERIALS"
"""Comma-separated serials in the same order (the backing files' names); optional."""
NAME = "MetalforgeLabHardwareManager"
VERSION = "1.0"
INSTANCE_HEADER = b"METALFORGE-LAB-INSTANCE\n"
"""What ``install_instance`` writes at the start of the root disk, before the user data."""
_LOOP_PATH = re.compile(r"/dev/loop[0-9]+")
_LOOP_MAJOR = 7
_SECTOR = 512


class LabDiskError(RuntimeError):
    """A disk named in the environment is not a loop device: the agent must not start."""


def configured_disks(environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(path, serial) of each configured disk, after checking it really is a loop device.

    Checked by path *and* by device number, so a ``/dev/loop0`` node that was
    created with another disk's numbers is refused as well.
    """
    env = os.environ if environ is None else environ
    paths = [p.strip() for p in env.get(DISKS_ENV, "").split(",") if p.strip()]
    if not paths:
        raise LabDiskError(f"{DISKS_ENV} names no disk")
    serials = [s.strip() for s in env.get(SERIALS_ENV, "").split(",")]
    disks = []
    for index, path in enumerate(paths):
        if not _LOOP_PATH.fullmatch(path):
            raise LabDiskError(f"{path} is not a /dev/loopN device; refusing to use it")
        try:
            mode = os.stat(path)
        except OSError as exc:
            raise LabDiskError(f"{path} does not exist here: {exc}") from exc
        if not stat.S_ISBLK(mode.st_mode) or os.major(mode.st_rdev) != _LOOP_MAJOR:
            raise LabDiskError(f"{path} is not a loop block device; refusing to use it")
        serial = serials[index] if index < len(serials) and serials[index] else None
        disks.append((path, serial or f"LAB{os.minor(mode.st_rdev):08d}"))
    return disks


def _size(path: str) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def _record(device: str, serial: str, method: str, started: float) -> dict[str, object]:
    """One disk's erasure record, as the step's result reports it to the conductor."""
    return {
        "device": device,
        "serial": serial,
        "method": method,
        "result": "erased",
        "duration": round(time.monotonic() - started, 3),
    }


_BURNIN_DISKS = {
    "step": "burnin_disks",
    "priority": 0,
    "interface": "deploy",
    "reboot_requested": False,
    "abortable": True,
    "argsinfo": {"seconds": {"description": "How long to read the disks.", "required": False}},
}
"""A clean step and, since it only reads, a service step too."""


class MetalforgeLabHardwareManager(hardware.HardwareManager):
    """Loop devices as disks, the network namespace's interfaces as NICs."""

    HARDWARE_MANAGER_NAME = NAME
    HARDWARE_MANAGER_VERSION = VERSION

    def __init__(self) -> None:
        self.disks = configured_disks()
        self._serials = dict(self.disks)

    def evaluate_hardware_support(self) -> int:
        return hardware.HardwareSupport.SERVICE_PROVIDER

    def get_version(self) -> dict[str, str]:
        return {"name": NAME, "version": VERSION}

    # -- discovery -----------------------------------------------------------
    def list_network_interfaces(self) -> list[hardware.NetworkInterface]:
        """Every interface but loopback, read from sysfs.

        The agent's own ``netutils.list_interfaces`` skips interfaces without
        a ``device`` link, which is every veth, and the agent would then wait
        forever for a network.
        """
        interfaces = []
        for name in sorted(os.listdir("/sys/class/net")):
            if name == "lo":
                continue
            try:
                with open(f"/sys/class/net/{name}/address") as handle:
                    mac = handle.read().strip()
                with open(f"/sys/class/net/{name}/operstate") as handle:
                    carrier = handle.read().strip() == "up"
            except OSError:
                continue
            if not mac or mac == "00:00:00:00:00:00":
                continue
            interfaces.append(hardware.NetworkInterface(name, mac, has_carrier=carrier))
        return interfaces

    def list_block_devices(self, include_partitions=False, **kwargs):
        return [
            hardware.BlockDevice(
                name=path,
                model="metalforge-lab loop disk",
                size=_size(path),
                rotational=False,
                serial=serial,
                vendor="metalforge-lab",
                logical_sectors=_SECTOR,
                physical_sectors=_SECTOR,
            )
            for path, serial in self.disks
        ]

    def list_block_devices_check_skip_list(self, node, include_partitions=False, **kwargs):
        return self.list_block_devices()

    def get_skip_list_from_node_for_disks(self, node, block_devices=None):
        return set()

    def get_os_install_device(self, permit_refresh=False):
        return self.disks[0][0]

    def wait_for_disks(self) -> None:
        """The loop devices exist before the agent starts; nothing to wait for."""

    def get_cpus(self) -> hardware.CPU:
        return hardware.CPU("metalforge-lab virtual CPU", "2000", 2, "x86_64")

    def get_memory(self) -> hardware.Memory:
        return hardware.Memory(total=2 * 1024**3, physical_mb=2048)

    def get_boot_info(self) -> hardware.BootInfo:
        return hardware.BootInfo(current_boot_mode="uefi")

    def list_hardware_info(self) -> dict[str, object]:
        """A small inventory: lookup only needs the interfaces' MACs."""
        return {
            "interfaces": self.list_network_interfaces(),
            "cpu": self.get_cpus(),
            "disks": self.list_block_devices(),
            "memory": self.get_memory(),
            "bmc_address": None,
            "bmc_v6address": None,
            "system_vendor": hardware.SystemVendorInfo(
                product_name="metalforge-lab virtual node",
                serial_number=self.disks[0][1],
                manufacturer="metalforge-lab",
                firmware=hardware.SystemFirmware(vendor="", version="", build_date=""),
            ),
            "boot": self.get_boot_info(),
            "hostname": netutils.get_hostname(),
        }

    def generate_tls_certificate(self, ip_address):
        """The agent's own self-signed certificate, so auto-TLS works as on hardware."""
        return tls_utils.generate_tls_certificate(ip_address)

    # -- steps ---------------------------------------------------------------
    def get_clean_steps(self, node, ports):
        return [
            {
                "step": "erase_devices_metadata",
                "priority": 99,
                "interface": "deploy",
                "reboot_requested": False,
                "abortable": True,
            },
            {
                "step": "erase_devices",
                "priority": 10,
                "interface": "deploy",
                "reboot_requested": False,
                "abortable": True,
            },
            _BURNIN_DISKS,
        ]

    def get_service_steps(self, node, ports):
        """What an active node may run without losing its instance: the read-only burn-in."""
        return [_BURNIN_DISKS]

    def get_deploy_steps(self, node, ports):
        return [
            {
                # Priority 0, as the agent's generic manager offers it: ``direct``
                # runs its own ``write_image``, which shadows this one.
                "step": "write_image",
                "priority": 0,
                "interface": "deploy",
                "reboot_requested": False,
                "argsinfo": {
                    "image_info": {"description": "image to write", "required": True},
                    "configdrive": {"description": "config drive", "required": False},
                },
            },
            {
                "step": "erase_devices_metadata",
                "priority": 0,
                "interface": "deploy",
                "reboot_requested": False,
            },
            {
                "step": "install_instance",
                "priority": 0,
                "interface": "deploy",
                "reboot_requested": False,
                "argsinfo": {},
            },
        ]

    def install_instance(self, node, ports):
        """A custom deploy step, as Metal3's custom deploys run one (``install_coreos``):
        it installs the instance itself, configured by the config drive's ``user_data``.

        The lab's instance is a header and that user data at the start of the
        root disk, so a test can read what the step was given.
        """
        configdrive = (node.get("instance_info") or {}).get("configdrive") or {}
        user_data = configdrive.get("user_data") if isinstance(configdrive, dict) else None
        if not user_data:
            raise errors.DeploymentError("install_instance: the config drive has no user_data")
        payload = INSTANCE_HEADER + str(user_data).encode()
        root = self.disks[0][0]
        with open(root, "r+b") as disk:
            disk.write(payload)
            disk.flush()
            os.fsync(disk.fileno())
        return {"device": root, "bytes": len(payload)}

    def erase_devices_metadata(self, node, ports):
        """Wipe partition tables and signatures on every loop disk with the agent's own routine."""
        records, failures = [], []
        for path, serial in self.disks:
            hardware.safety_check_block_device(node, path)
            started = time.monotonic()
            try:
                disk_utils.destroy_disk_metadata(path, node["uuid"])
            except processutils.ProcessExecutionError as exc:
                failures.append(f"{path}: {exc}")
                continue
            records.append(_record(path, serial, "metadata", started))
        if failures:
            raise errors.BlockDeviceEraseError(
                "Failed to erase the metadata on: " + "; ".join(failures)
            )
        return records

    def erase_devices(self, node, ports):
        """Overwrite every loop disk with zeros, once, with the agent's shred routine.

        The generic manager's erase first tries ATA/NVMe secure erase, which a
        loop device cannot do, then falls back to ``shred``. Only that
        fallback applies here; it is asked for a single zero pass so a lab
        disk is erased in well under a second.
        """
        shredder = hardware.GenericHardwareManager()
        one_zero_pass = {
            **node,
            "driver_internal_info": {
                **(node.get("driver_internal_info") or {}),
                "agent_erase_devices_iterations": 0,
                "agent_erase_devices_zeroize": True,
            },
        }
        records = []
        for device in self.list_block_devices():
            hardware.safety_check_block_device(node, device.name)
            started = time.monotonic()
            if not shredder._shred_block_device(one_zero_pass, device):
                raise errors.BlockDeviceEraseError(f"Failed to overwrite {device.name} with zeros")
            records.append(_record(device.name, device.serial, "zero-overwrite", started))
        return records

    def burnin_disks(self, node, ports, seconds=10):
        """Read every loop disk over and over for ``seconds``: a long-running, abortable step.

        Real burn-in (IPA's fio-based steps) takes hours; this one exists so
        the lab can show what happens to a long step when the agent dies.
        """
        deadline = time.monotonic() + float(seconds)
        rounds = 0
        while time.monotonic() < deadline:
            for path, _serial in self.disks:
                with open(path, "rb") as disk:
                    while disk.read(1 << 20) and time.monotonic() < deadline:
                        pass
            rounds += 1
            time.sleep(0.05)
        return {"rounds": rounds}

    def write_image(self, node, ports, image_info, configdrive=None):
        """Download and write the image onto the root loop disk through the standby extension.

        The same path as the generic manager's step: with ``stream_raw_images``
        and ``disk_format: raw`` the image is streamed onto the device and its
        ``os_hash_value`` checked by the agent.
        """
        standby = ext_base.get_extension("standby")
        command = standby.prepare_image(image_info=image_info, configdrive=configdrive)
        return command.wait()


def install() -> MetalforgeLabHardwareManager:
    """Make this manager the agent's only one; call before the agent runs.

    The agent keys steps and versions by the manager's class name, so the
    entry's name must be exactly that.
    """
    manager = MetalforgeLabHardwareManager()
    hardware._global_managers = [
        {
            "name": type(manager).__name__,
            "manager": manager,
            "support": manager.evaluate_hardware_support(),
        }
    ]
    LOG.info("Lab hardware manager installed with disks %s", [p for p, _ in manager.disks])
    return manager
