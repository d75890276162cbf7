"""The provisioning network's DHCP and TFTP service: a dnsmasq metalforge writes and runs.

A filter host with ``dhcp.enabled`` writes dnsmasq's whole configuration
(nothing from ``/etc/dnsmasq.conf`` is read) and keeps dnsmasq running in
the foreground as its child: restarted after a pause if it dies, stopped
with the host. Its output goes to metalforge's log.

Whom it answers is the PXE filter's decision, not dnsmasq's:

* with the ``dnsmasq`` filter driver, dnsmasq reads the filter's
  ``dhcp-hostsdir`` and ignores every machine no line there names
  (``dhcp-ignore=tag:!known``). Until the filter's first sync the directory
  is empty, so a dnsmasq that starts before the filter answers nobody; the
  filter then sends it SIGHUP through the pid file written here.
* with a firewall driver, the firewall on ``dhcp.interface`` drops what the
  filter denies before dnsmasq sees it.

What a machine is told to boot depends on who asks: PXE firmware gets an
iPXE binary over TFTP (BIOS ``undionly.kpxe``, x86-64 UEFI ``snponly.efi``),
UEFI HTTP boot firmware the URL of the UEFI one on the agents' endpoint,
and iPXE (which sends DHCP option 175) gets the URL of ``boot.ipxe`` there,
where only a node being provisioned gets a script. In proxy mode another
server gives the addresses and dnsmasq only answers the PXE part, with the
same choices as PXE boot-menu services (UEFI HTTP boot needs ``dhcp`` mode).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from metalforge.config import Settings

LOG = logging.getLogger(__name__)
DNSMASQ_LOG = logging.getLogger("metalforge.dhcp.dnsmasq")

RESTART_PAUSES = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds before restarting a dnsmasq that died, by how many times in a row it did."""
STARTED_WITHIN = 30.0
"""Seconds a dnsmasq may take to write its pid file (it has bound its sockets then)."""
STOP_TIMEOUT = 10.0


class DhcpError(RuntimeError):
    """dnsmasq refused its configuration or could not start (the message says why)."""


def boot_url(settings: Settings) -> str:
    """The script iPXE is handed: ``boot.ipxe`` on the agents' endpoint."""
    http_url = settings.conductor.netboot.http_url
    if http_url is None:  # the settings' validator refuses this with dhcp enabled
        raise DhcpError("conductor.netboot.http_url is unset")
    return f"{http_url}/boot.ipxe"


def firmware_url(settings: Settings) -> str:
    """Where UEFI HTTP boot firmware fetches the iPXE binary (metalforge serves it)."""
    base = boot_url(settings).removesuffix("/boot.ipxe")
    return f"{base}/boot/firmware/{settings.dhcp.uefi_boot_file}"


def pid_file(settings: Settings) -> Path:
    """Where dnsmasq writes its pid: the one the ``dnsmasq`` filter driver signals."""
    if settings.pxe_filter.driver == "dnsmasq" and settings.pxe_filter.dnsmasq_pid_file:
        return settings.pxe_filter.dnsmasq_pid_file
    return _state_dir(settings) / "dnsmasq.pid"


def _state_dir(settings: Settings) -> Path:
    return settings.dhcp.state_dir or settings.state_dir / "dhcp"


def render_config(settings: Settings) -> str:
    """dnsmasq's configuration for these settings, one option per line."""
    dhcp = settings.dhcp
    lines = [
        "# Written by metalforge at every start; changes here are lost (see dhcp.* settings).",
        "port=0",  # DHCP and TFTP only, no DNS
        f"interface={dhcp.interface}",
        "bind-dynamic",
        "except-interface=lo",
        f"pid-file={pid_file(settings)}",
        f"dhcp-leasefile={_state_dir(settings) / 'leases'}",
        "no-ping",
    ]
    if dhcp.mode == "dhcp":
        lines.append(f"dhcp-range={dhcp.range_start},{dhcp.range_end},{dhcp.lease_time}")
        # Only the options given here; dnsmasq would otherwise offer itself as both.
        lines.append(f"dhcp-option=option:router{_addresses([dhcp.router])}")
        lines.append(f"dhcp-option=option:dns-server{_addresses(dhcp.dns_servers)}")
    else:
        subnet = dhcp.proxy_subnet
        assert subnet is not None  # the settings' validator requires it in proxy mode
        lines.append(f"dhcp-range={subnet.network_address},proxy,{subnet.netmask}")
    if settings.pxe_filter.driver == "dnsmasq":
        lines += [
            f"dhcp-hostsdir={settings.pxe_filter.dnsmasq_hostsdir}",
            "dhcp-ignore=tag:!known",
        ]
    lines += [
        "enable-tftp",
        f"tftp-root={dhcp.tftp_root}",
        "dhcp-match=set:ipxe,175",
        # RFC 4578 client architectures: 7 and 9 are x86-64 UEFI PXE, 16 x86-64 UEFI HTTP.
        "dhcp-match=set:efi64,option:client-arch,7",
        "dhcp-match=set:efi64,option:client-arch,9",
        "dhcp-match=set:http64,option:client-arch,16",
    ]
    url = boot_url(settings)
    if dhcp.mode == "dhcp":
        # One line per kind of client, their tags exclusive: which of several matching
        # lines dnsmasq would take is not something to depend on.
        lines += [
            f"dhcp-boot=tag:ipxe,{url}",
            f"dhcp-boot=tag:!ipxe,tag:http64,{firmware_url(settings)}",
            # UEFI HTTP boot firmware takes only an offer that says it is for HTTP boot.
            "dhcp-option-force=tag:!ipxe,tag:http64,option:vendor-class,HTTPClient",
            f"dhcp-boot=tag:!ipxe,tag:!http64,tag:efi64,{dhcp.uefi_boot_file}",
            f"dhcp-boot=tag:!ipxe,tag:!http64,tag:!efi64,{dhcp.bios_boot_file}",
        ]
    else:
        lines += [
            'pxe-prompt="metalforge",0',
            f'pxe-service=tag:ipxe,x86PC,"metalforge",{url}',
            f'pxe-service=tag:ipxe,X86-64_EFI,"metalforge",{url}',
            f'pxe-service=tag:ipxe,BC_EFI,"metalforge",{url}',
            f'pxe-service=tag:!ipxe,x86PC,"iPXE",{dhcp.bios_boot_file}',
            f'pxe-service=tag:!ipxe,X86-64_EFI,"iPXE",{dhcp.uefi_boot_file}',
            f'pxe-service=tag:!ipxe,BC_EFI,"iPXE",{dhcp.uefi_boot_file}',
        ]
    if dhcp.run_as is not None:
        lines.append(f"user={dhcp.run_as}")
    if dhcp.log_dhcp:
        lines.append("log-dhcp")
    lines.append("log-facility=-")  # to stderr, which metalforge logs
    return "\n".join(lines) + "\n"


