"""``fake-hardware``: every interface, with visible effects and no hardware.

It proves the logic of every flow and feeds tests and benchmarks. Per-node
behaviour comes from ``driver_info``:

``fake_step_delay``
    Seconds each fake step takes. Synchronous steps sleep (holding the
    node's reservation); asynchronous ones (``deploy.write_image``,
    ``deploy.erase_devices``, ``raid.create_configuration``) leave the node in
    its wait state meanwhile, as a ramdisk agent or a BMC job would.
``fake_fail_steps``
    Comma-separated ``interface.step`` names that fail when run, for example
    ``deploy.write_image,raid.create_configuration``.
``fake_steps_change``
    Comma-separated ``interface.step`` names whose first run finds the node's
    steps changed since the plan was made, as an agent whose hardware
    managers were updated reports it: the step does not run (once per step
    and node, recorded in ``fake_steps_changed``).

Clean steps and their visible effects:

=================================  ========  =========  =====  ===========================
step                               priority  abortable  async  effect
=================================  ========  =========  =====  ===========================
``deploy.erase_devices_metadata``  99        yes        no     ``fake_metadata_erased_at``
``deploy.erase_devices``           10        yes        yes    ``fake_erased_at``
``management.reset_bios``          0         no         no     empties ``fake_bios``
``bios.apply_configuration``       0         no         no     ``fake_bios``
``raid.delete_configuration``      0         no         no     empties ``raid_config``
``raid.create_configuration``      0         no         yes    ``target_raid_config`` ->
                                                                ``raid_config``
=================================  ========  =========  =====  ===========================

(timestamps and settings are recorded in ``driver_internal_info``).

Vendor methods (``fake`` vendor interface): Ironic's fake vendor examples,
under their names, verbs and modes. Each takes a string ``bar`` and answers
whether it is the method's word, after ``fake_step_delay``:

===============================  ====  =====  ==============  ======
method                           verb  async  exclusive lock  word
===============================  ====  =====  ==============  ======
``first_method``                 POST  yes    yes             baz
``second_method``                POST  yes    yes             kazoo
``third_method_sync``            POST  no     yes             meow
``fourth_method_shared_lock``    POST  yes    no              woof
``log_passthrough``              POST  yes    yes             (logs its argument names)
===============================  ====  =====  ==============  ======

Inspection is in band and simulated: the node powers on, and a fake ramdisk
reports an inventory ``fake_step_delay`` seconds later (see ``FakeInspect``;
``driver_info.fake_inventory`` replaces parts of it).

Management extras: the boot mode and secure boot are recorded as the node's
``boot_mode`` and ``secure_boot``; an NMI as ``fake_nmi_injected_at``; the
indicators are Ironic's fake ones (``led-0@chassis``, read only, and
``led@system``), each ``on`` until set (``fake_indicators``). The ``fake``
console records ``fake_console_started_at`` and reports ``console_info`` as
``{}``. ``fake_fail_steps`` may name ``management.set_boot_mode``,
``management.set_secure_boot_state``, ``management.inject_nmi``,
``console.start_console`` or ``console.stop_console``.

Deploy steps: the deploy interface's core steps keep Ironic's default
priorities (``deploy`` 100, ``write_image`` 80 and asynchronous,
``prepare_instance_boot`` 60, ``tear_down_agent`` 40, ``boot_instance`` 20).
``management.reset_bios``, ``bios.apply_configuration``,
``raid.create_configuration`` and ``raid.delete_configuration`` are deploy
steps too, at priority 0, so deploy templates can switch them on; so is
``raid.apply_configuration`` (deploy only, asynchronous), which builds the
``raid_config`` argument it is given.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from metalforge.db import bios_settings
from metalforge.db.firmware_components import Reported
from metalforge.db.models import utcnow
from metalforge.drivers.agent.deploy import AgentDeploy, CustomAgentDeploy
from metalforge.drivers.agent.rescue import AgentRescue
from metalforge.drivers.base import (
    HEALTH_STATES,
    POWER_OFF,
    POWER_ON,
    REBOOT,
    SOFT_POWER_OFF,
    SOFT_REBOOT,
    STORAGE_INTERFACES,
    BiosInterface,
    BmcUnavailable,
    BootInterface,
    ConsoleInterface,
    DeployInterface,
    DriverError,
    DriverTask,
    FirmwareInterface,
    GenericInterface,
    Indicator,
    InspectInterface,
    Interface,
    ManagementInterface,
    PowerInterface,
    RaidInterface,
    RescueInterface,
    SimulatedReport,
    StepFailed,
    StepOutcome,
    StepsChanged,
    VendorInterface,
    VirtualMedia,
    check_vendor_args,
    noop_interface,
)
from metalforge.drivers.firmware import CHECKED_UPDATE_ARGS, parse_settings
from metalforge.drivers.hardware import HardwareType
from metalforge.drivers.ipxe import IpxeBoot, IpxeHttpBoot
from metalforge.drivers.network import NETWORK_INTERFACES
from metalforge.drivers.pxe import HttpBoot, PxeBoot
from metalforge.drivers.raid import InvalidRaidConfig, check_target_raid_config
from metalforge.drivers.step_declarations import clean_step, deploy_step, service_step
from metalforge.drivers.vendor import passthru

LOG = logging.getLogger(__name__)

FAKE_PROPERTIES: dict[str, str] = {
    "fake_step_delay": "Seconds each fake step and vendor method takes (default 0). Optional.",
    "fake_fail_steps": (
        "Comma-separated interface.step names that fail when run, e.g. "
        "deploy.write_image,raid.create_configuration. Optional."
    ),
    "fake_steps_change": (
        "Comma-separated interface.step names whose first run finds the node's steps "
        "changed since the plan was made (as an updated agent reports). Optional."
    ),
}
"""``driver_info`` keys every fake interface reads."""


def step_delay(task: DriverTask) -> float:
    """The node's ``fake_step_delay`` in seconds (0 when unset or invalid)."""
    raw = task.node.driver_info.get("fake_step_delay", 0)
    try:
        return max(0.0, float(raw))
    except (TypeError, ValueError):
        return 0.0


