"""ironic-inspector as the oracle: the same requests against it and metalforge, compared.

Starts, each on free loopback ports and in one private temporary directory:

* OpenStack Ironic (``--ironic-venv``: ``pip install ironic``) with fake
  hardware, no authentication, SQLite, one process;
* ironic-inspector (``--inspector-venv``: ``pip install ironic-inspector``)
  in front of it, standalone, storing introspection data in its database;
* metalforge's all-in-one (``--venv``, the project's), no authentication.

Then drives one node per case on both sides into the same place (never
inspected, waiting for its ramdisk, finished, aborted, failed; ``available``
or ``enroll`` rather than ``manageable``) and sends the same start, abort,
reapply, ``/v1/continue``, status or data request to each inspector API,
comparing the status code and the error message (UUIDs and MACs replaced by
placeholders), and for processed data what processing derived.
Prints a line per case and exits 1 if any differs (2 if a server would not
start). The servers' logs stay in the directory printed at the end.

Not part of ``make test``: it needs Ironic and ironic-inspector installed,
which pull a few hundred packages. See docs/inspection.md.

    python3 -m venv /tmp/ironic && /tmp/ironic/bin/pip install 'ironic==39.*'
    python3 -m venv /tmp/inspector && /tmp/inspector/bin/pip install 'ironic-inspector==12.5.*'
    .venv/bin/python tools/inspector_oracle.py --ironic-venv /tmp/ironic \\
        --inspector-venv /tmp/inspector
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import stop_group

from metalforge_lab.ports import free_port

START_TIMEOUT = 120.0
SETTLE_TIMEOUT = 60.0
BUSY = ("starting", "processing", "reapplying", "aborting", "enrolling")
"""Introspection states that move on by themselves."""
IRONIC_VERSION = {"X-OpenStack-Ironic-API-Version": "1.81"}


class Broken(Exception):
    """A server would not start, or a side could not be brought where a case needs it."""


@dataclass(frozen=True)
class Answer:
    code: int
    message: str

    def shown(self) -> str:
        return f"{self.code} {self.message}".strip()


def _call(url: str, method: str = "GET", body: Any = None, raw: bytes | None = None) -> Any:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    for key, value in IRONIC_VERSION.items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
            return response.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return exc.code, json.loads(text) if text else None
        except ValueError:
            return exc.code, {"raw": text.decode(errors="replace")}


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_LISTED = re.compile(r"\['([^\]]*)'\]")
"""A list of names in a message: ironic-inspector prints sets, in an order that changes
from run to run."""
_MAC = re.compile(r"(?:[0-9a-f]{2}:){5}[0-9a-f]{2}", re.IGNORECASE)


def _message(body: Any) -> str:
    """The error's text as ironic-inspector words it (``{"error": {"message"}}``),
    with UUIDs and MACs replaced."""
    if not isinstance(body, dict):
        return ""
    error = body.get("error")
    text = error.get("message", "") if isinstance(error, dict) else json.dumps(body)
    text = _LISTED.sub(lambda m: str(sorted(m.group(1).split("', '"))), str(text))
    return _MAC.sub("<mac>", _UUID.sub("<uuid>", text))


# --- the two sides -------------------------------------------------------------------


@dataclass
class Side:
    """One Ironic API and the inspector API in front of it."""

    name: str
    ironic: str
    inspector: str
    quiet_ramdisk: dict[str, Any]
    """driver_info that keeps the side's own simulated ramdisk from reporting, so the
    cases post the report themselves."""

    def node(self, name: str, mac: str, *, state: str = "manageable", **fields: Any) -> str:
        """A fake-hardware node with a port for ``mac``, brought to ``state``."""
        code, node = _call(
            f"{self.ironic}/v1/nodes",
            "POST",
            {
                "name": name,
                "driver": "fake-hardware",
                "driver_info": {} if state == "available" else self.quiet_ramdisk,
                **fields,
            },
        )
        if code != 201:
            raise Broken(f"{self.name}: creating {name} answered {code} {node}")
        ident = str(node["uuid"])
        code, port = _call(f"{self.ironic}/v1/ports", "POST", {"address": mac, "node_uuid": ident})
        if code != 201:
            raise Broken(f"{self.name}: its port answered {code} {port}")
        if state == "enroll":
            return ident
        self._move(ident, "manage", "manageable")
        if state == "available":
            self._move(ident, "provide", "available")
        return ident

    def _move(self, ident: str, verb: str, wanted: str) -> None:
        code, body = _call(
            f"{self.ironic}/v1/nodes/{ident}/states/provision", "PUT", {"target": verb}
        )
        if code != 202:
            raise Broken(f"{self.name}: {verb} answered {code} {body}")
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            _, node = _call(f"{self.ironic}/v1/nodes/{ident}")
            if node["provision_state"] == wanted and not node.get("target_provision_state"):
                return
            time.sleep(0.2)
        raise Broken(f"{self.name}: {ident} did not reach {wanted}")

    def send(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> Answer:
        code, answer = _call(f"{self.inspector}{path}", method, body, raw)
        return Answer(code, _message(answer) if code >= 400 else "")

    def status(self, ident: str) -> tuple[Any, Any]:
        """The introspection's state and when it finished (None, None: no record)."""
        code, status = _call(f"{self.inspector}/v1/introspection/{ident}")
        return (status["state"], status["finished_at"]) if code == 200 else (None, None)

    def settled(self, ident: str, moved_from: tuple[Any, Any] | None = None) -> str:
        """The introspection's state once it stops moving by itself (and differs from
        ``moved_from``: metalforge queues a report, an abort or a reapply where
        ironic-inspector has moved on before answering), and the node has left a busy
        provision state (``inspecting``)."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            now = self.status(ident)
            _, node = _call(f"{self.ironic}/v1/nodes/{ident}")
            if (
                now[0] not in (None, *BUSY)
                and now != moved_from
                and not str(node.get("provision_state")).endswith("ing")
            ):
                return str(now[0])
            time.sleep(0.2)
        raise Broken(f"{self.name}: the introspection of {ident} did not settle")


def report(mac: str) -> dict[str, Any]:
    """What ironic-python-agent posts, for a machine whose only NIC is ``mac``."""
    return {
        "inventory": {
            "interfaces": [{"name": "eth0", "mac_address": mac, "ipv4_address": "192.0.2.9"}],
            "cpu": {"count": 4, "architecture": "x86_64"},
            "memory": {"physical_mb": 8192, "total": 8 * 1024**3},
            "disks": [{"name": "/dev/vda", "size": 20 * 1024**3}],
            "bmc_address": "192.0.2.1",
            "boot": {"current_boot_mode": "bios", "pxe_interface": mac},
        },
        "boot_interface": mac,
        "root_disk": {"name": "/dev/vda", "size": 20 * 1024**3},  # the agent's own choice
    }


# --- the cases -----------------------------------------------------------------------

Step = Callable[[Side, str, str], Answer]
"""A request against one side, given the node's UUID and MAC."""


