"""Driver interfaces: small, typed, one concern each.

A hardware type composes one implementation of each interface. Methods get a
``DriverTask``: the node (a detached copy the conductor saves, fenced by the
node's reservation) plus a few services. Drivers never open database
sessions, so they stay testable with a plain object.

Errors: raise ``DriverError`` (a clear message for ``last_error``);
``StepFailed`` from a step names the step. Anything else is a bug and is
reported with its type so it can be found.
"""

from __future__ import annotations

import inspect
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

from metalforge.config import ConductorSettings
from metalforge.db import bios_settings, firmware_components
from metalforge.db.agent_sessions import AgentSessionInfo
from metalforge.db.flow_progress import NO_FLOW, FlowProgress, StepKind
from metalforge.db.models import Node
from metalforge.drivers import failures
from metalforge.drivers.raid import (
    LOGICAL_DISK_PROPERTIES,
    InvalidRaidConfig,
    check_target_raid_config,
)
from metalforge.drivers.step_declarations import StepDecl, declared_steps
from metalforge.drivers.vendor import PassthruDecl, declared_passthru

POWER_ON = "power on"
POWER_OFF = "power off"
REBOOT = "rebooting"
SOFT_POWER_OFF = "soft power off"
SOFT_REBOOT = "soft rebooting"
POWER_TARGETS = (POWER_ON, POWER_OFF, REBOOT, SOFT_POWER_OFF, SOFT_REBOOT)

BOOT_DEVICES = ("pxe", "disk", "cdrom", "bios", "safe", "wanboot", "uefihttp")
"""Ironic's boot device names; a management interface supports some of them."""

StepOutcome = Literal["done", "wait"]
"""A step either finished (``done``) or started work the node must wait for (``wait``)."""


class DriverError(Exception):
    """A driver could not do what was asked; the message is for the operator."""


class BmcUnavailable(DriverError):
    """The BMC did not answer (unreachable, timed out, busy): the same request may succeed
    later. Every other ``DriverError`` is an answer (refused credentials, an unsupported
    request) that asking again cannot change."""


class VendorNotFound(DriverError):
    """What a vendor method was asked to act on does not exist (a 404, as from Ironic)."""


class StepFailed(DriverError):
    """A step failed; the message says why."""


class StepRefused(StepFailed):
    """The step was not started: it is not declared, or its arguments do not fit its
    signature (a declaration that promises what the method does not take)."""


class StepsChanged(StepFailed):
    """The steps the node offers changed since the plan was made (the agent's hardware
    managers were updated): the step did not run, and the flow may plan again."""


class Unsupported(DriverError):
    """The node's interface does not offer this action (a 400, as in Ironic).

    The message is Ironic's, so clients that match on it keep working.
    """

    def __init__(self, driver: str, extension: str) -> None:
        super().__init__(
            f"Driver {driver} does not support {extension} (disabled or not implemented)."
        )


INDICATOR_STATES = ("blinking", "off", "on")
"""States an indicator can be set to (Ironic's ``indicator_states``); ``unknown`` is read only."""


