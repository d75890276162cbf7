"""The ipmitool power and management interfaces against the IPMI simulator, checked by ipmitool."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.config import BmcGuardSettings
from metalforge.db.models import Node
from metalforge.drivers.base import (
    POWER_OFF,
    POWER_ON,
    REBOOT,
    SOFT_POWER_OFF,
    SOFT_REBOOT,
    BmcUnavailable,
    DriverError,
    ReadOnlyTask,
)
from metalforge.drivers.bmc_guard import GUARD
from metalforge.drivers.failures import FAILURES
from metalforge.drivers.ipmi import IpmiManagement, IpmiPower, sessions
from metalforge.drivers.ipmi.client import SESSIONS, CredentialsRefused, NoAnswer
from metalforge.tallies import BMC_ERRORS
from metalforge_lab.ipmi_bmc import BmcProcess
from tests.support.api import LATEST, create_node, error_text, get_node, wait_until
from tests.support.ipmi import (
    PASSWORD,
    USER,
    driver_info,
    free_udp_ports,
    ipmitool,
    power_status,
    start_bmcs,
    start_ipmi_stack,
)

pytestmark = pytest.mark.timeout(60)

POWER = IpmiPower()
MANAGEMENT = IpmiManagement()


class Task(ReadOnlyTask):
    """A driver task with a real sleep, on a node that is never saved; its clock moves
    only with its sleeps (``slept``), so a driver's wait is measured in what it asked for."""

    def __init__(self, **info: Any) -> None:
        super().__init__(Node(driver="ipmi", driver_info=info, properties={}, boot_mode=None))
        self.slept = 0.0

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        self.slept += seconds

    def now(self) -> float:
        return 1_000_000.0 + self.slept


@pytest.fixture
def bmc(tmp_path: Path) -> Iterator[BmcProcess]:
    """One simulated BMC whose power changes take 0.1 s, so the driver must wait."""
    yield from start_bmcs(tmp_path, power_delay=0.1)


def test_power_changes_wait_until_reached_and_ipmitool_agrees(bmc: BmcProcess) -> None:
    port = bmc.ports[0]
    task = Task(**driver_info(port))
    assert POWER.get_power_state(task) == POWER_OFF

    for target, expected in (
        (POWER_ON, "on"),
        (POWER_OFF, "off"),
        (REBOOT, "on"),
        (SOFT_REBOOT, "on"),
        (SOFT_POWER_OFF, "off"),
    ):
        POWER.set_power_state(task, target)
        assert power_status(port) == expected, target
        assert POWER.get_power_state(task) == (POWER_ON if expected == "on" else POWER_OFF)


def test_reboot_boots_the_node_again(bmc: BmcProcess) -> None:
    """A one-time boot device is used up by the boot a reboot causes (not a no-op reset)."""
    port = bmc.ports[0]
    task = Task(**driver_info(port))
    POWER.set_power_state(task, POWER_ON)
    MANAGEMENT.set_boot_device(task, "pxe", persistent=False)
    assert MANAGEMENT.get_boot_device(task) == {"boot_device": "pxe", "persistent": False}
    POWER.set_power_state(task, REBOOT)
    assert MANAGEMENT.get_boot_device(task) == {"boot_device": None, "persistent": None}


def test_power_change_that_does_not_happen_in_time_names_target_and_state(
    tmp_path: Path,
) -> None:
    for bmcs in start_bmcs(tmp_path, power_delay=30):
        task = Task(**driver_info(bmcs.ports[0]))
        with pytest.raises(DriverError, match=r"did not reach power on .*still reports power off"):
            POWER.set_power_state(task, POWER_ON, timeout=1)
        assert task.slept == pytest.approx(1.0), "it waits its timeout, no more"


def test_nmi_is_a_diagnostic_interrupt_the_bmc_takes_while_on(bmc: BmcProcess) -> None:
    port = bmc.ports[0]
    task = Task(**driver_info(port))
    # The lab's BMC refuses the interrupt while off: the refusal shows it arrived.
    with pytest.raises(DriverError):
        MANAGEMENT.inject_nmi(task)
    POWER.set_power_state(task, POWER_ON)
    MANAGEMENT.inject_nmi(task)


def test_boot_mode_and_secure_boot_are_not_offered(bmc: BmcProcess) -> None:
    task = Task(**driver_info(bmc.ports[0]))
    with pytest.raises(DriverError, match="Driver ipmi does not support set_boot_mode"):
        MANAGEMENT.set_boot_mode(task, "bios")
    with pytest.raises(DriverError, match="does not support set_secure_boot_state"):
        MANAGEMENT.set_secure_boot_state(task, True)


