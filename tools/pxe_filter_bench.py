"""The PXE filter's figures for ``make bench``: driver sync times and API-to-rule delays.

- Each driver's time to apply a filter of ``macs`` MACs from scratch (a
  resync) and one change among them (a wake-up). The ``nftables`` figures
  need root and ``nft``: they run in a network namespace made for the
  purpose; elsewhere they are reported as not measured.
- The end-to-end delay: ``metalforge all-in-one`` with the dnsmasq driver on
  a database of ``macs`` enrolled nodes; from the inspect (or abort) API call
  to the node's file in the hostsdir saying allow (or deny), polled every
  millisecond.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from metalforge.db.engine import Database
from metalforge.db.models import Introspection, Node, Port
from metalforge.pxe_filter.desired import FilterState
from metalforge.pxe_filter.dnsmasq import DnsmasqHostsdir
from metalforge.pxe_filter.nftables import NftablesFilter

VALID_FOR = 10.0
"""How long the leader's entries may stand unrenewed (the service passes its lease)."""


def mac(index: int) -> str:
    return "02:00:" + ":".join(f"{(index >> shift) & 0xFF:02x}" for shift in (24, 16, 8, 0))


def _timed(action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def driver_sync(workdir: Path, macs: int) -> dict[str, str]:
    """``{driver: "full X ms, one change Y ms"}`` for a filter of ``macs`` MACs."""
    everyone = [mac(i) for i in range(macs)]
    full = FilterState(frozenset(everyone[:10]), frozenset(everyone[10:]), unknown_allowed=False)
    changed = FilterState(frozenset(everyone[1:11]), frozenset(everyone[:1] + everyone[11:]), False)
    results = {}
    hostsdir = workdir / "bench-hostsdir"
    hostsdir.mkdir()
    dnsmasq = DnsmasqHostsdir(hostsdir)
    dnsmasq.start()
    first = _timed(lambda: dnsmasq.apply(full, repair=True, valid_for=VALID_FOR))
    again = _timed(lambda: dnsmasq.apply(full, repair=True, valid_for=VALID_FOR))
    change = _timed(lambda: dnsmasq.apply(changed, repair=False, valid_for=VALID_FOR))
    results["dnsmasq"] = (
        f"first sync {first * 1000:.0f} ms, resync with nothing to change {again * 1000:.0f} ms, "
        f"one node in and one out {change * 1000:.1f} ms"
    )
    if os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("ip") is None:
        results["nftables"] = "not measured (needs root and nft)"
        return results
    namespace = f"mfbench{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        nft = NftablesFilter(["ip", "netns", "exec", namespace, "nft"], "eth0")
        nft.start()
        first = _timed(lambda: nft.apply(full, repair=True, valid_for=VALID_FOR))
        change = _timed(lambda: nft.apply(changed, repair=False, valid_for=VALID_FOR))
        refresh = _timed(lambda: nft.apply(changed, repair=False, valid_for=VALID_FOR))
        results["nftables"] = (
            f"full sync {first * 1000:.0f} ms, one node in and one out {change * 1000:.0f} ms, "
            f"leader's refresh {refresh * 1000:.0f} ms"
        )
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    return results


def _enrolled(db_url: str, macs: int) -> list[str]:
    """``macs`` manageable fake nodes with a port each, written in one transaction."""
    db = Database(db_url)
    db.upgrade()
    uuids = [str(uuidlib.uuid4()) for _ in range(macs)]
    with db.write() as session:
        nodes = [
            Node(
                uuid=uuid,
                driver="fake-hardware",
                provision_state="manageable",
                # The simulated ramdisk never reports: each node waits until aborted.
                driver_info={"fake_step_delay": 3600},
            )
            for uuid in uuids
        ]
        session.add_all(nodes)
        session.flush()
        session.add_all(
            Port(uuid=str(uuidlib.uuid4()), address=mac(i), node_id=node.id)
            for i, node in enumerate(nodes)
        )
    db.dispose()
    return uuids


def end_to_end(  # noqa: PLR0915 - a linear measurement script: set up, sample, tear down
    db_url: str,
    workdir: Path,
    macs: int,
    samples: int,
    start_service: Callable[..., tuple[subprocess.Popen[bytes], int, int]],
    client_type: Callable[[int], Any],
) -> tuple[float, float, float, float]:
    """p50/p95 seconds from the inspect call to the allow file, and from abort to deny."""
    uuids = _enrolled(db_url, macs)
    hostsdir = workdir / "e2e-hostsdir"
    hostsdir.mkdir()
    proc, port, _ = start_service(
        db_url,
        workdir,
        extra_env={
            "METALFORGE_PXE_FILTER__DRIVER": "dnsmasq",
            "METALFORGE_PXE_FILTER__DNSMASQ_HOSTSDIR": str(hostsdir),
        },
    )
    client = client_type(port)

    def wait_file(index: int, content: str) -> None:
        path = hostsdir / mac(index)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if path.read_text() == content:
                    return
            except FileNotFoundError:
                pass
            time.sleep(0.001)
        raise RuntimeError(f"{path} never read {content!r}")

    def provision(uuid: str, target: str) -> None:
        for _ in range(100):
            status, body = client.request(
                "PUT", f"/v1/nodes/{uuid}/states/provision", {"target": target}
            )
            if status == 202:
                return
            if status != 409:
                raise RuntimeError(f"{target} failed: {status} {body}")
            time.sleep(0.05)
        raise RuntimeError(f"{target} stayed locked")

    entered, left = [], []
    try:
        wait_file(samples, f"{mac(samples)},ignore\n")  # the first sync is done
        for index in range(samples):
            started = time.perf_counter()
            provision(uuids[index], "inspect")
            wait_file(index, f"{mac(index)}\n")
            entered.append(time.perf_counter() - started)
            wait_state(client, uuids[index], "inspect wait")
            started = time.perf_counter()
            provision(uuids[index], "abort")
            wait_file(index, f"{mac(index)},ignore\n")
            left.append(time.perf_counter() - started)
    finally:
        proc.terminate()
        proc.wait(30)
    entered.sort()
    left.sort()
    return (
        statistics.median(entered),
        entered[int(0.95 * (len(entered) - 1))],
        statistics.median(left),
        left[int(0.95 * (len(left) - 1))],
    )


def wait_state(client: Any, uuid: str, state: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _, body = client.request("GET", f"/v1/nodes/{uuid}?fields=provision_state")
        if body["provision_state"] == state:
            return
        time.sleep(0.01)
    raise RuntimeError(f"node {uuid} never reached {state}")


def _allowed_on(namespace: str) -> set[str]:
    listed = subprocess.run(
        ["ip", "netns", "exec", namespace, "nft", "-j", "list", "set", "inet", "metalforge_pxe",
         "allow"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if listed.returncode != 0:
        return set()
    found: set[str] = set()
    for entry in json.loads(listed.stdout)["nftables"]:
        for element in entry.get("set", {}).get("elem", []):
            value = element["elem"]["val"] if isinstance(element, dict) else element
            found.add(str(value))
    return found


def failover(workdir: Path, samples: int = 3) -> str:  # noqa: PLR0915 - a linear measurement script: set up, sample, tear down
    """Seconds from SIGKILLing the leading filter host to the other host allowing the
    inspected node: two ``metalforge pxe-filter`` processes with the firewall driver and
    default election settings, on a throwaway PostgreSQL cluster (root only)."""
    if os.geteuid() != 0 or shutil.which("nft") is None:
        return "not measured (needs root and nft)"
    from metalforge_lab.postgres import PostgresCluster

    cluster = PostgresCluster()
    cluster.start()
    namespaces = [f"mfbenchf{os.getpid()}x{n}" for n in (1, 2)]
    took: list[float] = []
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        cluster.execute("CREATE DATABASE bench_failover")
        url = cluster.url("bench_failover")
        db = Database(url)
        db.upgrade()
        inspected = mac(1)
        with db.write() as session:
            node = Node(
                uuid=str(uuidlib.uuid4()), driver="fake-hardware", provision_state="inspect wait"
            )
            session.add(node)
            session.flush()
            session.add(Port(uuid=str(uuidlib.uuid4()), address=inspected, node_id=node.id))
            session.add(Introspection(node_uuid=node.uuid, state="waiting", generation=1))
        db.dispose()
        for namespace in namespaces:
            subprocess.run(["ip", "netns", "add", namespace], check=True)

        def spawn(namespace: str) -> None:
            env = {
                **os.environ,
                "METALFORGE_DATABASE__URL": url,
                "METALFORGE_LOG_LEVEL": "WARNING",
                "METALFORGE_PXE_FILTER__DRIVER": "iptables",
                "METALFORGE_PXE_FILTER__HOSTNAME": namespace,
                "METALFORGE_PXE_FILTER__INTERFACE": "eth0",
                "METALFORGE_PXE_FILTER__NFT_COMMAND": (
                    f'["ip", "netns", "exec", "{namespace}", "nft"]'
                ),
            }
            log = (workdir / f"{namespace}.log").open("ab")
            procs[namespace] = subprocess.Popen(
                [sys.executable, "-m", "metalforge.cli", "pxe-filter"],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

        def leader(timeout: float = 60) -> str:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                holding = [n for n in namespaces if inspected in _allowed_on(n)]
                if len(holding) == 1 and procs[holding[0]].poll() is None:
                    return holding[0]
                time.sleep(0.01)
            raise RuntimeError("no filter host allowed the inspected node")

        for namespace in namespaces:
            spawn(namespace)
        for _ in range(samples):
            old = leader()
            procs[old].kill()
            procs[old].wait(10)
            killed = time.perf_counter()
            new = leader()
            took.append(time.perf_counter() - killed)
            if new == old:
                raise RuntimeError("the killed host still allowed the node")
            spawn(old)  # back as a standby for the next sample
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(30)
        for namespace in namespaces:
            subprocess.run(["ip", "netns", "del", namespace], check=False)
        cluster.stop()
    return (
        f"{', '.join(f'{t:.1f}' for t in took)} s (default settings: lease 5 s, election round 1 s)"
    )
