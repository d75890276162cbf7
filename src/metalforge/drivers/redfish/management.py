"""``redfish`` management: boot device override, boot mode, secure boot, NMI and indicators.

Boot devices map to ``BootSourceOverrideTarget`` values; the devices offered
are those the BMC lists in ``BootSourceOverrideTarget@Redfish.AllowableValues``
(sushy-emulator, for one, has no ``BiosSetup``), so an unsupported device is
refused before anything is sent.

Secure boot is the system's ``SecureBoot`` resource (``SecureBootEnable``);
it needs UEFI, as Ironic checks. An NMI is ``ComputerSystem.Reset`` with
``Nmi``. Indicators are the ``IndicatorLED`` of the system and of each chassis
that has one, named by the resource's UUID as Ironic names them; all take
``blinking``/``off``/``on`` (``Lit`` is ``on``).

Persistence is ``BootSourceOverrideEnabled``: ``Once`` or ``Continuous``.
``get_boot_device`` reports what the BMC says, not what was asked: some BMCs
(sushy-emulator among them) accept ``Once`` and read back ``Continuous``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sushy

from metalforge.drivers.base import (
    HEALTH_STATES,
    DriverError,
    DriverTask,
    Indicator,
    ManagementInterface,
    Unsupported,
    VirtualMedia,
)
from metalforge.drivers.redfish import connection

BOOT_SOURCES: dict[str, Any] = {
    "pxe": sushy.BootSource.PXE,
    "disk": sushy.BootSource.HDD,
    "cdrom": sushy.BootSource.CD,
    "bios": sushy.BootSource.BIOS_SETUP,
    "uefihttp": sushy.BootSource.UEFI_HTTP,
}
"""metalforge boot device -> Redfish boot source."""
_DEVICES = {source: device for device, source in BOOT_SOURCES.items()}

BOOT_MODES: dict[str, Any] = {
    "uefi": sushy.BootSourceOverrideMode.UEFI,
    "bios": sushy.BootSourceOverrideMode.LEGACY,
}
"""Node ``boot_mode`` values -> Redfish BootSourceOverrideMode."""
_MODES = {mode: name for name, mode in BOOT_MODES.items()}


_LED_STATES: dict[Any, str] = {
    sushy.IndicatorLED.LIT: "on",
    sushy.IndicatorLED.OFF: "off",
    sushy.IndicatorLED.BLINKING: "blinking",
    sushy.IndicatorLED.UNKNOWN: "unknown",
}
"""Redfish IndicatorLED -> indicator state (Ironic's mapping)."""
_LEDS = {state: led for led, state in _LED_STATES.items() if state != "unknown"}
_SETTABLE = Indicator(readonly=False, states=("blinking", "off", "on"))


def _leds(system: Any) -> dict[str, dict[str, Any]]:
    """``{component: {id: resource}}`` of the resources with an IndicatorLED."""
    found: dict[str, dict[str, Any]] = {}
    chassis = {c.uuid: c for c in (system.chassis or []) if c.indicator_led}
    if chassis:
        found["chassis"] = chassis
    if system.indicator_led:
        found["system"] = {system.uuid: system}
    return found


def _led(system: Any, task: DriverTask, component: str, indicator: str) -> Any:
    resource = _leds(system).get(component, {}).get(indicator)
    if resource is None:
        raise DriverError(
            f"Unknown indicator {indicator} for component {component} of node {task.node.uuid}"
        )
    return resource


def supported_devices(system: Any) -> list[str]:
    allowed = system.get_allowed_system_boot_source_values()
    return [device for device, source in BOOT_SOURCES.items() if source in allowed]


def set_boot_device(system: Any, device: str, persistent: bool) -> None:
    """Set the override on an open ``system`` (shared with the virtual media boot)."""
    supported = supported_devices(system)
    if device not in supported:
        raise DriverError(
            f"Boot device {device!r} is not supported by this node's BMC; "
            f"supported: {', '.join(supported) or 'none'}"
        )
    enabled = (
        sushy.BootSourceOverrideEnabled.CONTINUOUS
        if persistent
        else sushy.BootSourceOverrideEnabled.ONCE
    )
    system.set_system_boot_options(BOOT_SOURCES[device], enabled=enabled)


def set_http_boot(system: Any, url: str, persistent: bool) -> None:
    """Boot ``url`` (an ISO) through the firmware's UEFI HTTP boot: ``UefiHttp`` with
    ``HttpBootUri``, on an open ``system``."""
    if "uefihttp" not in supported_devices(system):
        raise DriverError(
            "The node's BMC offers no UEFI HTTP boot (UefiHttp is not among its boot "
            "targets; it often needs UEFI boot mode)"
        )
    enabled = (
        sushy.BootSourceOverrideEnabled.CONTINUOUS
        if persistent
        else sushy.BootSourceOverrideEnabled.ONCE
    )
    system.set_system_boot_options(BOOT_SOURCES["uefihttp"], enabled=enabled, http_boot_uri=url)


VMEDIA_TYPES: dict[str, tuple[Any, ...]] = {
    "cdrom": (sushy.VirtualMediaType.CD, sushy.VirtualMediaType.DVD),
    "floppy": (sushy.VirtualMediaType.FLOPPY,),
    "disk": (sushy.VirtualMediaType.USB_STICK,),
}
"""The Redfish media types each of Ironic's virtual media devices stands for."""


def _drives(system: Any) -> list[Any]:
    """The system's virtual media drives (Redfish 1.11: under the system)."""
    try:
        collection = system.virtual_media
    except sushy.exceptions.MissingAttributeError:
        raise DriverError("The node's BMC has no virtual media under its system") from None
    return list(collection.get_members())


def _takes(drive: Any, device_type: str) -> bool:
    return any(kind in VMEDIA_TYPES[device_type] for kind in drive.media_types or ())


def _shown_types(drive: Any) -> tuple[str, ...]:
    return tuple(str(getattr(kind, "value", kind)) for kind in drive.media_types or ())


class RedfishManagement(ManagementInterface):
    """Boot device and boot mode through the system's ``Boot`` property."""

    name = "redfish"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)

    def properties(self) -> dict[str, str]:
        return dict(connection.PROPERTIES)

    def supported_boot_devices(self, task: DriverTask) -> list[str]:
        with connection.system(task, "list the boot devices") as system:
            return supported_devices(system)

    def get_boot_device(self, task: DriverTask) -> dict[str, Any]:
        with connection.system(task, "read the boot device") as system:
            boot = system.boot
            target = boot.target if boot else None
            enabled = boot.enabled if boot else None
        if enabled in (None, sushy.BootSourceOverrideEnabled.DISABLED):
            # No override: the machine follows its own boot order.
            return {"boot_device": None, "persistent": None}
        return {
            "boot_device": _DEVICES.get(target),
            "persistent": enabled == sushy.BootSourceOverrideEnabled.CONTINUOUS,
        }

    def set_boot_device(self, task: DriverTask, device: str, persistent: bool = False) -> None:
        with connection.system(task, f"set the boot device to {device}") as system:
            set_boot_device(system, device, persistent)

    def get_boot_mode(self, task: DriverTask) -> str | None:
        """``uefi``, ``bios``, or None when the BMC does not say."""
        with connection.system(task, "read the boot mode") as system:
            mode = system.boot.mode if system.boot else None
        return _MODES.get(mode)

    def set_boot_mode(self, task: DriverTask, mode: str) -> None:
        """Switch to ``uefi`` or ``bios`` and record it as the node's ``boot_mode``."""
        if mode not in BOOT_MODES:
            raise DriverError(
                f"Invalid boot mode {mode!r}; expected one of {', '.join(BOOT_MODES)}"
            )
        with connection.system(task, f"set the boot mode to {mode}") as system:
            system.set_system_boot_options(mode=BOOT_MODES[mode])
        task.node.boot_mode = mode

    def get_secure_boot_state(self, task: DriverTask) -> bool | None:
        with connection.system(task, "read the secure boot state") as system:
            try:
                return bool(system.secure_boot.enabled)
            except sushy.exceptions.MissingAttributeError:
                raise Unsupported(task.node.driver, "get_secure_boot_state") from None

    def set_secure_boot_state(self, task: DriverTask, enabled: bool) -> None:
        with connection.system(task, "set the secure boot state") as system:
            try:
                secure = system.secure_boot
            except sushy.exceptions.MissingAttributeError:
                raise Unsupported(task.node.driver, "set_secure_boot_state") from None
            if secure.enabled == enabled:
                return
            mode = system.boot.mode if system.boot else None
            if mode == sushy.BootSourceOverrideMode.LEGACY:
                raise DriverError(
                    f"Configuring secure boot requires UEFI for node {task.node.uuid}"
                )
            secure.set_enabled(enabled)

    def get_virtual_media(self, task: DriverTask) -> list[VirtualMedia]:
        with connection.system(task, "list the virtual media") as system:
            return [
                VirtualMedia(_shown_types(d), bool(d.inserted), d.image or None)
                for d in _drives(system)
            ]

    def attach_virtual_media(self, task: DriverTask, device_type: str, image_url: str) -> None:
        with connection.system(task, f"insert virtual media {image_url}") as system:
            drive = next((d for d in _drives(system) if _takes(d, device_type)), None)
            if drive is None:
                raise DriverError(f"The node's BMC has no virtual {device_type} drive")
            if drive.inserted:
                drive.eject_media()
            drive.insert_media(image_url, inserted=True, write_protected=device_type == "cdrom")

    def detach_virtual_media(self, task: DriverTask, device_types: Sequence[str]) -> None:
        with connection.system(task, "eject virtual media") as system:
            for drive in _drives(system):
                wanted = not device_types or any(_takes(drive, t) for t in device_types)
                if wanted and drive.inserted:
                    drive.eject_media()

    def get_health(self, task: DriverTask) -> str | None:
        """The system's ``Status.Health`` (``OK``, ``Warning``, ``Critical``), if it reports one."""
        with connection.system(task, "read the health") as system:
            status = system.status
            health = getattr(status, "health", None) if status is not None else None
        value = getattr(health, "value", health)
        return value if value in HEALTH_STATES else None

    def inject_nmi(self, task: DriverTask) -> None:
        with connection.system(task, "inject an NMI") as system:
            system.reset_system(sushy.ResetType.NMI)

    def get_supported_indicators(self, task: DriverTask) -> dict[str, dict[str, Indicator]]:
        with connection.system(task, "list the indicators") as system:
            leds = _leds(system)
        return {component: dict.fromkeys(ids, _SETTABLE) for component, ids in leds.items()}

    def get_indicator_state(self, task: DriverTask, component: str, indicator: str) -> str:
        with connection.system(task, f"read indicator {indicator}@{component}") as system:
            led = _led(system, task, component, indicator).indicator_led
        return _LED_STATES.get(led, "unknown")

    def set_indicator_state(
        self, task: DriverTask, component: str, indicator: str, state: str
    ) -> None:
        if state not in _LEDS:
            raise DriverError(f"Invalid indicator state {state!r}")
        with connection.system(task, f"set indicator {indicator}@{component}") as system:
            _led(system, task, component, indicator).set_indicator_led(_LEDS[state])