class StepsNotKnown(DriverError):
    """The interface cannot list its steps yet; ask again in ``retry_after`` seconds.

    An in-band implementation learns its steps from the ramdisk agent, which
    reports them only once it runs on the node. Callers must treat this as
    "later", not as "none": an empty list would make automated cleaning skip
    steps and manual cleaning refuse valid ones. ``retry_after`` is -1 when
    nobody can tell (no agent is booting: it will only once cleaning starts).
    """

    def __init__(self, message: str, retry_after: int = -1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class DriverTask(Protocol):
    """What a driver may use while the conductor holds the node's reservation."""

    @property
    def node(self) -> Node: ...

    def sleep(self, seconds: float) -> None:
        """Wait, but return early (raising) if the conductor is stopping or the lock was lost."""

    def record(self, event_type: str, event: str, severity: str = "INFO") -> None:
        """Add an entry to the node's history."""

    @property
    def settings(self) -> ConductorSettings:
        """The conductor's settings (timeouts the driver honours)."""

    def now(self) -> float:
        """Seconds since the epoch on the clock every conductor shares (the database's).

        Timeouts are measured with it: the conductor that takes a node over
        compares with times another one wrote, and tests set it."""

    def interface(self, family: str) -> Interface:
        """The node's implementation of another interface family (a deploy boots via boot)."""

    @property
    def progress(self) -> FlowProgress:
        """How far the node's step flow has got (plan, step index, ramdisk state)."""

    @progress.setter
    def progress(self, value: FlowProgress) -> None:
        """Replace the progress; written with the node."""

    def agent_session(self) -> AgentSessionInfo | None:
        """The ramdisk agent's current session (token, URL, last heartbeat), if any."""

    def begin_agent_session(self) -> None:
        """The ramdisk is about to boot: void the old agent's token and address now."""

    def end_agent_session(self) -> None:
        """The agent is gone (the node powered off or boots its instance)."""

    def keep_agent_session(self) -> bool:
        """The flow ends and leaves its agent running for the next one (fast track); an
        idle check is due when it may be powered off. ``False``: no session to keep."""

    def store_bios_settings(self, settings: Sequence[bios_settings.Setting]) -> None:
        """Keep ``settings`` as the node's BIOS settings (what its BMC reports), now."""

    def store_firmware(self, reported: Sequence[firmware_components.Reported]) -> None:
        """Keep what the BMC reports of the node's firmware components."""


def set_info(task: DriverTask, **values: Any) -> None:
    """Set keys of ``driver_internal_info`` (a None value removes the key), as one new
    dict: the column is written when it changed, so it is never mutated in place."""
    info = dict(task.node.driver_internal_info)
    for key, value in values.items():
        if value is None:
            info.pop(key, None)
        else:
            info[key] = value
    task.node.driver_internal_info = info


FORCE_PERSISTENT = "force_persistent_boot_device"
"""``driver_info`` key (Ironic's): ``Always`` makes every boot device a flow sets
persistent, ``Never`` one-time; ``Default`` (or none) leaves the flow's choice."""
_TRUE_WORDS = ("true", "yes", "on", "1", "t", "y")


def boot_persistence(task: DriverTask, persistent: bool) -> bool:
    """Whether a boot device a flow sets is persistent, after the node's
    ``force_persistent_boot_device``. As in Ironic, an older true value (``True``,
    ``"yes"``) means ``Always`` and any other value the flow's own choice."""
    forced = (task.node.driver_info or {}).get(FORCE_PERSISTENT)
    if forced == "Always" or forced is True:
        return True
    if forced == "Never":
        return False
    if isinstance(forced, str) and forced.strip().lower() in _TRUE_WORDS:
        return True
    return persistent


class ReadOnlyTask:
    """A ``DriverTask`` that reads the node and never writes (validation, listing steps).

    The API has no reservation to offer, so whatever a driver does with this
    task must not change the node: it is never saved.
    """

    def __init__(
        self,
        node: Node,
        settings: ConductorSettings | None = None,
        progress: FlowProgress = NO_FLOW,
        interfaces: Callable[[str], Interface] | None = None,
    ) -> None:
        self._node = node
        self._settings = settings or ConductorSettings()
        self._progress = progress
        self._interfaces = interfaces
        """The node's other interfaces, for a validation that asks one (the deploy asks
        the boot interface what it can boot); none: a read-only task may use none."""

    @property
    def progress(self) -> FlowProgress:
        return self._progress

    @progress.setter
    def progress(self, value: FlowProgress) -> None:
        self._progress = value  # like the node: changed in memory, never saved

    @property
    def node(self) -> Node:
        return self._node

    def sleep(self, seconds: float) -> None:
        # A real pause: a driver that polls must not spin in a tight loop.
        if seconds > 0:
            time.sleep(seconds)

    def record(self, event_type: str, event: str, severity: str = "INFO") -> None:
        return None

    @property
    def settings(self) -> ConductorSettings:
        return self._settings

    def now(self) -> float:
        return time.time()

    def interface(self, family: str) -> Interface:
        if self._interfaces is None:
            raise DriverError(f"a read-only task cannot use the {family} interface")
        return self._interfaces(family)

    def agent_session(self) -> AgentSessionInfo | None:
        return None

    def begin_agent_session(self) -> None:
        raise DriverError("a read-only task cannot boot the ramdisk")

    def end_agent_session(self) -> None:
        raise DriverError("a read-only task cannot end the agent's session")

    def keep_agent_session(self) -> bool:
        raise DriverError("a read-only task cannot keep the agent running")

    def store_bios_settings(self, settings: Sequence[bios_settings.Setting]) -> None:
        raise DriverError("a read-only task cannot store BIOS settings")

    def store_firmware(self, reported: Sequence[firmware_components.Reported]) -> None:
        raise DriverError("a read-only task cannot store firmware versions")


class Interface(ABC):
    """Base of every driver interface."""

    interface_type: ClassVar[str]
    """The interface family: power, management, deploy, ..."""
    name: ClassVar[str]
    """The implementation's name, chosen by nodes in ``<type>_interface``."""
    agent_steps_after: ClassVar[str | None] = None
    """The interface's own deploy step (a method) after which its ramdisk agent has
    reported the in-band deploy steps it also offers; ``None``: it offers none (every
    deploy step it runs is declared). A deploy plan that names an agent step is
    provisional until that step has run (``conductor.deploy_plan``)."""

    @abstractmethod
    def validate(self, task: DriverTask) -> None:
        """Raise ``DriverError`` when the node lacks what this interface needs."""

    def properties(self) -> dict[str, str]:
        """``driver_info`` keys this interface reads, with descriptions."""
        return {}

    @classmethod
    def steps(cls) -> list[StepDecl]:
        """Steps this implementation declares."""
        return declared_steps(cls)

    def get_steps(self, task: DriverTask, kind: StepKind) -> list[StepDecl]:
        """Every ``kind`` step this interface offers for ``task.node``, highest priority first.

        Steps with priority 0 are included: the operator's overrides may give
        them a priority and a request may name them, so only the conductor,
        after overrides, decides what runs automatically. An in-band interface
        adds the steps its agent reported and raises ``StepsNotKnown`` while no
        agent has. Must not change the node (the API lists steps without a
        reservation).
        """
        found = [d for d in self.steps() if d.kind == kind]
        return sorted(found, key=lambda d: (-d.priority, d.method))

    def execute_step(
        self, task: DriverTask, kind: StepKind, step: Mapping[str, Any]
    ) -> StepOutcome:
        """Run one of this interface's ``kind`` steps, given as the plan stores it.

        ``step`` carries at least ``step`` (the method) and ``args``; the
        engine checked the arguments' names against ``argsinfo`` already.
        """
        return self.run_step(task, str(step["step"]), dict(step.get("args") or {}))

    def run_step(self, task: DriverTask, method: str, args: dict[str, Any]) -> StepOutcome:
        """Run the declared step ``method`` with ``args``.

        The call is bound before the step runs, so arguments that do not fit
        are a refused step (``StepRefused``) while a ``TypeError`` raised
        inside the step stays what it is: the step's own failure.
        """
        if not any(decl.method == method for decl in self.steps()):
            raise StepRefused(f"{self.interface_type}.{method} is not a declared step")
        step = getattr(self, method)
        try:
            inspect.signature(step).bind(task, **args)
        except TypeError as exc:
            raise StepRefused(f"rejected its arguments: {exc}") from None
        outcome = step(task, **args)
        return "wait" if outcome == "wait" else "done"

    def check_step(self, task: DriverTask, method: str) -> StepOutcome:
        """Called while the node waits on an asynchronous step: is it finished?"""
        return "done"

    def abort_step(self, task: DriverTask, method: str) -> None:  # noqa: B027 - optional hook
        """Stop an abortable asynchronous step now (default: nothing is running elsewhere)."""


class PowerInterface(Interface):
    interface_type = "power"

    @abstractmethod
    def get_power_state(self, task: DriverTask) -> str:
        """The power state read from the hardware."""

    @abstractmethod
    def set_power_state(self, task: DriverTask, target: str, timeout: int | None = None) -> None:
        """Move to ``target`` (one of POWER_TARGETS) and return once it is reached."""


def switch_power(
    task: DriverTask, power: PowerInterface, target: str, timeout: int | None = None
) -> None:
    """Move the node to ``target`` through ``power``, counted for ``/metrics`` by flow and
    target: every power change metalforge makes goes through here, so the counts say
    how many cycles a flow cost."""
    power.set_power_state(task, target, timeout)
    failures.power_switched(task.node.provision_state, target)


VMEDIA_DEVICES = ("disk", "cdrom", "floppy")
"""Devices an image can be attached to as virtual media (Ironic's names)."""


@dataclass(frozen=True)
class VirtualMedia:
    """One of a BMC's virtual media drives: what it takes and what it holds."""

    media_types: tuple[str, ...]
    """Redfish's names: ``CD``, ``DVD``, ``Floppy``, ``USBStick``..."""
    inserted: bool
    image: str | None


HEALTH_STATES = ("OK", "Warning", "Critical")
"""A node's ``health`` values (Ironic's, from Redfish's ``Status.Health``)."""


class ManagementInterface(Interface):
    interface_type = "management"

    @abstractmethod
    def get_boot_device(self, task: DriverTask) -> dict[str, Any]:
        """``{"boot_device": ..., "persistent": ...}``."""

    @abstractmethod
    def set_boot_device(self, task: DriverTask, device: str, persistent: bool = False) -> None:
        """Boot from ``device`` next time (or always when ``persistent``)."""

    def supported_boot_devices(self, task: DriverTask) -> list[str]:
        return ["pxe", "disk"]

    # The optional extras: the default is Ironic's answer for a driver without them.

    def get_boot_mode(self, task: DriverTask) -> str | None:
        """``uefi`` or ``bios`` as the hardware reports it; None when it does not say."""
        raise Unsupported(task.node.driver, "get_boot_mode")

    def set_boot_mode(self, task: DriverTask, mode: str) -> None:
        """Switch the firmware to ``mode`` (``uefi`` or ``bios``)."""
        raise Unsupported(task.node.driver, "set_boot_mode")

    def get_secure_boot_state(self, task: DriverTask) -> bool | None:
        raise Unsupported(task.node.driver, "get_secure_boot_state")

    def set_secure_boot_state(self, task: DriverTask, enabled: bool) -> None:
        raise Unsupported(task.node.driver, "set_secure_boot_state")

    def get_virtual_media(self, task: DriverTask) -> list[VirtualMedia]:
        """The BMC's virtual media drives and what they hold."""
        raise Unsupported(task.node.driver, "get_virtual_media")

    def attach_virtual_media(self, task: DriverTask, device_type: str, image_url: str) -> None:
        """Insert the image the BMC downloads from ``image_url`` into a ``device_type`` drive
        (one of ``VMEDIA_DEVICES``), replacing what that drive held."""
        raise Unsupported(task.node.driver, "attach_virtual_media")

    def detach_virtual_media(self, task: DriverTask, device_types: Sequence[str]) -> None:
        """Eject what the drives of ``device_types`` hold (all drives when empty)."""
        raise Unsupported(task.node.driver, "detach_virtual_media")

    def get_health(self, task: DriverTask) -> str | None:
        """The hardware's overall health as its BMC rates it: one of ``HEALTH_STATES``, or
        None where the BMC says nothing (the default: most interfaces cannot tell)."""
        return None

    def inject_nmi(self, task: DriverTask) -> None:
        """Send a non-maskable interrupt to the running system (a crash dump, usually)."""
        raise Unsupported(task.node.driver, "inject_nmi")

    def get_supported_indicators(self, task: DriverTask) -> dict[str, dict[str, Indicator]]:
        """``{component: {indicator id: Indicator}}`` (components: ``system``, ``chassis``...)."""
        raise Unsupported(task.node.driver, "get_supported_indicators")

    def get_indicator_state(self, task: DriverTask, component: str, indicator: str) -> str:
        """One of ``INDICATOR_STATES`` or ``unknown``."""
        raise Unsupported(task.node.driver, "get_indicator_state")

    def set_indicator_state(
        self, task: DriverTask, component: str, indicator: str, state: str
    ) -> None:
        """Set ``indicator`` of ``component`` to ``state`` (one of ``INDICATOR_STATES``)."""
        raise Unsupported(task.node.driver, "set_indicator_state")


@dataclass(frozen=True)
class Indicator:
    """An indicator (a LED) a management interface offers, as Ironic lists it."""

    readonly: bool
    states: tuple[str, ...]


class ConsoleInterface(Interface):
    """A serial console the node's BMC offers; the ``no-console`` implementation is none.

    The conductor starts and stops it and records ``console_enabled``; the API
    shows what ``get_console`` returns while it is enabled.
    """

    interface_type = "console"

    @abstractmethod
    def start_console(self, task: DriverTask) -> None:
        """Start the console (no error when it already runs)."""

    @abstractmethod
    def stop_console(self, task: DriverTask) -> None:
        """Stop the console (no error when it is not running)."""

    @abstractmethod
    def get_console(self, task: DriverTask) -> dict[str, Any]:
        """How to connect to the running console (``console_info``)."""


def ramdisk_instance_iso(task: DriverTask) -> str:
    """``instance_info.boot_iso``: the ISO an instance that runs from a ramdisk boots."""
    url = task.node.instance_info.get("boot_iso")
    if not url:
        raise DriverError(
            "instance_info.boot_iso is not set: the ramdisk deploy boots the instance from it"
        )
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise DriverError(f"instance_info.boot_iso must be an http(s) URL, not {url!r}")
    return url


class BootInterface(Interface):
    interface_type = "boot"

    boots_ramdisk_instances: ClassVar[bool] = False
    """It can boot an instance that runs from a ramdisk (the ``ramdisk`` deploy:
    ``prepare_ramdisk_instance``), as Ironic's boot interfaces with ``ramdisk_boot``."""

    def prepare_ramdisk_instance(self, task: DriverTask) -> None:
        """Arrange for the node to boot, every time, the instance that runs from a ramdisk
        (``instance_info.boot_iso``); undone by ``clean_up_instance``."""
        raise DriverError(
            f"boot interface {self.name} cannot boot an instance that runs from a ramdisk"
        )

    def prepare_ramdisk(self, task: DriverTask) -> None:
        """Arrange for the node to boot the agent ramdisk."""

    def clean_up_ramdisk(self, task: DriverTask) -> None:
        """Undo ``prepare_ramdisk`` once the ramdisk is stopped (eject what was inserted)."""

    def prepare_instance(self, task: DriverTask) -> None:
        """Arrange for the node to boot the deployed instance."""

    def clean_up_instance(self, task: DriverTask) -> None:
        """Undo ``prepare_instance``."""


class DeployInterface(Interface):
    interface_type = "deploy"

    boots_ramdisk: ClassVar[bool] = False
    """Its steps run in a ramdisk agent it boots (flows that boot none cannot run them)."""

    @abstractmethod
    def tear_down(self, task: DriverTask) -> None:
        """Remove the deployed instance (power off, forget the image)."""

    def prepare_cleaning(self, task: DriverTask) -> StepOutcome:
        """Get the node ready to run clean steps; ``wait`` while a ramdisk boots.

        In-band implementations learn their steps from the agent, so the
        cleaning plan is built only once this reports ``done`` (directly, or
        from ``check_cleaning_prepared`` while the node waits).
        """
        return "done"

    def check_cleaning_prepared(self, task: DriverTask) -> StepOutcome:
        """While the node waits after ``prepare_cleaning``: is it ready now?"""
        return "done"

    def tear_down_cleaning(self, task: DriverTask) -> None:
        """Undo ``prepare_cleaning`` (stop the ramdisk): the clean was aborted while the
        ramdisk booted, or (through ``finish_cleaning``) every step succeeded."""

    def finish_cleaning(self, task: DriverTask) -> None:
        """Every step succeeded: undo ``prepare_cleaning``. An interface whose agent can
        serve the next flow may leave it running here instead (fast track)."""
        self.tear_down_cleaning(task)

    def prepare_service(self, task: DriverTask) -> StepOutcome:
        """Get an active node ready to run in-band service steps; ``wait`` while a ramdisk
        boots (the instance is left on its disk)."""
        return "done"

    def check_service_prepared(self, task: DriverTask) -> StepOutcome:
        """While the node waits after ``prepare_service``: is it ready now?"""
        return "done"

    def tear_down_service(self, task: DriverTask) -> None:
        """Undo ``prepare_service`` once every step succeeded: stop the ramdisk and boot
        the instance again."""


@dataclass(frozen=True)
class SimulatedReport:
    """A report a simulated ramdisk will post: what, and how many seconds after boot."""

    delay: float
    report: dict[str, Any]


@dataclass(frozen=True)
class Collected:
    """What an out-of-band inspection read from the BMC, as a ramdisk's report
    (``{"inventory": ...}`` in the agent's format): the conductor processes it as it
    processes one, so properties, ports and inspection rules work the same both ways."""

    report: dict[str, Any]


class InspectInterface(Interface):
    interface_type = "inspect"

    boots_ramdisk: bool = False
    """In band: ``inspect_hardware`` powers the node on into a ramdisk that reports
    later. Such power-ons take their turn from the cluster-wide throttle."""

    @abstractmethod
    def inspect_hardware(self, task: DriverTask) -> Literal["wait"] | Collected:
        """Boot the node into the inspection ramdisk (``wait``: its report continues
        the inspection), or read what the BMC knows (``Collected``)."""

    def simulated_report(self, task: DriverTask, macs: Sequence[str]) -> SimulatedReport | None:
        """The report a simulated ramdisk will post after ``inspect_hardware`` answered
        ``wait`` (fake hardware only; ``macs`` are the node's ports'); none for real ones."""
        return None

    def stop_inspection(self, task: DriverTask) -> None:
        """The inspection ended (processed, aborted, timed out): power the node off."""
        power = optional_interface_of(task, PowerInterface)
        if power is not None:
            switch_power(task, power, POWER_OFF)
            task.node.power_state = power.get_power_state(task)

    def end_inspection(self, task: DriverTask) -> None:
        """The inspection succeeded: power the node off (an interface that can leave its
        ramdisk running for the next flow does so here instead)."""
        self.stop_inspection(task)


class RaidInterface(Interface):
    interface_type = "raid"

    def validate_raid_config(self, task: DriverTask, config: Mapping[str, Any]) -> None:
        """Raise ``DriverError`` unless this interface can build ``config``.

        Called when the operator sets ``target_raid_config``. The default
        applies the rules every implementation shares; an implementation
        with narrower hardware (no RAID 6, one controller) adds its own.
        """
        try:
            check_target_raid_config(config)
        except InvalidRaidConfig as exc:
            raise DriverError(str(exc)) from None

    def logical_disk_properties(self) -> dict[str, str]:
        """What a logical disk of ``target_raid_config`` may hold, with descriptions.

        The shared rules by default; an implementation that narrows them
        (``validate_raid_config``) narrows this too.
        """
        return dict(LOGICAL_DISK_PROPERTIES)


class FirmwareInterface(Interface):
    """Firmware: the versions a node's components run, and the ``update`` step."""

    interface_type = "firmware"

    def cache_firmware_components(self, task: DriverTask) -> None:
        """Read what the components run and keep it (``task.store_firmware``)."""
        raise NotImplementedError


class BiosInterface(Interface):
    """BIOS settings: steps that change them, and reading them back for the API."""

    interface_type = "bios"

    def cache_bios_settings(self, task: DriverTask) -> None:
        """Read the node's BIOS settings and keep them (``task.store_bios_settings``)."""
        raise NotImplementedError


class RescueInterface(Interface):
    """Boot a deployed node into a rescue system the tenant logs in to, and back.

    ``instance_info.rescue_password`` holds the password the rescue user gets;
    an implementation consumes it and removes it from the node. The ``no-rescue``
    implementation is not a ``RescueInterface``: the API refuses rescue for it.
    """

    interface_type = "rescue"

    def rescue(self, task: DriverTask) -> StepOutcome:
        """Boot the rescue system; ``"wait"`` while it has yet to report."""
        raise NotImplementedError

    def unrescue(self, task: DriverTask) -> None:
        """Return the node to its instance."""
        raise NotImplementedError

    def check_password(self, password: str) -> None:
        """Refuse (``DriverError``) a password this rescue system cannot take, before the
        request is accepted."""
        return None

    def check_rescued(self, task: DriverTask) -> StepOutcome:
        """While the node waits after ``rescue``: is the rescue system up now?"""
        return "done"

    def clean_up(self, task: DriverTask) -> None:
        """Undo a rescue that failed, timed out or was aborted (stop what it booted, forget
        the password)."""
        return None


class VendorInterface(Interface):
    """Vendor passthru: methods a vendor offers beyond the other interfaces.

    Methods are declared with ``@passthru`` (on a node) and ``@driver_passthru``
    (on the hardware type) from ``vendor.py``; the API lists and routes them.
    ``validate_call`` checks a call's arguments before anything runs: for an
    asynchronous method that is the caller's only chance to hear about a bad
    argument, since the method itself runs later on a conductor. The
    ``no-vendor`` implementation is not a ``VendorInterface``: it has no methods.
    """

    interface_type = "vendor"

    def validate(self, task: DriverTask) -> None:
        return None

    @classmethod
    def node_methods(cls) -> dict[str, PassthruDecl]:
        return declared_passthru(cls, "node")

    @classmethod
    def driver_methods(cls) -> dict[str, PassthruDecl]:
        return declared_passthru(cls, "driver")

    def validate_call(
        self, task: DriverTask, method: str, http_method: str, args: Mapping[str, Any]
    ) -> None:
        """Raise ``DriverError`` unless ``args`` suit the node method ``method``.

        Must not change the node: for asynchronous methods it runs in the API
        without the node's reservation.
        """

    def validate_driver_call(self, method: str, http_method: str, args: Mapping[str, Any]) -> None:
        """Raise ``DriverError`` unless ``args`` suit the driver method ``method``."""

    def call(
        self, task: DriverTask, decl: PassthruDecl, http_method: str, args: Mapping[str, Any]
    ) -> Any:
        """Run the node method ``decl`` (validated); its return value is the answer's body."""
        return getattr(self, decl.attribute)(task, http_method, dict(args))

    def call_driver(self, decl: PassthruDecl, http_method: str, args: Mapping[str, Any]) -> Any:
        """Run the driver method ``decl`` (validated)."""
        return getattr(self, decl.attribute)(http_method, dict(args))


def check_vendor_args(
    method: str,
    args: Mapping[str, Any],
    accepted: Mapping[str, type | tuple[type, ...]],
    required: Collection[str] = (),
) -> None:
    """The common argument rules of a vendor method: known names, required ones, JSON types.

    A vendor method's arguments are whatever object the caller sent, so each
    method names what it takes; anything else is refused, naming it.
    """
    unknown = sorted(set(args) - set(accepted))
    if unknown:
        raise DriverError(
            f"Unexpected argument(s) {', '.join(repr(a) for a in unknown)} for method "
            f"'{method}'; it accepts {', '.join(sorted(accepted)) or 'none'}."
        )
    for name in required:
        if not args.get(name):
            raise DriverError(f"Parameter '{name}' not passed to method '{method}'.")
    for name, value in args.items():
        kinds = accepted[name]
        # bool is an int to Python but not to JSON.
        wrong_bool = isinstance(value, bool) and bool not in (
            kinds if isinstance(kinds, tuple) else (kinds,)
        )
        if value is not None and (wrong_bool or not isinstance(value, kinds)):
            names = kinds if isinstance(kinds, tuple) else (kinds,)
            raise DriverError(
                f"Parameter '{name}' of method '{method}' must be "
                f"{' or '.join(_JSON_NAMES.get(k, k.__name__) for k in names)}, "
                f"not {_JSON_NAMES.get(type(value), type(value).__name__)}."
            )


_JSON_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


class GenericInterface(Interface):
    """An interface whose family needs no methods beyond validation (console, network...)."""


class NoOp(GenericInterface):
    """The ``no-<type>``/``noop`` implementation: nothing to validate, nothing to do."""

    def validate(self, task: DriverTask) -> None:
        return None


def noop_interface(interface_type: str, name: str) -> type[Interface]:
    """A ``NoOp`` implementation registered as ``name`` for ``interface_type``."""
    return type(
        f"NoOp_{interface_type}_{name}".replace("-", "_"),
        (NoOp,),
        {"interface_type": interface_type, "name": name},
    )


STORAGE_INTERFACES: tuple[type[Interface], ...] = (
    noop_interface("storage", "noop"),
    noop_interface("storage", "external"),
)
"""The storage interfaces every hardware type offers, as Ironic's do: ``noop`` (local
disks; the default) and ``external`` (volumes attached by something else). Neither
has work to do here; a node's volume connectors and targets are recorded whichever
is chosen."""


AnyInterface = TypeVar("AnyInterface", bound=Interface)


class NotOffered(DriverError):
    """The node's implementation of a family cannot do what is asked (a no-op one)."""

    def __init__(self, iface: Interface, doing: str) -> None:
        super().__init__(f"the {iface.name} {iface.interface_type} interface cannot {doing}")
        self.implementation = iface.name
        """The node's choice for the family (``no-raid``, ``fake``...)."""


def offered(iface: Interface, kind: type[AnyInterface], doing: str) -> AnyInterface:
    """``iface`` as a ``kind``, or ``NotOffered`` saying it cannot do ``doing``."""
    if not isinstance(iface, kind):
        raise NotOffered(iface, doing)
    return iface


def interface_of(task: DriverTask, kind: type[AnyInterface], doing: str) -> AnyInterface:
    """The task's node's implementation of ``kind``'s family, typed (``NotOffered`` when
    the node's choice cannot do ``doing``): one call instead of a lookup and a narrowing."""
    return offered(task.interface(kind.interface_type), kind, doing)


def optional_interface_of(task: DriverTask, kind: type[AnyInterface]) -> AnyInterface | None:
    """The task's node's implementation of ``kind``'s family, typed, or ``None`` when the
    node's choice is not one (a no-op implementation), for callers to whom that is no error."""
    iface = task.interface(kind.interface_type)
    return iface if isinstance(iface, kind) else None
