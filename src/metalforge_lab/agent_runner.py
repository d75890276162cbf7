"""The real ironic-python-agent as a virtual node's "ramdisk", confined to the node's namespaces.

The agent runs as root and erases disks, so it is fenced in three ways:

* network: the node's namespace, where its only NIC is the node's veth;
* mounts: a private mount namespace whose ``/dev`` is a tmpfs holding only
  ``null``, ``zero``, ``random``, ``urandom`` and the node's loop devices, so
  the host's disks do not even have device nodes there; ``/run`` is a tmpfs
  (the agent's TLS files go there) and ``/proc/cmdline`` is the node's own
  kernel command line, which is where the agent reads its settings from;
* processes: a PID namespace, without which the agent's pre-erase ``fuser``
  fails on this host's protected PID 1, and which lets one SIGKILL of the
  agent (PID 1 inside) take every helper it started down with it.

The chain is ``ip netns exec NS unshare --pid --fork --kill-child ... sh -c
SCRIPT``, where ``ip netns exec`` execs ``unshare`` (same PID) and the shell
execs the agent (the one child of ``unshare``). ``unshare`` ignores SIGTERM
and PID 1 of a namespace ignores it too, so ``stop`` sends SIGKILL, as pulling
a real machine's power would.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from metalforge_lab.loopdev import LoopDisk

RUN_AGENT = Path(__file__).resolve().parent / "ramdisk" / "run_agent.py"
"""The agent's entry point, run by path with the agent's virtualenv's Python."""
IPA_PYTHON_ENV = "METALFORGE_IPA_PYTHON"
"""Overrides where the agent's virtualenv's Python is."""
DISKS_ENV = "METALFORGE_LAB_DISKS"
SERIALS_ENV = "METALFORGE_LAB_DISK_SERIALS"
_REAP_GRACE = 5.0
"""Seconds ``unshare`` gets to reap the killed agent and exit by itself."""

_SCRIPT = """set -e
mount -t tmpfs -o mode=0755,size=1m mflab-dev /dev
mknod -m 666 /dev/null c 1 3
mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/random c 1 8
mknod -m 666 /dev/urandom c 1 9
{loop_nodes}
mount -t tmpfs -o mode=0755 mflab-run /run
mount --bind "$MFLAB_CMDLINE" /proc/cmdline
# The agent powers off or reboots through /proc/sysrq-trigger when its
# poweroff/reboot commands fail: sysrq is not namespaced, it would act on the
# host. Writes there go to /dev/null, and kernel settings cannot be changed.
if [ -e /proc/sysrq-trigger ]; then mount --bind /dev/null /proc/sysrq-trigger; fi
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
exec "$MFLAB_PYTHON" "$MFLAB_RUN_AGENT"
"""

_POWER_SHIM = """#!/bin/sh
# The virtual node's {command}: ask the lab to switch the system {action}.
echo {action} > "$MFLAB_POWER_REQUEST"
"""
POWER_COMMANDS = {"poweroff": "off", "shutdown": "off", "halt": "off", "reboot": "restart"}
"""What the agent runs to power off or reboot its machine, and what it means for the lab."""