def _failing(task: DriverTask) -> set[str]:
    return _names(task, "fake_fail_steps")


def _check_steps_unchanged(task: DriverTask, full: str) -> None:
    """``fake_steps_change``: the first run of a step named there finds the steps changed."""
    if full not in _names(task, "fake_steps_change"):
        return
    info = task.node.driver_internal_info
    changed = [str(name) for name in info.get("fake_steps_changed") or []]
    if full in changed:
        return
    task.node.driver_internal_info = {**info, "fake_steps_changed": [*changed, full]}
    raise StepsChanged(
        f"fake-hardware's steps changed since the plan was made; {full} was not run "
        "(driver_info.fake_steps_change)"
    )


def _names(task: DriverTask, key: str) -> set[str]:
    raw = task.node.driver_info.get(key, "")
    if isinstance(raw, list):
        return {str(item).strip() for item in raw}
    return {part.strip() for part in str(raw).split(",") if part.strip()}


def _unanswered(task: DriverTask, action: str) -> None:
    """``driver_info.fake_bmc_unanswered = N``: the first N power changes get no answer.

    Stands in for a BMC that is busy or rebooting (``BmcUnavailable``); the
    count of actions left unanswered so far is kept with the node, so retries
    within one task and across tasks see the BMC come back after N.
    """
    raw = task.node.driver_info.get("fake_bmc_unanswered", 0)
    wanted = raw if isinstance(raw, int) and not isinstance(raw, bool) else 0
    info = task.node.driver_internal_info
    seen = info.get("fake_bmc_unanswered_seen", 0)
    seen = seen if isinstance(seen, int) else 0
    if seen < wanted:
        task.node.driver_internal_info = {**info, "fake_bmc_unanswered_seen": seen + 1}
        raise BmcUnavailable(f"fake BMC did not answer {action} (driver_info.fake_bmc_unanswered)")


def _refuse_if_told(task: DriverTask, name: str) -> None:
    """Fail an action that is no step when ``fake_fail_steps`` names it."""
    if name in _failing(task):
        raise DriverError(f"fake-hardware was told to fail {name}")


