"""``make bench BENCH_ARGS=--fleet``: the control plane deployed as a fleet runs it.

One PostgreSQL (durable: fsync and synchronous commit on, with
``pg_stat_statements``), three ``metalforge conductor`` processes and two
``metalforge api`` processes behind HAProxy, all on this machine. At each
scale (10,000 and 100,000 nodes by default) it enrolls the nodes, times list
pages, runs lifecycles and allocations and starts an inspection burst; then
it makes every other node ``manageable`` and measures the fleet at rest (the
conductors' power sync reads every managed node each minute) and every
process's memory. Each phase's cost on the database is read from
PostgreSQL's own statistics (transactions, statements, its processes' CPU),
which is what ``docs/performance.md`` projects one PostgreSQL's capacity
from.

Nothing here asserts a time: the figures are recorded, not tested.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import bench_measures

from metalforge.db.tallies import FLUSH_EVERY
from metalforge_lab.haproxy import HaProxy
from metalforge_lab.postgres import PostgresCluster
from metalforge_lab.running import terminate

CONDUCTORS = 3
APIS = 2
DATABASE = "fleet"
DURABLE = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.max": "10000",
    "shared_buffers": "512MB",
    "max_connections": "300",
}
"""A production-like cluster: every commit reaches the disk before it is acknowledged."""
IDLE_WINDOW = 65.0
"""Seconds the fleet at rest is measured over: longer than one power-sync round (60 s)."""
BASELINE_WINDOW = 20.0
"""Seconds the enrolled fleet's background work (leases, heartbeats) is measured over; the
phases' costs are given net of it."""
STATS_SETTLE = FLUSH_EVERY + 1.0
"""Seconds to wait before reading the counts: PostgreSQL publishes a backend's statistics
at most once a second, and each metalforge process adds its counts to the cluster's
totals every ``FLUSH_EVERY`` seconds."""


@dataclass
class Fleet:
    """The fleet's processes, and the proxy's ports the clients use."""

    cluster: PostgresCluster
    proxy: HaProxy
    apis: list[subprocess.Popen[bytes]] = field(default_factory=list)
    conductors: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def services(self) -> list[subprocess.Popen[bytes]]:
        return [*self.apis, *self.conductors]

    def stop(self) -> None:
        self.proxy.stop()
        for proc in self.services:
            terminate(proc, timeout=30)


@dataclass(frozen=True)
class DbCost:
    """PostgreSQL's cumulative work so far: what a phase cost is the difference of two."""

    transactions: float
    statements: float
    cpu: float
    service_cpu: float
    writes: float

    def minus(self, other: DbCost) -> DbCost:
        return DbCost(
            self.transactions - other.transactions,
            self.statements - other.statements,
            self.cpu - other.cpu,
            self.service_cpu - other.service_cpu,
            self.writes - other.writes,
        )

    def net_of(self, idle: DbCost, seconds: float) -> DbCost:
        """This cost less what the idle fleet spent over the same ``seconds``."""
        return self.minus(idle.per(1 / seconds))

    def per(self, count: float) -> DbCost:
        return DbCost(
            self.transactions / count,
            self.statements / count,
            self.cpu / count,
            self.service_cpu / count,
            self.writes / count,
        )


def _env(db_url: str, hostname: str) -> dict[str, str]:
    return {
        **os.environ,
        "METALFORGE_DATABASE__URL": db_url,
        "METALFORGE_LOG_LEVEL": "WARNING",
        "METALFORGE_CONDUCTOR__HOSTNAME": hostname,
        "METALFORGE_CONDUCTOR__WORKERS": "16",
        "METALFORGE_CONDUCTOR__ASYNC_POLL_INTERVAL": "0.2",
    }


