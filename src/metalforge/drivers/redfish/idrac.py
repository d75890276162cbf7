"""The ``idrac`` hardware type: Redfish, with Dell's OEM extensions where an iDRAC differs.

Metal3 enrolls Dell servers (``idrac-redfish://``, ``idrac-virtualmedia://``)
with the ``idrac`` type and ``idrac-redfish`` interfaces. As in Ironic, most
of them do what the ``redfish`` ones do (an iDRAC speaks standard Redfish for
power, BIOS, firmware, RAID volumes, inspection and vendor calls); where an
iDRAC needs its own calls they go through sushy's Dell OEM extension
(``sushy.oem.dell``, what replaced sushy-oem-idrac):

* ``idrac-redfish-virtual-media`` boot: the virtual CD is made the boot
  device through ``ImportSystemConfiguration`` (``ServerBoot.1#FirstBootDevice``
  ``VCD-DVD``), since an iDRAC does not take ``Cd`` as a standard boot
  override; inserting and ejecting are standard;
* ``idrac-redfish`` management adds three clean steps, out of band and at
  priority 0, as Ironic's: ``clear_job_queue`` (the iDRAC's
  ``DeleteJobQueue`` with ``JID_CLEARALL``: a stale job blocks every later
  configuration change), ``reset_idrac`` (``iDRACReset``, then the step
  waits, the node in ``clean wait`` and no worker held, until the
  lifecycle controller says it is ready again) and ``known_good_state``
  (both: reset, then clear the queue).

Not done yet beside Ironic's: the RAID interface's conversion of non-RAID
disks and clearing of foreign configurations, inspection's service tag
and PXE-port discovery from BIOS settings; their ``redfish`` behaviour
applies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sushy

from metalforge.drivers.base import DriverError, DriverTask, StepOutcome, set_info
from metalforge.drivers.redfish import connection
from metalforge.drivers.redfish.bios import RedfishBios
from metalforge.drivers.redfish.boot import RedfishVirtualMediaBoot
from metalforge.drivers.redfish.inspect import RedfishInspect
from metalforge.drivers.redfish.management import RedfishManagement
from metalforge.drivers.redfish.power import RedfishPower
from metalforge.drivers.redfish.raid import RedfishRaid
from metalforge.drivers.redfish.vendor import RedfishVendor
from metalforge.drivers.step_declarations import clean_step

_RESET = "idrac_reset"
"""``driver_internal_info`` key: a reset step waits for the iDRAC (and what follows it)."""


def _manager(system: Any) -> Any:
    managers = system.managers
    if not managers:
        raise DriverError("The node's BMC reports no manager for its system")
    return managers[0]


def dell_extension(system: Any) -> tuple[Any, Any]:
    """The system's manager and its Dell OEM extension (``DriverError`` on a BMC that is
    not an iDRAC)."""
    manager = _manager(system)
    if not manager.json.get("Links", {}).get("Oem", {}).get("Dell"):
        raise DriverError("The node's BMC offers no Dell OEM extension: it is not an iDRAC")
    try:
        return manager, manager.get_oem_extension("Dell")
    except sushy.exceptions.SushyError as exc:
        raise DriverError(
            f"The node's BMC offers no Dell OEM extension (not an iDRAC?): {exc}"
        ) from None


@contextmanager
def _dell(task: DriverTask, doing: str) -> Iterator[Any]:
    with connection.system(task, doing) as system:
        yield dell_extension(system)[1]


class IdracVirtualMediaBoot(RedfishVirtualMediaBoot):
    """``redfish-virtual-media`` whose CD boot device is set the iDRAC's way."""

    name = "idrac-redfish-virtual-media"

    def boot_from_cd(self, system: Any, *, persistent: bool) -> None:
        manager, dell = dell_extension(system)
        dell.set_virtual_boot_device(
            sushy.VIRTUAL_MEDIA_CD, persistent=persistent, manager=manager, system=system
        )


class IdracManagement(RedfishManagement):
    """Redfish management plus the iDRAC's job queue and reset (module docstring)."""

    name = "idrac-redfish"

    @clean_step(priority=0, requires_ramdisk=False)
    def clear_job_queue(self, task: DriverTask) -> None:
        """Delete every job the iDRAC has queued (``JID_CLEARALL``)."""
        with _dell(task, "clear the iDRAC's job queue") as dell:
            dell.job_service.delete_jobs(job_ids=["JID_CLEARALL"])
        task.record("idrac", "the iDRAC's job queue was cleared")

    @clean_step(priority=0, requires_ramdisk=False, asynchronous=True)
    def reset_idrac(self, task: DriverTask) -> StepOutcome:
        """Reset the iDRAC and wait until its lifecycle controller is ready again."""
        return self._reset(task, then_clear=False)

    @clean_step(priority=0, requires_ramdisk=False, asynchronous=True)
    def known_good_state(self, task: DriverTask) -> StepOutcome:
        """Reset the iDRAC, wait for it, then clear its job queue."""
        return self._reset(task, then_clear=True)

    def _reset(self, task: DriverTask, *, then_clear: bool) -> StepOutcome:
        with _dell(task, "reset the iDRAC") as dell:
            dell.idrac_card_service.reset_idrac()
        task.record("idrac", "the iDRAC was reset; waiting until it is ready")
        set_info(task, **{_RESET: {"then_clear": then_clear}})
        return "wait"

    def check_step(self, task: DriverTask, method: str) -> StepOutcome:
        state = task.node.driver_internal_info.get(_RESET)
        if method not in ("reset_idrac", "known_good_state") or not isinstance(state, dict):
            return "done"
        try:
            with _dell(task, "ask whether the iDRAC is ready") as dell:
                ready = bool(dell.lifecycle_service.is_idrac_ready())
        except DriverError:
            return "wait"  # an iDRAC restarting does not answer; the flow's timeout bounds it
        if not ready:
            return "wait"
        set_info(task, **{_RESET: None})
        if state.get("then_clear"):
            self.clear_job_queue(task)
        return "done"


class IdracPower(RedfishPower):
    """Power as ``redfish`` does it (Ironic's ``idrac-redfish`` power is the same)."""

    name = "idrac-redfish"


class IdracBios(RedfishBios):
    """BIOS settings as ``redfish`` reads and applies them, on an iDRAC."""

    name = "idrac-redfish"


class IdracVendor(RedfishVendor):
    """Vendor methods as ``redfish`` (event subscriptions), on an iDRAC."""

    name = "idrac-redfish"


class IdracRaid(RedfishRaid):
    """RAID volumes through the iDRAC's standard Redfish Storage (module docstring)."""

    name = "idrac-redfish"


class IdracInspect(RedfishInspect):
    """Out-of-band inspection through the iDRAC's standard Redfish resources."""

    name = "idrac-redfish"