class FakeMixin(Interface):
    """Shared behaviour of the fake implementations: delays and injected failures."""

    name = "fake"

    def validate(self, task: DriverTask) -> None:
        return None

    def properties(self) -> dict[str, str]:
        return dict(FAKE_PROPERTIES)

    def run_step(self, task: DriverTask, method: str, args: dict[str, Any]) -> StepOutcome:
        full = f"{self.interface_type}.{method}"
        if full in _failing(task):
            raise StepFailed(f"fake-hardware was told to fail {full} (driver_info.fake_fail_steps)")
        decl = next(d for d in self.steps() if d.method == method)
        if decl.asynchronous and step_delay(task) > 0:
            # Found when the command's status is read, as an agent reports it.
            task.node.driver_internal_info = {
                **task.node.driver_internal_info,
                "fake_async_done_at": task.now() + step_delay(task),
            }
            super().run_step(task, method, args)
            return "wait"
        _check_steps_unchanged(task, full)
        task.sleep(step_delay(task))
        return super().run_step(task, method, args)

    def check_step(self, task: DriverTask, method: str) -> StepOutcome:
        done_at = float(task.node.driver_internal_info.get("fake_async_done_at", 0))
        if task.now() < done_at:
            return "wait"
        _check_steps_unchanged(task, f"{self.interface_type}.{method}")
        return "done"

    def abort_step(self, task: DriverTask, method: str) -> None:
        info = dict(task.node.driver_internal_info)
        info.pop("fake_async_done_at", None)
        task.node.driver_internal_info = info


class FakePower(FakeMixin, PowerInterface):
    def get_power_state(self, task: DriverTask) -> str:
        return task.node.power_state or POWER_OFF

    def set_power_state(self, task: DriverTask, target: str, timeout: int | None = None) -> None:
        _unanswered(task, f"power {target}")
        if "power.set_power_state" in _failing(task):
            raise DriverError("fake-hardware was told to fail power.set_power_state")
        if target in (POWER_ON, REBOOT, SOFT_REBOOT):
            task.node.power_state = POWER_ON
        elif target in (POWER_OFF, SOFT_POWER_OFF):
            task.node.power_state = POWER_OFF
        else:
            raise DriverError(f"unknown power target {target!r}")


_FAKE_DRIVES = {"cdrom": ("CD", "DVD"), "floppy": ("Floppy",), "disk": ("USBStick",)}
"""The pretend BMC's virtual media drives: one per device type."""


class FakeManagement(FakeMixin, ManagementInterface):
    def get_virtual_media(self, task: DriverTask) -> list[VirtualMedia]:
        held = task.node.driver_internal_info.get("fake_vmedia", {})
        return [
            VirtualMedia(types, device in held, held.get(device))
            for device, types in _FAKE_DRIVES.items()
        ]

    def attach_virtual_media(self, task: DriverTask, device_type: str, image_url: str) -> None:
        """Inserted into ``driver_internal_info.fake_vmedia``: what the pretend BMC holds."""
        held = dict(task.node.driver_internal_info.get("fake_vmedia", {}))
        held[device_type] = image_url
        task.node.driver_internal_info = {**task.node.driver_internal_info, "fake_vmedia": held}

    def detach_virtual_media(self, task: DriverTask, device_types: Sequence[str]) -> None:
        held = dict(task.node.driver_internal_info.get("fake_vmedia", {}))
        for device in device_types or list(held):
            held.pop(device, None)
        task.node.driver_internal_info = {**task.node.driver_internal_info, "fake_vmedia": held}

    def get_health(self, task: DriverTask) -> str | None:
        """``driver_info.fake_health`` when it is a health value: what a BMC would report."""
        value = task.node.driver_info.get("fake_health")
        return value if value in HEALTH_STATES else None

    def get_boot_device(self, task: DriverTask) -> dict[str, Any]:
        info = task.node.driver_internal_info
        return {
            "boot_device": info.get("fake_boot_device", "disk"),
            "persistent": bool(info.get("fake_boot_persistent", True)),
        }

    def set_boot_device(self, task: DriverTask, device: str, persistent: bool = False) -> None:
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "fake_boot_device": device,
            "fake_boot_persistent": persistent,
        }

    def get_boot_mode(self, task: DriverTask) -> str | None:
        return task.node.boot_mode

    def set_boot_mode(self, task: DriverTask, mode: str) -> None:
        _refuse_if_told(task, "management.set_boot_mode")
        task.node.boot_mode = mode

    def get_secure_boot_state(self, task: DriverTask) -> bool | None:
        return task.node.secure_boot

    def set_secure_boot_state(self, task: DriverTask, enabled: bool) -> None:
        _refuse_if_told(task, "management.set_secure_boot_state")
        task.node.secure_boot = enabled

    def inject_nmi(self, task: DriverTask) -> None:
        """Recorded as ``driver_internal_info.fake_nmi_injected_at``."""
        _refuse_if_told(task, "management.inject_nmi")
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "fake_nmi_injected_at": utcnow().isoformat(),
        }

    def get_supported_indicators(self, task: DriverTask) -> dict[str, dict[str, Indicator]]:
        return {c: dict(found) for c, found in FAKE_INDICATORS.items()}

    def get_indicator_state(self, task: DriverTask, component: str, indicator: str) -> str:
        """What was set (``driver_internal_info.fake_indicators``), else ``on`` as Ironic's fake."""
        _fake_indicator(component, indicator)
        states = task.node.driver_internal_info.get("fake_indicators") or {}
        return str(states.get(f"{indicator}@{component}", "on"))

    def set_indicator_state(
        self, task: DriverTask, component: str, indicator: str, state: str
    ) -> None:
        found = _fake_indicator(component, indicator)
        if found.readonly:
            raise DriverError(f"Indicator {indicator}@{component} is read-only")
        if state not in found.states:
            raise DriverError(
                f"Invalid state {state!r} for indicator {indicator}@{component}; "
                f"supported: {', '.join(found.states)}"
            )
        states = dict(task.node.driver_internal_info.get("fake_indicators") or {})
        states[f"{indicator}@{component}"] = state
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "fake_indicators": states,
        }

    @clean_step(priority=0, requires_ramdisk=False)
    @service_step(requires_ramdisk=False)
    @deploy_step(priority=0)
    def reset_bios(self, task: DriverTask) -> None:
        """Return the pretend BIOS to factory settings: none applied, none stored."""
        info = dict(task.node.driver_internal_info)
        had = info.pop("fake_bios", None) is not None
        task.node.driver_internal_info = info
        if had:
            task.store_bios_settings([])


