"""What ``make bench`` measures, shared by the all-in-one bench (``bench.py``) and the
fleet's (``fleet_bench.py``): the HTTP client, the service's start, and each measured
workload (enroll, list, lifecycle, allocations, inspection), with the readings of a
process's CPU and a database's write transactions.
"""

import datetime as dt
import http.client
import itertools
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HEADERS = {"Content-Type": "application/json", "X-OpenStack-Ironic-API-Version": "latest"}


class Client:
    """One keep-alive HTTP connection per thread; ``requests`` counts what was sent."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._local = threading.local()
        self._sent = itertools.count()
        self.requests = 0

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(3):
            conn = self._conn()
            self.requests = next(self._sent) + 1
            try:
                conn.request(method, path, body=data, headers=HEADERS)
                response = conn.getresponse()
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_service(
    db_url: str, workdir: Path, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], int, int]:
    port = free_port()
    inspector_port = free_port()
    env = {
        **os.environ,
        "METALFORGE_DATABASE__URL": db_url,
        "METALFORGE_API__PORT": str(port),
        "METALFORGE_INSPECTOR__PORT": str(inspector_port),
        "METALFORGE_LOG_LEVEL": "WARNING",
        "METALFORGE_CONDUCTOR__HOSTNAME": "bench",
        "METALFORGE_CONDUCTOR__WORKERS": "16",
        "METALFORGE_CONDUCTOR__ASYNC_POLL_INTERVAL": "0.2",
        **(extra_env or {}),
    }
    log = (workdir / "service.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "metalforge.cli", "all-in-one"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, port, inspector_port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"service did not start; see {workdir / 'service.log'}")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds the process has used so far (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_transactions(port: int) -> float:
    """The cluster's committed write transactions so far (``GET /metrics``, which flushes
    the answering process's counts first)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    for line in text.splitlines():
        if line.startswith("metalforge_db_write_transactions_total "):
            return float(line.split()[1])
    return 0.0