def _spawn(workdir: Path, name: str, env: dict[str, str], role: str) -> subprocess.Popen[bytes]:
    log = (workdir / f"{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "metalforge.cli", role],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )


def start_fleet(workdir: Path) -> Fleet:
    """A fresh durable cluster, its schema, the conductors, the APIs and the proxy."""
    cluster = PostgresCluster()
    cluster.start(DURABLE)
    fleet = Fleet(cluster, HaProxy(workdir, {}))
    try:
        cluster.execute(f"CREATE DATABASE {DATABASE}")
        cluster.execute("CREATE EXTENSION pg_stat_statements", DATABASE)
        db_url = cluster.url(DATABASE)
        subprocess.run(
            [sys.executable, "-m", "metalforge.cli", "db", "upgrade"],
            env=_env(db_url, "fleet-upgrade"),
            check=True,
            capture_output=True,
        )
        api_ports = [(bench_measures.free_port(), bench_measures.free_port()) for _ in range(APIS)]
        fleet.proxy = HaProxy(
            workdir,
            {"api": [api for api, _ in api_ports], "inspector": [insp for _, insp in api_ports]},
        )
        for i in range(CONDUCTORS):
            name = f"fleet-conductor-{i + 1}"
            fleet.conductors.append(_spawn(workdir, name, _env(db_url, name), "conductor"))
        for i, (api, insp) in enumerate(api_ports):
            env = {
                **_env(db_url, f"fleet-api-{i + 1}"),
                "METALFORGE_API__PORT": str(api),
                "METALFORGE_INSPECTOR__PORT": str(insp),
            }
            fleet.apis.append(_spawn(workdir, f"fleet-api-{i + 1}", env, "api"))
        for api, _ in api_ports:
            _wait_port(api, workdir)
        fleet.proxy.start()
    except BaseException:
        fleet.stop()
        cluster.stop()
        raise
    return fleet


def _wait_port(port: int, workdir: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"an API process did not start; see the logs in {workdir}")


def _postgres_cpu(cluster: PostgresCluster) -> float:
    """CPU seconds of the postmaster, its live children and the children it has reaped."""
    main = cluster.postmaster_pid
    fields = Path(f"/proc/{main}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            child = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(child[1]) == main:
            ticks += int(child[11]) + int(child[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def settle(fleet: Fleet, first: int) -> None:
    """Every node from the ``first``-th on becomes ``manageable``, powered off.

    A fleet at rest is made of managed nodes, which the conductors' power sync
    reads every interval; enrolled ones it skips. Managing 100,000 nodes
    through the API would take most of an hour, so the bench writes the end
    state in SQL (the same one ``manage`` leaves on fake hardware). The nodes
    before ``first`` stay enrolled for the lifecycle and the inspection burst.
    """
    fleet.cluster.execute(
        "UPDATE nodes SET provision_state = 'manageable', power_state = 'power off' "
        f"WHERE split_part(name, '-', 2)::int >= {int(first)}",
        DATABASE,
    )


def spent(fleet: Fleet, before: tuple[DbCost, float], idle: DbCost) -> DbCost:
    """What the cluster spent since ``before`` (a ``db_cost`` and when it was read),
    net of the background work (``idle``, per second) that runs through every phase."""
    cost, since = before
    after = db_cost(fleet)
    return after.minus(cost).net_of(idle, time.monotonic() - since)


def db_cost(fleet: Fleet) -> DbCost:
    """The cluster's transactions, statements and CPU, the services' CPU and metalforge's
    own count of write transactions, all so far."""
    time.sleep(STATS_SETTLE)
    cluster = fleet.cluster
    (transactions,) = cluster.query(
        f"SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '{DATABASE}'"
    )[0]
    (statements,) = cluster.query(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s "
        f"JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '{DATABASE}'",
        DATABASE,
    )[0]
    return DbCost(
        transactions=float(transactions),  # type: ignore[arg-type]
        statements=float(statements),  # type: ignore[arg-type]
        cpu=_postgres_cpu(cluster),
        service_cpu=sum(bench_measures.cpu_seconds(proc.pid) for proc in fleet.services),
        writes=bench_measures.write_transactions(fleet.proxy.ports["api"]),
    )


def rss_mib(proc: subprocess.Popen[bytes]) -> float:
    """A process's resident memory in MiB (``VmRSS`` of ``/proc``)."""
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class ScaleResult:
    """What one scale measured; the report puts the scales side by side."""

    nodes: int
    enroll_rate: float = 0.0
    list_ms: tuple[float, float] = (0.0, 0.0)
    detail_ms: tuple[float, float] = (0.0, 0.0)
    idle: DbCost = field(default_factory=lambda: DbCost(0, 0, 0, 0, 0))
    life_rate: float = 0.0
    life_ms: tuple[float, float] = (0.0, 0.0)
    life_cost: DbCost = field(default_factory=lambda: DbCost(0, 0, 0, 0, 0))
    life_requests: float = 0.0
    get_cost: DbCost = field(default_factory=lambda: DbCost(0, 0, 0, 0, 0))
    alloc_rate: float = 0.0
    inspect_rate: float = 0.0
    inspect_ms: tuple[float, float] = (0.0, 0.0)
    api_rss: list[float] = field(default_factory=list)
    conductor_rss: list[float] = field(default_factory=list)


def run_scale(workdir: Path, nodes: int, args: argparse.Namespace) -> ScaleResult:
    """One fresh fleet at ``nodes`` nodes, every measure in turn."""
    scale_dir = workdir / f"fleet-{nodes}"
    scale_dir.mkdir()
    fleet = start_fleet(scale_dir)
    result = ScaleResult(nodes)
    try:
        client = bench_measures.Client(fleet.proxy.ports["api"])
        inspector = bench_measures.Client(fleet.proxy.ports["inspector"])
        result.enroll_rate, uuids = bench_measures.enroll(client, nodes, args.enroll_concurrency)
        result.list_ms = bench_measures.list_latency(client, "/v1/nodes", args.list_rounds)
        result.detail_ms = bench_measures.list_latency(client, "/v1/nodes/detail", args.list_rounds)
        rest, since = db_cost(fleet), time.monotonic()
        time.sleep(BASELINE_WINDOW)  # no client, every node enrolled: nothing to sync
        baseline = db_cost(fleet).minus(rest).per(time.monotonic() - since)
        gets = 2_000
        before = (db_cost(fleet), time.monotonic())
        bench_measures.run_parallel(
            lambda _i: bench_measures.poll(client, uuids[-1]), range(gets), args.enroll_concurrency
        )
        result.get_cost = spent(fleet, before, baseline).per(gets)
        lifecycles = args.lifecycle_nodes
        before, sent = (db_cost(fleet), time.monotonic()), client.requests
        result.life_rate, p50, p95 = bench_measures.lifecycle(
            client, uuids[:lifecycles], args.lifecycle_concurrency
        )
        result.life_requests = (client.requests - sent) / lifecycles
        result.life_ms = (p50 * 1000, p95 * 1000)
        result.life_cost = spent(fleet, before, baseline).per(lifecycles)
        result.alloc_rate = bench_measures.allocate(client, lifecycles, args.lifecycle_concurrency)
        burst = uuids[lifecycles : lifecycles + args.inspection_nodes]
        rate, p50, p95 = bench_measures.inspection_burst(
            client, inspector, burst, args.lifecycle_concurrency
        )
        result.inspect_rate, result.inspect_ms = rate, (p50 * 1000, p95 * 1000)
        settle(fleet, args.lifecycle_nodes + args.inspection_nodes)
        rest, since = db_cost(fleet), time.monotonic()
        time.sleep(IDLE_WINDOW)  # no client: what the fleet at rest costs
        result.idle = db_cost(fleet).minus(rest).per(time.monotonic() - since)
        result.api_rss = [rss_mib(proc) for proc in fleet.apis]
        result.conductor_rss = [rss_mib(proc) for proc in fleet.conductors]
    finally:
        fleet.stop()
        fleet.cluster.stop()
    return result


def _pair(values: tuple[float, float]) -> str:
    return f"p50 {values[0]:.0f} ms, p95 {values[1]:.0f} ms"


def _rss(values: list[float]) -> str:
    return " / ".join(f"{value:.0f}" for value in values) + " MiB"


def report(results: list[ScaleResult], args: argparse.Namespace) -> str:
    """A Markdown table, one column per scale, and the memory each 1,000 nodes adds."""
    rows: list[tuple[str, list[str]]] = [
        (
            f"enroll ({args.enroll_concurrency} clients)",
            [f"{r.enroll_rate:.0f} nodes/s" for r in results],
        ),
        ("`GET /v1/nodes?limit=1000`", [_pair(r.list_ms) for r in results]),
        ("`GET /v1/nodes/detail?limit=1000`", [_pair(r.detail_ms) for r in results]),
        (
            "at rest, every other node manageable: PostgreSQL transactions / statements per second",
            [f"{r.idle.transactions:.1f} / {r.idle.statements:.1f}" for r in results],
        ),
        (
            "at rest: PostgreSQL CPU / services' CPU",
            [
                f"{r.idle.cpu * 100:.1f}% / {r.idle.service_cpu * 100:.1f}% of a core"
                for r in results
            ],
        ),
        (
            f"lifecycle manage/provide/deploy/undeploy, {args.lifecycle_nodes} nodes, "
            f"{args.lifecycle_concurrency} clients",
            [f"{r.life_rate:.1f} nodes/s" for r in results],
        ),
        ("one node's lifecycle (polled)", [_pair(r.life_ms) for r in results]),
        (
            "per lifecycle, net of the background work: PostgreSQL transactions (all) / statements",
            [f"{r.life_cost.transactions:.1f} / {r.life_cost.statements:.1f}" for r in results],
        ),
        (
            "per lifecycle: write transactions (metalforge's count)",
            [f"{r.life_cost.writes:.1f}" for r in results],
        ),
        (
            "per lifecycle, net of the background work: PostgreSQL CPU / services' CPU",
            [
                f"{r.life_cost.cpu * 1000:.1f} ms / {r.life_cost.service_cpu * 1000:.1f} ms"
                for r in results
            ],
        ),
        (
            "requests per lifecycle (4 state changes, the rest the client's polls)",
            [f"{r.life_requests:.1f}" for r in results],
        ),
        (
            "per status poll (`GET /v1/nodes/{uuid}?fields=` 3 fields): PostgreSQL CPU / "
            "services' CPU / transactions / statements",
            [
                f"{r.get_cost.cpu * 1000:.2f} ms / {r.get_cost.service_cpu * 1000:.2f} ms / "
                f"{r.get_cost.transactions:.1f} / {r.get_cost.statements:.1f}"
                for r in results
            ],
        ),
        (
            f"allocations, {args.lifecycle_nodes}, {args.lifecycle_concurrency} clients",
            [f"{r.alloc_rate:.1f} allocations/s" for r in results],
        ),
        (
            f"inspection burst, {args.inspection_nodes} nodes at once",
            [f"{r.inspect_rate:.1f} inspections/s" for r in results],
        ),
        ("one inspection in that burst", [_pair(r.inspect_ms) for r in results]),
        ("resident memory at rest, each API process", [_rss(r.api_rss) for r in results]),
        ("resident memory at rest, each conductor", [_rss(r.conductor_rss) for r in results]),
    ]
    if len(results) >= 2:
        small, large = results[0], results[-1]
        thousands = (large.nodes - small.nodes) / 1000
        rows.append(
            (
                "memory each 1,000 more nodes add, per process (API / conductor)",
                [
                    f"{(max(large.api_rss) - max(small.api_rss)) / thousands:.2f} MiB / "
                    f"{(max(large.conductor_rss) - max(small.conductor_rss)) / thousands:.2f} MiB"
                ]
                + [""] * (len(results) - 1),
            )
        )
    header = "| measure | " + " | ".join(f"{r.nodes:,} nodes" for r in results) + " |"
    lines = [
        f"### {time.strftime('%Y-%m-%d')} — fleet: PostgreSQL (durable), {APIS} API processes "
        f"behind HAProxy, {CONDUCTORS} conductors",
        "",
        f"Machine: {bench_measures.machine()}",
        "",
        header,
        "| --- |" + " --- |" * len(results),
        *(f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows),
        "",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> None:
    """Every scale in turn on a fresh fleet, then the report."""
    scales = [int(value) for value in args.fleet_scales.split(",")]
    with tempfile.TemporaryDirectory(prefix="metalforge-fleet-") as tmp:
        results = [run_scale(Path(tmp), nodes, args) for nodes in scales]
    text = report(results, args)
    print(text)
    if args.output:
        with args.output.open("a") as fh:
            fh.write(text + "\n")