FAKE_INDICATORS: dict[str, dict[str, Indicator]] = {
    "chassis": {"led-0": Indicator(readonly=True, states=("off", "on"))},
    "system": {"led": Indicator(readonly=False, states=("blinking", "off", "on"))},
}
"""Ironic's fake indicators: a read-only chassis LED and a system LED that can be set."""


def _fake_indicator(component: str, indicator: str) -> Indicator:
    """The fake indicator, or Ironic's fake's refusal of an unknown one."""
    if component not in FAKE_INDICATORS:
        raise DriverError(f"Invalid component {component} specified.")
    found = FAKE_INDICATORS[component].get(indicator)
    if found is None:
        raise DriverError(f"Invalid indicator {indicator} specified.")
    return found


class FakeBoot(FakeMixin, BootInterface):
    pass


class FakeConsole(FakeMixin, ConsoleInterface):
    """A console with nothing behind it; ``console_info`` is ``{}``, as Ironic's fake gives.

    ``driver_internal_info.fake_console_started_at`` records when it was started.
    """

    def start_console(self, task: DriverTask) -> None:
        _refuse_if_told(task, "console.start_console")
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "fake_console_started_at": utcnow().isoformat(),
        }

    def stop_console(self, task: DriverTask) -> None:
        _refuse_if_told(task, "console.stop_console")
        info = dict(task.node.driver_internal_info)
        info.pop("fake_console_started_at", None)
        task.node.driver_internal_info = info

    def get_console(self, task: DriverTask) -> dict[str, Any]:
        return {}


class FakeDeploy(FakeMixin, DeployInterface):
    """Deploy steps with Ironic's default priorities; ``write_image`` records the image."""

    @deploy_step(priority=100)
    def deploy(self, task: DriverTask) -> None:
        """Boot the node into the agent (fake: power it on)."""
        task.node.power_state = POWER_ON

    @deploy_step(priority=80, asynchronous=True)
    def write_image(self, task: DriverTask) -> None:
        """Write the image named in ``instance_info.image_source`` to the root disk."""
        info = task.node.instance_info
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "deployed_image": {
                "image_source": info.get("image_source"),
                "image_checksum": info.get("image_checksum") or info.get("image_os_hash_value"),
                "written_at": utcnow().isoformat(),
            },
        }

    @deploy_step(priority=60)
    def prepare_instance_boot(self, task: DriverTask) -> None:
        """Make the instance the boot target."""
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "fake_boot_device": "disk",
        }

    @deploy_step(priority=40)
    def tear_down_agent(self, task: DriverTask) -> None:
        """Stop the agent (fake: power off before the final boot)."""
        task.node.power_state = POWER_OFF

    @deploy_step(priority=20)
    def boot_instance(self, task: DriverTask) -> None:
        """Power the node on into its instance."""
        task.node.power_state = POWER_ON

    @clean_step(priority=10, abortable=True, asynchronous=True)
    def erase_devices(self, task: DriverTask) -> None:
        """Erase every disk (fake: record when)."""
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "fake_erased_at": utcnow().isoformat(),
        }

    @clean_step(priority=99, abortable=True)
    def erase_devices_metadata(self, task: DriverTask) -> None:
        """Wipe partition tables and filesystem signatures (fake: record when)."""
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "fake_metadata_erased_at": utcnow().isoformat(),
        }

    def tear_down(self, task: DriverTask) -> None:
        task.node.power_state = POWER_OFF
        info = dict(task.node.driver_internal_info)
        info.pop("deployed_image", None)
        task.node.driver_internal_info = info