def test_persistent_boot_device_is_what_ipmitool_reads(bmc: BmcProcess) -> None:
    port = bmc.ports[0]
    task = Task(**driver_info(port))
    MANAGEMENT.set_boot_device(task, "pxe", persistent=True)
    shown = ipmitool(port, "chassis", "bootparam", "get", "5")
    assert "Boot parameter data: e004000000" in shown
    assert "Options apply to all future boots" in shown
    assert "BIOS EFI boot" in shown
    assert "Force PXE" in shown
    assert MANAGEMENT.get_boot_device(task) == {"boot_device": "pxe", "persistent": True}

    ipmitool(port, "power", "on")
    assert MANAGEMENT.get_boot_device(task) == {"boot_device": "pxe", "persistent": True}


def test_one_time_legacy_boot_device_is_used_up_by_the_next_boot(bmc: BmcProcess) -> None:
    port = bmc.ports[0]
    task = Task(**driver_info(port, ipmi_boot_mode="bios"))
    MANAGEMENT.set_boot_device(task, "disk", persistent=False)
    shown = ipmitool(port, "chassis", "bootparam", "get", "5")
    assert "Boot parameter data: 8008000000" in shown
    assert "Options apply to only next boot" in shown
    assert "BIOS PC Compatible (legacy) boot" in shown
    assert "Force Boot from default Hard-Drive" in shown
    assert MANAGEMENT.get_boot_device(task) == {"boot_device": "disk", "persistent": False}

    ipmitool(port, "power", "on")
    assert MANAGEMENT.get_boot_device(task) == {"boot_device": None, "persistent": None}


@pytest.mark.parametrize(
    ("ipmitool_device", "device"),
    [("cdrom", "cdrom"), ("bios", "bios"), ("disk", "disk"), ("pxe", "pxe")],
)
def test_boot_device_set_by_ipmitool_is_read_back(
    bmc: BmcProcess, ipmitool_device: str, device: str
) -> None:
    port = bmc.ports[0]
    ipmitool(port, "chassis", "bootdev", ipmitool_device, "options=persistent")
    task = Task(**driver_info(port))
    assert MANAGEMENT.get_boot_device(task) == {"boot_device": device, "persistent": True}


def test_boot_mode_comes_from_capabilities_when_driver_info_has_none(bmc: BmcProcess) -> None:
    port = bmc.ports[0]
    task = Task(**driver_info(port))
    task.node.properties = {"capabilities": "boot_mode:bios,secure_boot:false"}
    MANAGEMENT.set_boot_device(task, "cdrom", persistent=True)
    assert "Boot parameter data: c014000000" in ipmitool(port, "chassis", "bootparam", "get", "5")