def start(side: Side, ident: str, mac: str) -> Answer:
    return side.send("POST", f"/v1/introspection/{ident}")


def start_unmanaged(side: Side, ident: str, mac: str) -> Answer:
    """A start in which the node's ramdisk is booted by someone else: no simulated report
    (metalforge's fake hardware) comes before the case posts its own."""
    return side.send("POST", f"/v1/introspection/{ident}?manage_boot=false")


def abort(side: Side, ident: str, mac: str) -> Answer:
    return side.send("POST", f"/v1/introspection/{ident}/abort")


def reapply(side: Side, ident: str, mac: str) -> Answer:
    return side.send("POST", f"/v1/introspection/{ident}/data/unprocessed")


def proceed(side: Side, ident: str, mac: str) -> Answer:
    return side.send("POST", "/v1/continue", report(mac))


DERIVED = (
    "cpus",
    "cpu_arch",
    "memory_mb",
    "local_gb",
    "macs",
    "ipmi_address",
    "ipmi_v6address",
    "boot_interface",
    "interfaces",
    "all_interfaces",
)
"""What ironic-inspector's processing adds to the data beside the inventory."""


def processed_data(side: Side, ident: str, mac: str) -> Answer:
    """The processed data's code, and what processing derived (the root disk by name and
    size, interfaces without the fields a ramdisk may add)."""
    code, data = _call(f"{side.inspector}/v1/introspection/{ident}/data")
    if code != 200:
        return Answer(code, _message(data))
    derived = {key: data.get(key) for key in DERIVED}
    root = data.get("root_disk") or {}
    derived["root_disk"] = {"name": root.get("name"), "size": root.get("size")}
    derived["inventory is the report's"] = data.get("inventory") == report(mac)["inventory"]
    return Answer(code, _MAC.sub("<mac>", json.dumps(derived, sort_keys=True)))


def status(side: Side, ident: str, mac: str) -> Answer:
    return side.send("GET", f"/v1/introspection/{ident}")