FAKE_INVENTORY_DEFAULTS: dict[str, Any] = {
    "cpu": {"count": 8, "architecture": "x86_64", "model_name": "Fake CPU", "frequency": "2400"},
    "memory": {"total": 32768 * 1024**2, "physical_mb": 32768},
    "disks": [
        {"name": "/dev/sda", "size": 401 * 1024**3, "rotational": False, "model": "Fake Disk"}
    ],
    "system_vendor": {"manufacturer": "metalforge", "product_name": "fake-hardware"},
    "boot": {"current_boot_mode": "uefi"},
}
"""The simulated ramdisk's inventory: 8 CPUs, 32 GiB, one 401 GiB disk (``local_gb`` 400)."""


def _fallback_mac(task: DriverTask) -> str:
    digits = task.node.uuid.replace("-", "")[-6:]
    return "52:54:00:" + ":".join(digits[i : i + 2] for i in range(0, 6, 2))


class FakeInspect(FakeMixin, InspectInterface):
    """In band, simulated: the node powers on and a fake ramdisk reports an inventory.

    The report lists the node's ports' MACs (the first one as the NIC it booted
    from; a node without ports reports one MAC made from its UUID) and
    ``FAKE_INVENTORY_DEFAULTS``, with ``driver_info.fake_inventory`` (an object)
    replacing whole top-level keys. It arrives ``fake_step_delay`` seconds after
    the power-on; ``fake_fail_steps`` may name ``inspect.inspect_hardware``
    (the power-on fails) or ``inspect.report`` (the ramdisk reports an error).
    """

    boots_ramdisk = True

    def properties(self) -> dict[str, str]:
        return {
            **FAKE_PROPERTIES,
            "fake_inventory": (
                "An object whose top-level keys replace those of the inventory the fake "
                "inspection ramdisk reports. Optional."
            ),
        }

    def inspect_hardware(self, task: DriverTask) -> Literal["wait"]:
        if "inspect.inspect_hardware" in _failing(task):
            raise DriverError("fake-hardware was told to fail inspect.inspect_hardware")
        task.node.power_state = POWER_ON
        # When it powered on, on the shared clock: what a test of the throttle reads.
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "fake_inspection_powered_on_at": task.now(),
        }
        return "wait"

    def simulated_report(self, task: DriverTask, macs: Sequence[str]) -> SimulatedReport:
        nics = list(macs) or [_fallback_mac(task)]
        inventory: dict[str, Any] = {
            **FAKE_INVENTORY_DEFAULTS,
            "interfaces": [
                {"name": f"eth{i}", "mac_address": mac, "ipv4_address": None}
                for i, mac in enumerate(nics)
            ],
        }
        inventory["boot"] = {**inventory["boot"], "pxe_interface": nics[0]}
        overrides = task.node.driver_info.get("fake_inventory")
        if isinstance(overrides, dict):
            inventory.update(overrides)
        report: dict[str, Any] = {"inventory": inventory, "error": None}
        if "inspect.report" in _failing(task):
            report["error"] = "fake-hardware was told to fail inspect.report"
        return SimulatedReport(delay=step_delay(task), report=report)


_RAID_ARGS = {
    "create_root_volume": {
        "description": "Create the root volume (default true).",
        "required": False,
    },
    "create_nonroot_volumes": {
        "description": "Create the other volumes (default true).",
        "required": False,
    },
}


_RAID_DEPLOY_ARGS = {
    **_RAID_ARGS,
    "logical_disks": {
        "description": "The logical disks to build, as in target_raid_config "
        "(default: the node's target_raid_config).",
        "required": False,
    },
    "delete_configuration": {
        "description": "With logical_disks: remove the current logical disks first "
        "(default false).",
        "required": False,
    },
}