def run_parallel(func: Callable[[int], None], items: Iterable[int], concurrency: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for _ in pool.map(func, items):
            pass
    return time.perf_counter() - started


def enroll(client: Client, count: int, concurrency: int) -> tuple[float, list[str]]:
    uuids: list[str] = [""] * count

    def one(i: int) -> None:
        status, body = client.request(
            "POST",
            "/v1/nodes",
            {
                "driver": "fake-hardware",
                "name": f"bench-{i}",
                "resource_class": "bench",
            },
        )
        if status != 201:
            raise RuntimeError(f"enroll failed: {status} {body}")
        uuids[i] = body["uuid"]

    took = run_parallel(one, range(count), concurrency)
    return count / took, uuids


def list_latency(client: Client, path: str, rounds: int) -> tuple[float, float]:
    samples = []
    marker = None
    for _ in range(rounds):
        query = f"{path}?limit=1000" + (f"&marker={marker}" if marker else "")
        started = time.perf_counter()
        status, body = client.request("GET", query)
        samples.append(time.perf_counter() - started)
        if status != 200:
            raise RuntimeError(f"list failed: {status} {body}")
        items = body["nodes"]
        marker = items[-1]["uuid"] if len(items) == 1000 and "next" in body else None
    samples.sort()
    return statistics.median(samples) * 1000, percentile(samples, 0.95) * 1000


POLL_FIRST = 0.05
"""Seconds before the first status check after a request (an idle service's flow
takes a few milliseconds, so most verbs are done by then)."""
POLL_MAX = 0.2
"""Longest pause between two checks of one node."""
POLL_GROWTH = 1.5
"""Each pause is this much longer than the one before (up to ``POLL_MAX``)."""


def percentile(sorted_samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile of already sorted samples."""
    rank = math.ceil(fraction * len(sorted_samples))
    return sorted_samples[min(max(rank, 1), len(sorted_samples)) - 1]


def poll_path(uuid: str) -> str:
    """What a client waiting on a node asks for: the three fields that say it is done."""
    return f"/v1/nodes/{uuid}?fields=provision_state,target_provision_state,last_error"


def wait_state(client: Client, uuid: str, state: str, timeout: float = 300) -> None:
    """Poll the node with a growing pause, as a patient client would.

    A fixed 20 ms poll from 50 threads is 2,500 requests a second: the
    server would spend its CPU answering "not yet" instead of moving nodes.
    The pause starts short, so a fast flow is seen quickly, and grows to
    ``POLL_MAX``. (ironicclient's and openstacksdk's waits poll every 2 s;
    this is far more eager, or 50 clients could not see 50 nodes a second.)
    """
    deadline = time.monotonic() + timeout
    delay = POLL_FIRST
    while time.monotonic() < deadline:
        time.sleep(delay)
        status, body = client.request("GET", poll_path(uuid))
        if status != 200:
            raise RuntimeError(f"polling {uuid} failed: {status} {body}")
        if body["provision_state"] == state and body["target_provision_state"] is None:
            return
        if body["provision_state"].endswith("failed") or body["provision_state"] == "error":
            raise RuntimeError(f"node {uuid} failed: {body}")
        delay = min(delay * POLL_GROWTH, POLL_MAX)
    raise RuntimeError(f"node {uuid} did not reach {state}")


def lifecycle(client: Client, uuids: list[str], concurrency: int) -> tuple[float, float, float]:
    """Nodes per second, and the p50 and p95 seconds one node takes for the four verbs."""
    latencies: list[float] = [0.0] * len(uuids)

    def one(i: int) -> None:
        uuid = uuids[i]
        started = time.perf_counter()
        for verb, state in (
            ("manage", "manageable"),
            ("provide", "available"),
            ("active", "active"),
            ("deleted", "available"),
        ):
            status, body = client.request(
                "PUT", f"/v1/nodes/{uuid}/states/provision", {"target": verb}
            )
            if status != 202:
                raise RuntimeError(f"{verb} failed on {uuid}: {status} {body}")
            wait_state(client, uuid, state)
        latencies[i] = time.perf_counter() - started

    took = run_parallel(one, range(len(uuids)), concurrency)
    latencies.sort()
    p95 = percentile(latencies, 0.95)
    return len(uuids) / took, statistics.median(latencies), p95


def poll(client: Client, uuid: str) -> None:
    """One status poll of ``wait_state``'s."""
    status, body = client.request("GET", poll_path(uuid))
    if status != 200:
        raise RuntimeError(f"polling {uuid} failed: {status} {body}")


def poll_cost(client: Client, pid: int, uuid: str, count: int, concurrency: int) -> float:
    """Service CPU seconds one status poll costs, so a lifecycle's CPU can be split
    into the client's polls and the work."""
    before = cpu_seconds(pid)
    run_parallel(lambda _i: poll(client, uuid), range(count), concurrency)
    return (cpu_seconds(pid) - before) / count


def allocate(client: Client, count: int, concurrency: int) -> float:
    """Allocations per second: each client posts one and polls it until it is decided.

    The lifecycle leaves its nodes ``available`` with a known power state, so
    they are the candidates; every allocation must end ``active``.
    """

    def one(_i: int) -> None:
        status, body = client.request("POST", "/v1/allocations", {"resource_class": "bench"})
        if status != 201:
            raise RuntimeError(f"allocation failed: {status} {body}")
        uuid, delay = body["uuid"], POLL_FIRST
        while body["state"] == "allocating":
            time.sleep(delay)
            delay = min(delay * POLL_GROWTH, POLL_MAX)
            _, body = client.request("GET", f"/v1/allocations/{uuid}")
        if body["state"] != "active":
            raise RuntimeError(f"allocation {uuid} ended {body['state']}: {body['last_error']}")

    took = run_parallel(one, range(count), concurrency)
    return count / took


def inspection_burst(
    client: Client, inspector: Client, uuids: list[str], concurrency: int
) -> tuple[float, float, float]:
    """Inspections per second for a burst started at once, and p50/p95 start-to-finished.

    The nodes are managed first; then every inspection is started through the
    inspector API as fast as the clients can post, and the inspector's list
    is polled until each one ended. Durations are the records' own
    ``started_at``/``finished_at``.
    """

    def manage(i: int) -> None:
        status, body = client.request(
            "PUT", f"/v1/nodes/{uuids[i]}/states/provision", {"target": "manage"}
        )
        if status != 202:
            raise RuntimeError(f"manage failed: {status} {body}")
        wait_state(client, uuids[i], "manageable")

    run_parallel(manage, range(len(uuids)), concurrency)

    def start(i: int) -> None:
        status, body = inspector.request("POST", f"/v1/introspection/{uuids[i]}")
        if status != 202:
            raise RuntimeError(f"introspection start failed: {status} {body}")

    started = time.perf_counter()
    run_parallel(start, range(len(uuids)), concurrency)
    wanted = set(uuids)
    records: dict[str, Any] = {}
    while True:
        _, body = inspector.request("GET", "/v1/introspection?limit=1000")
        records = {r["uuid"]: r for r in body["introspection"] if r["uuid"] in wanted}
        if len(records) == len(wanted) and all(r["finished"] for r in records.values()):
            break
        time.sleep(0.2)
    took = time.perf_counter() - started
    failed = [r for r in records.values() if r["state"] != "finished"]
    if failed:
        raise RuntimeError(f"{len(failed)} inspections failed, e.g. {failed[0]}")
    durations = sorted(
        (
            dt.datetime.fromisoformat(r["finished_at"]) - dt.datetime.fromisoformat(r["started_at"])
        ).total_seconds()
        for r in records.values()
    )
    return len(uuids) / took, statistics.median(durations), percentile(durations, 0.95)


def leader_failover(db_url: str, workdir: Path) -> float:
    """Seconds from SIGKILLing the leader of the inspection clean-up to its successor.

    Two ``metalforge conductor`` processes on the bench's database, default
    coordination settings (leases in the database); the figure is what an
    operator gets out of the box (bounded by the lease and the dead-conductor
    timeout, whichever ends first).
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    query = text(
        "SELECT holder FROM leader_leases WHERE role = 'inspection-timeouts' AND holder IS NOT NULL"
    )

    def holder() -> str | None:
        with engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else str(row[0])

    procs = {}
    for name in ("failover-1", "failover-2"):
        env = {
            **os.environ,
            "METALFORGE_DATABASE__URL": db_url,
            "METALFORGE_LOG_LEVEL": "WARNING",
            "METALFORGE_CONDUCTOR__HOSTNAME": name,
        }
        log = (workdir / f"{name}.log").open("wb")
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "metalforge.cli", "conductor"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    try:
        deadline = time.monotonic() + 120
        leader = holder()
        while leader not in procs:
            if time.monotonic() > deadline:
                raise RuntimeError("no failover conductor led")
            time.sleep(0.1)
            leader = holder()
        assert leader is not None
        procs[leader].kill()
        killed = time.perf_counter()
        while holder() in (leader, None):
            if time.monotonic() > deadline + 120:
                raise RuntimeError("no new leader")
            time.sleep(0.05)
        return time.perf_counter() - killed
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(30)
        engine.dispose()


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}"