STEPS: dict[str, Step] = {
    "start": start,
    "abort": abort,
    "reapply": reapply,
    "continue": proceed,
    "data": processed_data,
    "status": status,
}

MOVE_ON = (proceed, abort, reapply)
"""Requests after which the introspection changes (state, or when it finished)."""

PLACES: dict[str, tuple[str, tuple[Step, ...]]] = {
    "never inspected": ("manageable", ()),
    "available": ("available", ()),
    "enroll": ("enroll", ()),
    "waiting": ("manageable", (start_unmanaged,)),
    "finished": ("manageable", (start_unmanaged, proceed)),
    "aborted": ("manageable", (start_unmanaged, abort)),
    "reapplied": ("manageable", (start_unmanaged, proceed, reapply)),
    "restarted": ("manageable", (start_unmanaged, proceed, start_unmanaged)),
}
"""Where a case's node is before its request: its provision state, and the requests
that put its introspection there."""

ODD_REQUESTS: dict[str, Callable[[Side, str], Answer]] = {
    "start an unknown node": lambda s, _: s.send("POST", f"/v1/introspection/{uuid.uuid4()}"),
    "abort an unknown node": lambda s, _: s.send("POST", f"/v1/introspection/{uuid.uuid4()}/abort"),
    "status of an unknown node": lambda s, _: s.send("GET", f"/v1/introspection/{uuid.uuid4()}"),
    "start with manage_boot=maybe": lambda s, n: s.send(
        "POST", f"/v1/introspection/{n}?manage_boot=maybe"
    ),
    "continue with a list": lambda s, _: s.send("POST", "/v1/continue", [1, 2]),
    "continue with text": lambda s, _: s.send("POST", "/v1/continue", raw=b"not json"),
    "continue from an unknown MAC": lambda s, _: s.send(
        "POST", "/v1/continue", report("52:54:00:ff:ff:fe")
    ),
    "continue without an inventory": lambda s, _: s.send("POST", "/v1/continue", {"x": 1}),
    "reapply with a list": lambda s, n: s.send(
        "POST", f"/v1/introspection/{n}/data/unprocessed", [1]
    ),
}
"""Requests whose answer does not depend on a node's place (``n``: a manageable node)."""


def _macs() -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"52:54:00:7a:{n // 256:02x}:{n % 256:02x}"


def run_cases(sides: tuple[Side, Side]) -> list[tuple[str, Answer, Answer]]:
    """Every case on both sides: (case, the oracle's answer, metalforge's)."""
    results = []
    macs = _macs()
    for place, (provision_state, before) in PLACES.items():
        for step_name, step in STEPS.items():
            mac = next(macs)
            answers = []
            for side in sides:
                ident = side.node(
                    f"{place}-{step_name}".replace(" ", "-"), mac, state=provision_state
                )
                for earlier in before:
                    was = side.status(ident)
                    earlier(side, ident, mac)
                    side.settled(ident, was if earlier in MOVE_ON else None)
                answers.append(step(side, ident, mac))
            results.append((f"{place}: {step_name}", answers[0], answers[1]))
    mac = next(macs)
    idents = [side.node("odd", mac) for side in sides]
    for case, request in ODD_REQUESTS.items():
        answers = [request(side, ident) for side, ident in zip(sides, idents, strict=True)]
        results.append((case, answers[0], answers[1]))
    return results


# --- the servers ---------------------------------------------------------------------


def _wait_for(url: str, proc: subprocess.Popen[bytes], name: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5):
            return
        if proc.poll() is not None:
            raise Broken(f"{name} exited with {proc.returncode}; see {log}")
        if time.monotonic() > deadline:
            raise Broken(f"{name} did not answer on {url}; see {log}")
        time.sleep(0.5)


@contextlib.contextmanager
def server(argv: list[str], url: str, name: str, workdir: Path) -> Iterator[None]:
    log = workdir / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "METALFORGE_"))}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for(url, proc, name, log)
        yield
    finally:
        stop_group(proc, grace=10.0)


def ironic_conf(workdir: Path, port: int) -> Path:
    conf = workdir / "ironic.conf"
    conf.write_text(f"""\
[DEFAULT]
auth_strategy = noauth
rpc_transport = none
host = oracle
enabled_hardware_types = fake-hardware
enabled_boot_interfaces = fake
enabled_deploy_interfaces = fake
enabled_power_interfaces = fake
enabled_management_interfaces = fake
enabled_inspect_interfaces = fake,no-inspect
enabled_raid_interfaces = fake,no-raid
enabled_network_interfaces = noop
enabled_console_interfaces = no-console
enabled_bios_interfaces = no-bios
enabled_vendor_interfaces = no-vendor
enabled_firmware_interfaces = no-firmware
enabled_rescue_interfaces = no-rescue
default_resource_class = baremetal
[api]
host_ip = 127.0.0.1
port = {port}
[database]
connection = sqlite:///{workdir / "ironic.sqlite"}
[dhcp]
dhcp_provider = none
[oslo_concurrency]
lock_path = {workdir / "locks"}
""")
    return conf