class FakeRaid(FakeMixin, RaidInterface):
    def _create(
        self, task: DriverTask, create_root_volume: bool = True, create_nonroot_volumes: bool = True
    ) -> None:
        for name, value in (
            ("create_root_volume", create_root_volume),
            ("create_nonroot_volumes", create_nonroot_volumes),
        ):
            # Names are checked when cleaning is requested; values only here.
            if not isinstance(value, bool):
                raise StepFailed(f"invalid argument {name}: {value!r} is not true or false")
        wanted = task.node.target_raid_config.get("logical_disks", [])
        if not wanted:
            raise StepFailed("the node has no target_raid_config to apply")
        disks = [
            {**disk, "controller": disk.get("controller", "fake-raid-0")}
            for disk in wanted
            if (create_root_volume if disk.get("is_root_volume") else create_nonroot_volumes)
        ]
        task.node.raid_config = {"logical_disks": disks, "last_updated": utcnow().isoformat()}

    @clean_step(priority=0, argsinfo=_RAID_ARGS, requires_ramdisk=False, asynchronous=True)
    @service_step(argsinfo=_RAID_ARGS, requires_ramdisk=False, asynchronous=True)
    @deploy_step(priority=0, argsinfo=_RAID_DEPLOY_ARGS, asynchronous=True)
    def create_configuration(
        self,
        task: DriverTask,
        create_root_volume: bool = True,
        create_nonroot_volumes: bool = True,
        logical_disks: list[dict[str, Any]] | None = None,
        delete_configuration: bool = False,
    ) -> None:
        """Apply ``target_raid_config`` (or the ``logical_disks`` given) to ``raid_config``.

        Asynchronous and not abortable, like a RAID job on a real controller:
        the node waits in ``clean wait``, and an abort takes effect after it.
        As a deploy step it also takes the disks with it, as a deploy template
        carries them (``logical_disks``, and ``delete_configuration`` to drop
        the current ones first).
        """
        if logical_disks is None:
            if delete_configuration is not False:
                raise StepFailed("delete_configuration needs logical_disks given with the step")
            self._create(task, create_root_volume, create_nonroot_volumes)
            return
        self._apply_given(
            task,
            {"logical_disks": logical_disks},
            delete_existing=delete_configuration,
            create_root_volume=create_root_volume,
            create_nonroot_volumes=create_nonroot_volumes,
        )

    def _apply_given(
        self,
        task: DriverTask,
        raid_config: Any,
        *,
        delete_existing: Any,
        create_root_volume: bool = True,
        create_nonroot_volumes: bool = True,
    ) -> None:
        """Build a RAID configuration given with the step; it becomes the target too."""
        if not isinstance(delete_existing, bool):
            raise StepFailed(f"invalid argument delete_existing: {delete_existing!r}")
        if not isinstance(raid_config, dict):
            raise StepFailed(f"invalid argument raid_config: {raid_config!r} is not an object")
        try:
            check_target_raid_config(raid_config)
        except InvalidRaidConfig as exc:
            raise StepFailed(f"invalid argument raid_config: {exc}") from None
        kept = [] if delete_existing else list(task.node.raid_config.get("logical_disks", []))
        task.node.target_raid_config = raid_config
        self._create(task, create_root_volume, create_nonroot_volumes)
        task.node.raid_config = {
            **task.node.raid_config,
            "logical_disks": kept + task.node.raid_config["logical_disks"],
        }

    @clean_step(priority=0, requires_ramdisk=False)
    @service_step(requires_ramdisk=False)
    @deploy_step(priority=0)
    def delete_configuration(self, task: DriverTask) -> None:
        """Remove every logical disk."""
        task.node.raid_config = {}

    @deploy_step(
        priority=0,
        argsinfo={
            "raid_config": {
                "description": 'The RAID configuration to build ({"logical_disks": [...]}).',
                "required": True,
            },
            "delete_existing": {
                "description": "Remove the current logical disks first (default true).",
                "required": False,
            },
        },
        asynchronous=True,
    )
    def apply_configuration(
        self, task: DriverTask, raid_config: dict[str, Any], delete_existing: bool = True
    ) -> None:
        """Build the RAID configuration given as an argument (a deploy template's RAID).

        Unlike ``create_configuration`` the target comes with the step, so one
        template can carry it; it also becomes the node's ``target_raid_config``
        so the node shows what was asked for.
        """
        self._apply_given(task, raid_config, delete_existing=delete_existing)


_BIOS_ARGS = {"settings": {"description": "List of {name, value} BIOS settings.", "required": True}}


