"""``make bench``: enroll, list, lifecycle and inspection throughput of the all-in-one service.

Starts ``metalforge all-in-one`` as a subprocess on a fresh database (SQLite
by default, ``--database-url`` for PostgreSQL), drives it over HTTP from
client threads, and prints a Markdown table (``--output`` appends it to a
file). Nothing here asserts a time: the figures are recorded, not tested.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import fleet_bench
import pxe_filter_bench
from bench_measures import (
    POLL_FIRST,
    POLL_MAX,
    Client,
    allocate,
    cpu_seconds,
    enroll,
    inspection_burst,
    leader_failover,
    lifecycle,
    list_latency,
    machine,
    poll_cost,
    start_service,
    write_transactions,
)


def main() -> None:  # noqa: PLR0915 - a linear script: parse arguments, run each benchmark, report
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--enroll-concurrency", type=int, default=10)
    parser.add_argument("--lifecycle-nodes", type=int, default=1_000)
    parser.add_argument("--lifecycle-concurrency", type=int, default=50)
    parser.add_argument("--list-rounds", type=int, default=20)
    parser.add_argument("--inspection-nodes", type=int, default=500)
    parser.add_argument("--pxe-filter-macs", type=int, default=10_000)
    parser.add_argument("--pxe-filter-samples", type=int, default=20)
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="run on a throwaway PostgreSQL cluster started for the bench",
    )
    parser.add_argument("--output", type=Path, help="append the Markdown results here")
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="the fleet instead: PostgreSQL, 2 API processes behind HAProxy, 3 conductors",
    )
    parser.add_argument(
        "--fleet-scales", default="10000,100000", help="node counts the fleet is measured at"
    )
    args = parser.parse_args()
    if args.fleet:
        fleet_bench.run(args)
        return

    with tempfile.TemporaryDirectory(prefix="metalforge-bench-") as tmp:
        workdir = Path(tmp)
        cluster = None
        if args.postgres:
            from metalforge_lab.postgres import PostgresCluster

            cluster = PostgresCluster()
            cluster.start()
            cluster.execute("CREATE DATABASE bench")
            args.database_url = cluster.url("bench")
        db_url = args.database_url or f"sqlite:///{workdir}/bench.sqlite"
        try:
            proc, port, inspector_port = start_service(db_url, workdir)
            try:
                client = Client(port)
                inspector = Client(inspector_port)
                enroll_rate, uuids = enroll(client, args.nodes, args.enroll_concurrency)
                list_p50, list_p95 = list_latency(client, "/v1/nodes", args.list_rounds)
                detail_p50, detail_p95 = list_latency(client, "/v1/nodes/detail", args.list_rounds)
                get_cpu = poll_cost(client, proc.pid, uuids[-1], 2_000, args.enroll_concurrency)
                cpu_before, writes_before = cpu_seconds(proc.pid), write_transactions(port)
                sent_before = client.requests
                life_rate, life_p50, life_p95 = lifecycle(
                    client, uuids[: args.lifecycle_nodes], args.lifecycle_concurrency
                )
                life_requests = (client.requests - sent_before) / args.lifecycle_nodes
                # The conductor counts right after its commits: let the last ones land.
                time.sleep(1)
                life_cpu = (cpu_seconds(proc.pid) - cpu_before) / args.lifecycle_nodes
                life_writes = (write_transactions(port) - writes_before) / args.lifecycle_nodes
                # The four state changes are not polls; every other request is one.
                polls_cpu = (life_requests - 4) * get_cpu
                alloc_rate = allocate(client, args.lifecycle_nodes, args.lifecycle_concurrency)
                burst = uuids[args.lifecycle_nodes : args.lifecycle_nodes + args.inspection_nodes]
                inspect_rate, inspect_p50, inspect_p95 = inspection_burst(
                    client, inspector, burst, args.lifecycle_concurrency
                )
            finally:
                proc.terminate()
                proc.wait(30)
            failover = leader_failover(db_url, workdir)
            sync = pxe_filter_bench.driver_sync(workdir, args.pxe_filter_macs)
            if cluster is not None:
                cluster.execute("CREATE DATABASE bench_pxe")
                pxe_url = cluster.url("bench_pxe")
            else:
                pxe_url = f"sqlite:///{workdir}/bench-pxe.sqlite"
            filter_failover = pxe_filter_bench.failover(workdir)
            enter_p50, enter_p95, leave_p50, leave_p95 = pxe_filter_bench.end_to_end(
                pxe_url,
                workdir,
                args.pxe_filter_macs,
                args.pxe_filter_samples,
                start_service,
                Client,
            )
        finally:
            if cluster is not None:
                cluster.stop()
    engine = "PostgreSQL" if args.database_url else "SQLite (embedded default)"
    rows = [
        f"| enroll ({args.enroll_concurrency} clients) | {enroll_rate:.0f} nodes/s |",
        f"| `GET /v1/nodes?limit=1000` at {args.nodes} nodes | p50 {list_p50:.0f} ms, "
        f"p95 {list_p95:.0f} ms |",
        f"| `GET /v1/nodes/detail?limit=1000` at {args.nodes} nodes | p50 {detail_p50:.0f} ms, "
        f"p95 {detail_p95:.0f} ms |",
        f"| lifecycle manage/provide/deploy/undeploy, {args.lifecycle_nodes} nodes, "
        f"{args.lifecycle_concurrency} clients | {life_rate:.1f} nodes/s |",
        f"| service CPU per node's lifecycle (user and system, from `/proc`) | "
        f"{life_cpu * 1000:.1f} ms |",
        f"| requests per node's lifecycle (4 state changes, the rest the client's polls) | "
        f"{life_requests:.1f} |",
        f"| service CPU per status poll (`GET /v1/nodes/{{uuid}}?fields=` 3 fields) | "
        f"{get_cpu * 1000:.2f} ms |",
        f"| service CPU per node's lifecycle less its polls (the two rows above) | "
        f"{(life_cpu - polls_cpu) * 1000:.1f} ms |",
        f"| write transactions per node's lifecycle | {life_writes:.1f} |",
        f"| one node's manage/provide/deploy/undeploy (polled, {POLL_FIRST * 1000:.0f} ms "
        f"growing to {POLL_MAX * 1000:.0f} ms) | p50 {life_p50 * 1000:.0f} ms, "
        f"p95 {life_p95 * 1000:.0f} ms |",
        f"| allocations by resource class, {args.lifecycle_nodes} allocations, "
        f"{args.lifecycle_concurrency} clients | {alloc_rate:.1f} allocations/s |",
        f"| inspection burst: {len(burst)} fake-hardware nodes started at once "
        f"among {args.nodes} | {inspect_rate:.1f} inspections/s |",
        f"| one inspection, start to finished, in that burst | p50 {inspect_p50 * 1000:.0f} ms, "
        f"p95 {inspect_p95 * 1000:.0f} ms |",
        f"| leader failover (SIGKILL, default coordination settings) | {failover:.1f} s |",
        *(
            f"| PXE filter, {driver} driver, {args.pxe_filter_macs} MACs | {figure} |"
            for driver, figure in sync.items()
        ),
        f"| PXE filter, inspect API call to the node allowed (dnsmasq, "
        f"{args.pxe_filter_macs} nodes) | p50 {enter_p50 * 1000:.0f} ms, "
        f"p95 {enter_p95 * 1000:.0f} ms |",
        f"| PXE filter, abort API call to the node denied | p50 {leave_p50 * 1000:.0f} ms, "
        f"p95 {leave_p95 * 1000:.0f} ms |",
        f"| PXE filter failover, leader SIGKILLed to the other host allowing "
        f"(nftables, PostgreSQL) | {filter_failover} |",
    ]
    report = "\n".join(
        [
            f"### {time.strftime('%Y-%m-%d')} — {engine}",
            "",
            f"Machine: {machine()}",
            "",
            "| measure | result |",
            "| --- | --- |",
            *rows,
            "",
        ]
    )
    print(report)
    if args.output:
        with args.output.open("a") as fh:
            fh.write(report + "\n")


if __name__ == "__main__":
    main()