def _addresses(addresses: Sequence[object]) -> str:
    """``,a,b`` for an option's values; an empty value sends the option empty."""
    return "".join(f",{address}" for address in addresses if address is not None)


class DhcpServer:
    """dnsmasq as this process's child: started with the filter host, kept up, stopped."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._command = settings.dhcp.dnsmasq_command
        self._dir = _state_dir(settings)
        self.config_file = self._dir / "dnsmasq.conf"
        self.pid_file = pid_file(settings)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._watcher: threading.Thread | None = None
        self._said: deque[str] = deque(maxlen=3)
        self.restarts = 0
        """How many times dnsmasq died and was started again."""

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> None:
        """Write the configuration, check it with dnsmasq, start it; raises DhcpError."""
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        if self._settings.pxe_filter.driver == "dnsmasq":
            # dnsmasq watches it from the start; the filter fills it once it has synced.
            self._settings.pxe_filter.dnsmasq_hostsdir.mkdir(
                parents=True, exist_ok=True, mode=0o755
            )
        self.config_file.write_text(render_config(self._settings), encoding="utf-8")
        checked = subprocess.run(
            [*self._command, "--test", f"--conf-file={self.config_file}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if checked.returncode != 0:
            raise DhcpError(f"dnsmasq refused {self.config_file}: {checked.stderr.strip()}")
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="dhcp-dnsmasq", daemon=True)
        self._watcher.start()

    def _spawn(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.pid_file.unlink()
        process = subprocess.Popen(
            [*self._command, "--keep-in-foreground", f"--conf-file={self.config_file}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert process.stderr is not None
        forwarder = threading.Thread(
            target=_forward,
            args=(process.stderr, self._said),
            name="dhcp-dnsmasq-log",
            daemon=True,
        )
        forwarder.start()
        started = _wait(
            lambda: process.poll() is not None or self.pid_file.exists(), STARTED_WITHIN
        )
        if process.poll() is not None or not started:
            _end(process)
            forwarder.join(5)  # its last words
            said = "; ".join(self._said) or f"exit status {process.returncode}"
            raise DhcpError(f"dnsmasq did not start on {self._settings.dhcp.interface}: {said}")
        with self._lock:
            self._process = process
        LOG.info(
            "DHCP service up on %s (dnsmasq pid %d)", self._settings.dhcp.interface, process.pid
        )

    def _watch(self) -> None:
        """Start dnsmasq again, after a growing pause, each time it dies on its own."""
        failures = 0
        while not self._stopping.is_set():
            process = self._process
            if process is None:
                return
            status = process.wait()
            if self._stopping.is_set():
                return
            pause = RESTART_PAUSES[min(failures, len(RESTART_PAUSES) - 1)]
            LOG.error("dnsmasq exited with status %s; starting it again in %.0f s", status, pause)
            if self._stopping.wait(pause):
                return
            try:
                self._spawn()
            except DhcpError as exc:
                LOG.error("%s", exc)
                failures += 1
                continue
            failures = 0
            self.restarts += 1

    def stop(self) -> None:
        """Stop dnsmasq (SIGTERM, then SIGKILL); the network then gets no answers from here."""
        self._stopping.set()
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            _end(process)
        if self._watcher is not None:
            self._watcher.join(STOP_TIMEOUT)


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT)


def _forward(stream: IO[bytes], said: deque[str]) -> None:
    """dnsmasq's log lines into metalforge's log (they name MACs and files, no secrets);
    the last few are kept for the error of a start that failed."""
    with stream:
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                DNSMASQ_LOG.info("%s", line)
                said.append(line)


def _wait(condition: Callable[[], bool], timeout: float) -> bool:
    done = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if condition():
            return True
        done.wait(0.05)
    return condition()