class FakeBios(FakeMixin, BiosInterface):
    @clean_step(priority=0, argsinfo=_BIOS_ARGS, requires_ramdisk=False)
    @service_step(argsinfo=_BIOS_ARGS, requires_ramdisk=False)
    @deploy_step(priority=0, argsinfo=_BIOS_ARGS)
    def apply_configuration(self, task: DriverTask, settings: list[dict[str, Any]]) -> None:
        """Apply BIOS settings to the pretend firmware (``driver_internal_info.fake_bios``),
        and read them back as a real BMC's would be."""
        if not isinstance(settings, list) or not all(
            isinstance(item, dict) and "name" in item and "value" in item for item in settings
        ):
            raise StepFailed(
                f"invalid argument settings: {settings!r} is not a list of {{name, value}} objects"
            )
        current = dict(task.node.driver_internal_info.get("fake_bios", {}))
        current.update({str(item["name"]): item["value"] for item in settings})
        task.node.driver_internal_info = {**task.node.driver_internal_info, "fake_bios": current}
        self.cache_bios_settings(task)

    def cache_bios_settings(self, task: DriverTask) -> None:
        """A node whose pretend firmware was never set has no settings: nothing to write."""
        if "fake_bios" not in task.node.driver_internal_info:
            return
        current = task.node.driver_internal_info["fake_bios"]
        task.store_bios_settings(
            [
                bios_settings.Setting(name=str(name), value=None if v is None else str(v))
                for name, v in sorted(current.items())
            ]
        )


FAKE_FIRMWARE = {"bios": "1.0.0", "bmc": "1.0.0"}
"""The pretend firmware's versions until an update bumps them."""


def _bumped(version: str) -> str:
    """The next version: the last number plus one (``1.0.0`` -> ``1.0.1``)."""
    head, _, last = version.rpartition(".")
    return f"{head}.{int(last) + 1}" if last.isdigit() else f"{version}.1"


class FakeFirmware(FakeMixin, FirmwareInterface):
    """Pretend firmware (``driver_internal_info.fake_firmware``): an update bumps the
    component's version, as the lab's Redfish emulator does."""

    def cache_firmware_components(self, task: DriverTask) -> None:
        """Nothing to write for a node never updated: its versions are the defaults, which
        its first update stores as the initial ones (verifying a fake fleet stays cheap)."""
        if "fake_firmware" not in task.node.driver_internal_info:
            return
        versions = task.node.driver_internal_info["fake_firmware"]
        task.store_firmware(
            [Reported(c, v, vendor="fake", model="fake-hardware") for c, v in versions.items()]
        )

    @clean_step(priority=0, argsinfo=CHECKED_UPDATE_ARGS, requires_ramdisk=False)
    @service_step(argsinfo=CHECKED_UPDATE_ARGS, requires_ramdisk=False)
    def update(self, task: DriverTask, settings: list[dict[str, Any]]) -> None:
        before = {**FAKE_FIRMWARE, **task.node.driver_internal_info.get("fake_firmware", {})}
        versions = dict(before)
        flashed = []
        for update in parse_settings(settings):
            versions[update.component] = _bumped(versions[update.component])
            flashed.append(update.component)
        info = {**task.node.driver_internal_info, "fake_firmware": versions}
        task.node.driver_internal_info = info
        task.store_firmware(
            [
                Reported(
                    c,
                    v,
                    vendor="fake",
                    model="fake-hardware",
                    flashed=c in flashed,
                    before=before[c],
                )
                for c, v in versions.items()
            ]
        )


class FakeRescue(FakeMixin, RescueInterface):
    """Rescue with visible effects: the node powers on into a (pretend) rescue system.

    ``driver_internal_info.fake_rescued_at`` records when, and the rescue
    password is consumed (removed from ``instance_info``), as a real rescue
    ramdisk would take it. ``fake_fail_steps`` may name ``rescue.rescue`` or
    ``rescue.unrescue``.
    """

    def rescue(self, task: DriverTask) -> StepOutcome:
        if "rescue.rescue" in _failing(task):
            raise DriverError("fake-hardware was told to fail rescue.rescue")
        info = dict(task.node.instance_info)
        if not info.pop("rescue_password", None):
            raise DriverError("no rescue_password was given for the rescue user")
        task.node.instance_info = info
        task.node.power_state = POWER_ON
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "fake_rescued_at": utcnow().isoformat(),
        }
        return "done"

    def unrescue(self, task: DriverTask) -> None:
        if "rescue.unrescue" in _failing(task):
            raise DriverError("fake-hardware was told to fail rescue.unrescue")
        info = dict(task.node.driver_internal_info)
        info.pop("fake_rescued_at", None)
        info["fake_unrescued_at"] = utcnow().isoformat()
        task.node.driver_internal_info = info
        task.node.power_state = POWER_ON