def inspector_conf(workdir: Path, port: int, ironic_port: int) -> Path:
    conf = workdir / "inspector.conf"
    conf.write_text(f"""\
[DEFAULT]
auth_strategy = noauth
listen_address = 127.0.0.1
listen_port = {port}
standalone = true
transport_url = fake://
[ironic]
auth_type = none
endpoint_override = http://127.0.0.1:{ironic_port}
[database]
connection = sqlite:///{workdir / "inspector.sqlite"}
[processing]
store_data = database
[pxe_filter]
driver = noop
[oslo_concurrency]
lock_path = {workdir / "locks"}
""")
    return conf


def metalforge_conf(workdir: Path, port: int, inspector_port: int) -> Path:
    conf = workdir / "metalforge.toml"
    state = workdir / "metalforge"
    state.mkdir(mode=0o700)
    conf.write_text(f"""\
state_dir = {json.dumps(str(state))}
[api]
host = "127.0.0.1"
port = {port}
auth_strategy = "noauth"
[inspector]
port = {inspector_port}
[database]
url = {json.dumps(f"sqlite:///{state / 'metalforge.sqlite'}")}
""")
    return conf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ironic-venv", type=Path, required=True)
    parser.add_argument("--inspector-venv", type=Path, required=True)
    parser.add_argument("--venv", type=Path, default=Path(".venv"), help="metalforge's")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="inspector-oracle-"))
    (workdir / "locks").mkdir()
    ports = {name: free_port() for name in ("ironic", "inspector", "metalforge", "mf_insp")}
    ironic_bin, inspector_bin = args.ironic_venv / "bin", args.inspector_venv / "bin"
    try:
        iconf = ironic_conf(workdir, ports["ironic"])
        subprocess.run(
            [str(ironic_bin / "ironic-dbsync"), "--config-file", str(iconf), "create_schema"],
            check=True,
            capture_output=True,
        )
        nconf = inspector_conf(workdir, ports["inspector"], ports["ironic"])
        subprocess.run(
            [
                str(inspector_bin / "ironic-inspector-dbsync"),
                "--config-file",
                str(nconf),
                "upgrade",
            ],
            check=True,
            capture_output=True,
        )
        mconf = metalforge_conf(workdir, ports["metalforge"], ports["mf_insp"])
        with contextlib.ExitStack() as stack:
            for argv_, url, name in (
                (
                    [str(ironic_bin / "ironic"), "--config-file", str(iconf)],
                    f"http://127.0.0.1:{ports['ironic']}/v1",
                    "ironic",
                ),
                (
                    [str(inspector_bin / "ironic-inspector"), "--config-file", str(nconf)],
                    f"http://127.0.0.1:{ports['inspector']}/",
                    "ironic-inspector",
                ),
                (
                    [str(args.venv / "bin" / "metalforge"), "--config", str(mconf), "all-in-one"],
                    f"http://127.0.0.1:{ports['mf_insp']}/",
                    "metalforge",
                ),
            ):
                stack.enter_context(server(argv_, url, name, workdir))
            sides = (
                Side(
                    "ironic-inspector",
                    f"http://127.0.0.1:{ports['ironic']}",
                    f"http://127.0.0.1:{ports['inspector']}",
                    {},
                ),
                Side(
                    "metalforge",
                    f"http://127.0.0.1:{ports['metalforge']}",
                    f"http://127.0.0.1:{ports['mf_insp']}",
                    {"fake_step_delay": 3600},
                ),
            )
            results = run_cases(sides)
    except (Broken, subprocess.CalledProcessError) as exc:
        print(f"broken: {exc}; logs in {workdir}", file=sys.stderr)
        return 2
    differ = 0
    for case, oracle, ours in results:
        same = oracle == ours
        differ += not same
        mark = "same" if same else "DIFF"
        print(f"{mark:4}  {case}\n      ironic-inspector: {oracle.shown()}")
        if not same:
            print(f"      metalforge:       {ours.shown()}")
    print(f"{len(results) - differ} of {len(results)} the same; logs in {workdir}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