def default_ipa_python() -> Path:
    """The Python of the agent's virtualenv: ``$METALFORGE_IPA_PYTHON``, else the checkout's.

    The Makefile builds that virtualenv as ``.ipa-venv`` at the top of the
    checkout, beside ``src``.
    """
    configured = os.environ.get(IPA_PYTHON_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / ".ipa-venv" / "bin" / "python"


@dataclass
class AgentSettings:
    """What one agent start needs, beyond the node's namespace and disks."""

    api_url: str
    """metalforge's agents' endpoint, reachable from the node's namespace."""
    insecure: bool = True
    """``ipa-insecure``: do not verify metalforge's TLS certificate (the lab serves HTTP)."""
    lookup_timeout: int = 300
    """Seconds the agent keeps looking itself up before it gives up and exits."""
    lookup_interval: int = 1
    """First retry delay of the lookup, in seconds (the agent backs off from there)."""
    debug: bool = True
    """``ipa-debug``: the agent's log is the only trace of what it did."""
    extra_kernel_params: Sequence[str] = ()
    """More ``ipa-*`` parameters, e.g. ``ipa-image-download-connection-retries=0``."""
    ipa_python: Path = field(default_factory=default_ipa_python)

    def kernel_cmdline(self) -> str:
        params = [
            "BOOT_IMAGE=/metalforge-lab/ipa-kernel",
            f"ipa-api-url={self.api_url}",
            f"ipa-insecure={int(self.insecure)}",
            f"ipa-lookup-timeout={self.lookup_timeout}",
            f"ipa-lookup-interval={self.lookup_interval}",
            f"ipa-debug={int(self.debug)}",
            *self.extra_kernel_params,
        ]
        return " ".join(params) + "\n"


class AgentError(RuntimeError):
    """The agent could not be started."""


class AgentProcess:
    """One running agent: started on power-on (or boot), SIGKILLed on power-off."""

    def __init__(
        self,
        namespace: str,
        disks: Sequence[LoopDisk],
        settings: AgentSettings,
        workdir: Path,
    ) -> None:
        if not disks:
            raise ValueError("an agent needs at least one disk")
        self.namespace = namespace
        self.disks = list(disks)
        self.settings = settings
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None

    @property
    def power_request_path(self) -> Path:
        """Where the agent's poweroff/reboot commands leave their request for the lab."""
        return self.workdir / "power-request"

    def take_power_request(self) -> str | None:
        """``off`` or ``restart`` if the agent asked its machine to power off or reboot."""
        try:
            action = self.power_request_path.read_text().strip()
        except FileNotFoundError:
            return None
        self.power_request_path.unlink(missing_ok=True)
        return action or None

    @property
    def log_path(self) -> Path:
        """The agent's output; appended to across starts, so a restart's history stays."""
        return self.workdir / "agent.log"

    def _script(self) -> str:
        nodes = "\n".join(
            f"mknod -m 660 {shlex.quote(disk.device)} b 7 {int(disk.minor)}" for disk in self.disks
        )
        return _SCRIPT.format(loop_nodes=nodes)

    def start(self) -> None:
        if self.running:
            raise AgentError(f"the agent in {self.namespace} is already running")
        python = self.settings.ipa_python
        if not os.access(python, os.X_OK):
            raise AgentError(f"no agent virtualenv Python at {python} (make .ipa-venv)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        tmpdir = self.workdir / "tmp"
        tmpdir.mkdir(exist_ok=True)
        cmdline = self.workdir / "cmdline"
        cmdline.write_text(self.settings.kernel_cmdline())
        shims = self.workdir / "bin"
        shims.mkdir(exist_ok=True)
        for name, action in POWER_COMMANDS.items():
            shim = shims / name
            shim.write_text(_POWER_SHIM.format(command=name, action=action))
            shim.chmod(0o755)
        self.power_request_path.unlink(missing_ok=True)
        env = {
            "PATH": f"{shims}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "MFLAB_POWER_REQUEST": str(self.power_request_path),
            "LANG": "C.UTF-8",
            "HOME": str(self.workdir),
            "TMPDIR": str(tmpdir),
            "MFLAB_CMDLINE": str(cmdline),
            "MFLAB_PYTHON": str(python),
            "MFLAB_RUN_AGENT": str(RUN_AGENT),
            DISKS_ENV: ",".join(disk.device for disk in self.disks),
            SERIALS_ENV: ",".join(disk.serial for disk in self.disks),
        }
        command = [
            "ip", "netns", "exec", self.namespace,
            "unshare", "--mount", "--propagation", "private", "--pid", "--fork",
            "--kill-child", "--mount-proc",
            "sh", "-c", self._script(),
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            log.write(f"--- agent start {time.strftime('%H:%M:%S')} ---\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.started_at = time.monotonic()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        """Host PID of ``unshare`` (``ip netns exec`` execs it)."""
        return self.process.pid if self.process is not None else None

    def agent_pid(self) -> int | None:
        """Host PID of the agent itself (PID 1 of its namespace), once it is forked."""
        if not self.running or self.pid is None:
            return None
        try:
            children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGKILL the agent (and with it its namespace's every process), then reap ``unshare``."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            children = []
            with contextlib.suppress(OSError):
                children = (
                    Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
                )
            for child in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(child), signal.SIGKILL)
            # unshare reaps the agent and exits; killed first, it would leave the
            # agent a zombie that this host's PID 1 never reaps.
            try:
                process.wait(_REAP_GRACE if children else 0)
            except subprocess.TimeoutExpired:
                # --kill-child takes down a child forked after the read above.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"agent in {self.namespace} did not die in {timeout} s", file=sys.stderr)
            raise
        self.started_at = None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