class FakeGeneric(FakeMixin, GenericInterface):
    pass


_WORDS = {
    "first_method": "baz",
    "second_method": "kazoo",
    "third_method_sync": "meow",
    "fourth_method_shared_lock": "woof",
}
"""The word each of Ironic's example methods compares ``bar`` with."""
_BAR = {"bar": str}


def _later(word: str) -> str:
    return f"Answers whether bar is '{word}' (asynchronous: in the node's history)."


class FakeVendor(FakeMixin, VendorInterface):
    """Ironic's example vendor methods (its FakeVendorA and FakeVendorB, as one interface)."""

    def properties(self) -> dict[str, str]:
        # Ironic's fake vendor interfaces document these placeholder keys; nothing reads them.
        return {
            **FAKE_PROPERTIES,
            "A1": "Example property of the fake vendor interface; not read. Required.",
            "A2": "Example property of the fake vendor interface; not read. Optional.",
            "B1": "Example property of the fake vendor interface; not read. Required.",
            "B2": "Example property of the fake vendor interface; not read. Required.",
        }

    def validate_call(
        self, task: DriverTask, method: str, http_method: str, args: Mapping[str, Any]
    ) -> None:
        if method in _WORDS:
            check_vendor_args(method, args, _BAR, required=("bar",))

    def _compare(self, task: DriverTask, method: str, args: Mapping[str, Any]) -> bool:
        task.sleep(step_delay(task))
        return bool(args["bar"] == _WORDS[method])

    @passthru(["POST"], description=_later("baz"))
    def first_method(self, task: DriverTask, http_method: str, args: Mapping[str, Any]) -> bool:
        return self._compare(task, "first_method", args)

    @passthru(["POST"], description=_later("kazoo"))
    def second_method(self, task: DriverTask, http_method: str, args: Mapping[str, Any]) -> bool:
        return self._compare(task, "second_method", args)

    @passthru(["POST"], asynchronous=False, description="Answers whether bar is 'meow'.")
    def third_method_sync(
        self, task: DriverTask, http_method: str, args: Mapping[str, Any]
    ) -> bool:
        return self._compare(task, "third_method_sync", args)

    @passthru(
        ["POST"],
        exclusive_lock=False,
        description=_later("woof"),
    )
    def fourth_method_shared_lock(
        self, task: DriverTask, http_method: str, args: Mapping[str, Any]
    ) -> bool:
        return self._compare(task, "fourth_method_shared_lock", args)

    @passthru(["POST"], description="Logs the names of its arguments, after the node's delay.")
    def log_passthrough(self, task: DriverTask, http_method: str, args: Mapping[str, Any]) -> None:
        task.sleep(step_delay(task))
        LOG.info("log_passthrough on node %s: arguments %s", task.node.uuid, sorted(args))


def _fake(family: str) -> type[Interface]:
    return type(f"Fake_{family}", (FakeGeneric,), {"interface_type": family, "name": "fake"})


FAKE_HARDWARE = HardwareType(
    name="fake-hardware",
    supported={
        "power": (FakePower,),
        "management": (FakeManagement,),
        # As Ironic's: a fake machine may still boot and run the real agent from the
        # network (a virtual machine without a BMC, the network-boot tests).
        "boot": (FakeBoot, PxeBoot, IpxeBoot, HttpBoot, IpxeHttpBoot),
        "deploy": (FakeDeploy, AgentDeploy, CustomAgentDeploy),
        "inspect": (FakeInspect, noop_interface("inspect", "no-inspect")),
        "raid": (FakeRaid, noop_interface("raid", "no-raid")),
        "bios": (FakeBios, noop_interface("bios", "no-bios")),
        "rescue": (FakeRescue, noop_interface("rescue", "no-rescue"), AgentRescue),
        "console": (FakeConsole, noop_interface("console", "no-console")),
        "network": NETWORK_INTERFACES,
        "storage": STORAGE_INTERFACES,
        "vendor": (FakeVendor, noop_interface("vendor", "no-vendor")),
        "firmware": (FakeFirmware, noop_interface("firmware", "no-firmware")),
    },
)