def test_wrong_password_is_refused_quickly_and_clearly(
    bmc: BmcProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = Task(**driver_info(bmc.ports[0], ipmi_password="wrong", ipmi_retries=3))
    tries: list[object] = []
    original = SESSIONS._try

    def counted(*args: Any, **kwargs: Any) -> Any:
        tries.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(SESSIONS, "_try", counted)
    with pytest.raises(CredentialsRefused, match="refused the credentials of user 'admin'"):
        POWER.get_power_state(task)
    assert len(tries) == 1, "refused at once, not retried"


def test_unreachable_bmc_fails_within_the_configured_time() -> None:
    port = free_udp_ports(1)  # nothing listens there
    task = Task(**driver_info(port, ipmi_timeout=0.5, ipmi_retries=1))
    with pytest.raises(NoAnswer) as raised:
        POWER.set_power_state(task, POWER_ON)
    # Exactly the configured tries, each bounded by ipmi_timeout (pytest's own
    # timeout catches a hang; wall-clock time is not asserted on a busy machine).
    assert str(raised.value).startswith(
        f"no answer from IPMI BMC at 127.0.0.1:{port} after 2 tries"
    )


def test_a_silent_bmc_with_the_longest_tries_is_given_up_at_the_guards_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node's owner may set 11 tries of 60 s; the guard's whole-call deadline still ends
    the call (it would otherwise hold a conductor worker for 11 minutes)."""
    GUARD.configure(BmcGuardSettings(call_deadline=1.0, failures_to_open=100))
    waits: list[float] = []
    real_try = SESSIONS._try

    def recorded(bmc: Any, operation: Any, timeout: float) -> Any:
        waits.append(timeout)
        return real_try(bmc, operation, timeout)

    monkeypatch.setattr(SESSIONS, "_try", recorded)
    port = free_udp_ports(1)  # nothing listens there
    task = Task(**driver_info(port, ipmi_timeout=60, ipmi_retries=10))
    try:
        with pytest.raises(BmcUnavailable, match=r"bmc_guard\.call_deadline"):
            POWER.get_power_state(task)
    finally:
        GUARD.configure(BmcGuardSettings())
    assert waits
    assert all(wait <= 1.0 for wait in waits), waits
    assert len(waits) < 11


def test_failed_calls_are_counted_by_kind_for_metrics(bmc: BmcProcess) -> None:
    FAILURES.take()
    with pytest.raises(CredentialsRefused):
        POWER.get_power_state(Task(**driver_info(bmc.ports[0], ipmi_password="wrong")))
    unreachable = driver_info(free_udp_ports(1), ipmi_timeout=0.5, ipmi_retries=0)
    with pytest.raises(NoAnswer):
        POWER.get_power_state(Task(**unreachable))
    counted = {key[1]: value for key, value in FAILURES.take().items() if key[0] == BMC_ERRORS.name}
    assert counted == {"ipmi\x1fauth": 1.0, "ipmi\x1ftimeout": 1.0}


def test_bmc_that_comes_back_is_reached_again(tmp_path: Path) -> None:
    """A session to a BMC that restarted is dropped and a new one logs in.

    The first login after a restart can take pyghmi a retransmission (about
    a second) while the abandoned sessions' packets still arrive, hence the
    longer timeout once the BMC is back.
    """
    port = free_udp_ports(1)
    patient = driver_info(port, ipmi_timeout=5, ipmi_retries=3)
    with BmcProcess(port=port, power_on=True, log_path=tmp_path / "one.log"):
        assert POWER.get_power_state(Task(**patient)) == POWER_ON
    with pytest.raises(NoAnswer):
        POWER.get_power_state(Task(**{**patient, "ipmi_timeout": 0.5, "ipmi_retries": 0}))
    with BmcProcess(port=port, log_path=tmp_path / "two.log"):
        assert POWER.get_power_state(Task(**patient)) == POWER_OFF
    SESSIONS.forget()


def test_a_login_after_a_given_up_session_is_new_and_keeps_its_answers(bmc: BmcProcess) -> None:
    """pyghmi would hand the next login the session a given-up try is stuck in, or put it
    on that session's socket, where the old session's logout leaves it deaf."""
    port = bmc.ports[0]
    given_up = sessions.login("127.0.0.1", port, USER, PASSWORD)
    sessions.retire(given_up)
    fresh = sessions.login("127.0.0.1", port, USER, PASSWORD)
    try:
        assert fresh.ipmi_session is not given_up.ipmi_session
        assert fresh.ipmi_session.socket is not given_up.ipmi_session.socket
        sessions.logout(given_up)  # what pyghmi does when the stuck try times out
        assert fresh.get_power()["powerstate"] == "off"
    finally:
        sessions.logout(fresh)


def test_many_threads_share_sessions_without_hanging(tmp_path: Path) -> None:
    """Worker threads reading several BMCs at once (pyghmi hangs on a second session)."""
    results: list[tuple[int, str]] = []
    errors: list[BaseException] = []

    def read(port: int) -> None:
        try:
            for _ in range(5):
                # Three threads share each BMC's one session, one call at a time: under the
                # coverage tracer, beside other workers, a thread can wait seconds for it.
                patient = driver_info(port, ipmi_timeout=15)
                results.append((port, POWER.get_power_state(Task(**patient))))
        except BaseException as exc:  # noqa: BLE001 - the test asserts there were none
            errors.append(exc)

    for bmcs in start_bmcs(tmp_path, count=3):
        ipmitool(bmcs.ports[1], "power", "on")
        threads = [threading.Thread(target=read, args=(p,)) for p in bmcs.ports * 3]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
        assert not errors
        assert len(results) == 45
        assert {state for port, state in results if port == bmcs.ports[1]} == {POWER_ON}
        assert {state for port, state in results if port != bmcs.ports[1]} == {POWER_OFF}


@pytest.mark.parametrize(
    ("info", "message"),
    [
        ({}, "ipmi_address is required"),
        ({"ipmi_address": "10.0.0.1", "ipmi_port": "x"}, "ipmi_port must be a number"),
        ({"ipmi_address": "10.0.0.1", "ipmi_port": 70000}, "ipmi_port must be a number from 1"),
        ({"ipmi_address": "10.0.0.1", "ipmi_port": "nan"}, "ipmi_port must be a number from 1"),
        ({"ipmi_address": "10.0.0.1", "ipmi_port": True}, "ipmi_port must be a number"),
        ({"ipmi_address": "10.0.0.1", "ipmi_retries": 1.5}, "ipmi_retries must be a whole"),
        ({"ipmi_address": "10.0.0.1", "ipmi_retries": 100000000}, "ipmi_retries must be a num"),
        ({"ipmi_address": "10.0.0.1", "ipmi_retries": "inf"}, "ipmi_retries must be a number"),
        ({"ipmi_address": "10.0.0.1", "ipmi_timeout": 0}, "ipmi_timeout must be a number from"),
        ({"ipmi_address": "10.0.0.1", "ipmi_timeout": 1e9}, "ipmi_timeout must be a number from"),
        ({"ipmi_address": "10.0.0.1", "ipmi_power_timeout": "1e400"}, "ipmi_power_timeout must"),
        ({"ipmi_address": "10.0.0.1", "ipmi_boot_mode": "efi"}, "must be uefi or bios"),
    ],
)
def test_validate_names_the_bad_key(info: dict[str, Any], message: str) -> None:
    with pytest.raises(DriverError, match=message):
        POWER.validate(Task(**info))
    with pytest.raises(DriverError, match=message):
        MANAGEMENT.validate(Task(**info))


def test_power_on_with_a_wrong_password_ends_with_last_error(
    bmc: BmcProcess, sqlite_url: str
) -> None:
    """Through the API: the request fails cleanly and no power change stays pending."""
    stack = start_ipmi_stack(sqlite_url)
    try:
        info = driver_info(bmc.ports[0], ipmi_password="wrong")
        node = create_node(stack.client, driver="ipmi", driver_info=info)
        response = stack.client.put(
            f"/v1/nodes/{node['uuid']}/states/power", json={"target": "power on"}, headers=LATEST
        )
        assert response.status_code == 202, response.text
        uuid = node["uuid"]

        def failed() -> dict[str, Any] | None:
            found = get_node(stack.client, uuid)
            return found if found["target_power_state"] is None and found["last_error"] else None

        node = wait_until("the power request to fail", failed)
        assert node["target_power_state"] is None
        assert "refused the credentials of user 'admin'" in node["last_error"]
        assert power_status(bmc.ports[0]) == "off"
    finally:
        stack.stop()


def test_a_broken_login_has_its_reason_before_it_is_seen_broken() -> None:
    """pyghmi logs a failed session out (setting ``broken``) before recording why.

    A login waiting on another thread could then read ``errormsg`` before it
    existed (an ``AttributeError`` instead of "incorrect password", now and
    then). Here the reason is there by the time the session is logged out.
    """
    from pyghmi.ipmi.private import session as pyghmi_session

    import metalforge.drivers.ipmi.sessions  # noqa: F401 - applies the ordering fix

    session: Any = object.__new__(pyghmi_session.Session)
    session.__dict__.update(
        bmc="192.0.2.1",
        userid=b"admin",
        password=b"wrong",
        port=623,
        kgo=None,
        broken=False,
        socket=None,
        logonwaiters=[],
        logged=0,
    )
    reason_when_logged_out: list[Any] = []

    def logout(sessionok: bool = True) -> None:
        reason_when_logged_out.append(getattr(session, "errormsg", "<not set yet>"))
        session.broken = True

    session.logout = logout
    session._mark_broken("Incorrect password provided")
    assert reason_when_logged_out == ["Incorrect password provided"]
    assert session.errormsg == "Incorrect password provided"


@pytest.mark.parametrize(
    ("info", "message"),
    [
        ({"ipmi_retries": 100000000}, "ipmi_retries must be a number from 0 to 10"),
        ({"ipmi_port": "nan"}, "ipmi_port must be a number from 1"),
        ({"ipmi_timeout": "inf"}, "ipmi_timeout must be a number from"),
        ({"ipmi_power_timeout": 10**9}, "ipmi_power_timeout must be a number from"),
        ({"ipmi_boot_mode": "efi"}, "must be uefi or bios"),
        ({"ipmi_address": ["10.0.0.1"]}, "ipmi_address must be a string"),
    ],
)
def test_enroll_and_patch_refuse_a_setting_out_of_its_range(
    sqlite_url: str, info: dict[str, Any], message: str
) -> None:
    """A stored setting may not keep a conductor's worker for months: a 400 naming it,
    at enroll and at PATCH, and nothing changes. A missing address is still fine."""
    stack = start_ipmi_stack(sqlite_url)
    try:
        client = stack.client
        refused = client.post(
            "/v1/nodes", json={"driver": "ipmi", "driver_info": info}, headers=LATEST
        )
        assert refused.status_code == 400, refused.text
        assert message in error_text(refused)
        node = create_node(client, driver="ipmi", driver_info={})
        patch = [
            {"op": "add", "path": f"/driver_info/{key}", "value": value}
            for key, value in info.items()
        ]
        url = f"/v1/nodes/{node['uuid']}"
        refused = client.patch(url, json=patch, headers=LATEST)
        assert refused.status_code == 400, refused.text
        assert message in error_text(refused)
        assert client.get(url, headers=LATEST).json()["driver_info"] == {}
    finally:
        stack.stop()
