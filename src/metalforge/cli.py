"""The ``metalforge`` command: every role, and schema upgrades.

Settings are read here, once, and passed down to what is built. The roles
that serve HTTP live in ``metalforge.serving``, imported only when one of
them runs (a conductor's start would otherwise load the whole web stack).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from metalforge.config import Settings, load_settings
from metalforge.coordination.hashring import ConductorDirectory
from metalforge.db import queue
from metalforge.db.models import PxeFilterHost, Rollout, RolloutNode
from metalforge.db.notify import Listener
from metalforge.errors import RequestError
from metalforge.pxe_filter.dhcp import DhcpError
from metalforge.pxe_filter.service import STATUS_EVERY, host_statuses
from metalforge.pxe_filter.setup import FilterHost, build_driver, build_filter_host
from metalforge.services import rollouts
from metalforge.services.bodies import RolloutCreate, checked
from metalforge.services.caller import Caller, Target
from metalforge.services.context import Services
from metalforge.startup import (
    StartupError,
    build_conductor,
    build_registry,
    open_database,
    start_conductor,
    stop_conductor,
    stop_signals,
    wait_for,
)

LOG = logging.getLogger("metalforge")


def cmd_all_in_one(settings: Settings) -> None:
    from metalforge import serving

    serving.cmd_all_in_one(settings)


def cmd_api(settings: Settings) -> None:
    from metalforge import serving

    serving.cmd_api(settings)


def cmd_conductor(settings: Settings) -> None:
    db = open_database(settings)
    registry = build_registry(settings)
    conductor = build_conductor(settings, db, registry)
    stop = stop_signals()
    start_conductor(conductor)
    listener = None
    if not db.is_sqlite:
        listener = Listener(settings.database.url, conductor.ctx.waker.notify)
        listener.start()
    try:
        wait_for(stop)
    finally:
        if listener is not None:
            listener.stop()
        stop_conductor(conductor, db)


def cmd_pxe_filter(settings: Settings, args: argparse.Namespace) -> None:
    """This host's PXE filter (one per host running the inspection DHCP service), or
    every host's status."""
    db = open_database(settings)
    try:
        if args.action == "status":
            print(render_filter_hosts(host_statuses(db), db.now()))
            return
        if args.action == "block":
            _block_filter(settings)
            return
        filter_host = build_filter_host(settings, db)
        if filter_host is None:
            raise StartupError("pxe_filter.driver is noop: there is nothing to run")
        if db.is_sqlite:
            raise StartupError(
                "on SQLite the all-in-one runs the PXE filter itself (set pxe_filter.driver "
                "there): another process would not hear of changes; a separate "
                "pxe-filter process needs PostgreSQL"
            )
        _run_filter_host(filter_host)
    finally:
        db.dispose()


def _block_filter(settings: Settings) -> None:
    """Make this host answer nobody, as a stopped filter leaves it (a unit's stop hook)."""
    driver = build_driver(settings)
    if driver is None:
        raise StartupError("pxe_filter.driver is noop: there is nothing to block")
    driver.block()
    print(f"this host's PXE filter ({driver.name}) now answers nobody")


def _run_filter_host(filter_host: FilterHost) -> None:
    stop = stop_signals()
    LOG.info("PXE filter starting (blocking until it has synced)")
    try:
        filter_host.start()
    except DhcpError as exc:
        raise StartupError(str(exc)) from exc
    try:
        wait_for(stop)
    finally:
        filter_host.stop()
        LOG.info("PXE filter stopped; this host's DHCP service is blocked")


def render_filter_hosts(hosts: list[PxeFilterHost], now: dt.datetime) -> str:
    """Every filter host's last known state, one line each; a host silent for three
    status periods is marked gone (its mode is what it last said, not what it does)."""
    if not hosts:
        return "no PXE filter host has reported"
    lines = [
        f"{'HOST':<24}  {'DRIVER':<8}  {'MODE':<8}  {'ALLOWED':>7}  {'DENIED':>7}  "
        f"{'UNKNOWN':<7}  {'SEEN':>9}  {'SYNCED':<25}  ERROR"
    ]
    for host in hosts:
        synced = host.synced_at.isoformat(timespec="seconds") if host.synced_at else "-"
        silent = (now - host.updated_at).total_seconds()
        seen = f"{silent:.0f}s ago" if silent < 3 * STATUS_EVERY else "gone?"
        lines.append(
            f"{host.hostname:<24}  {host.driver:<8}  {host.mode:<8}  {host.allowed:>7}  "
            f"{host.denied:>7}  {'allow' if host.unknown_allowed else 'deny':<7}  "
            f"{seen:>9}  {synced:<25}  {host.error or ''}"
        )
    return "\n".join(lines)


def cmd_db_upgrade(settings: Settings) -> None:
    db = open_database(settings)
    db.upgrade()
    db.dispose()
    print("database schema is up to date")


def cmd_work(settings: Settings, args: argparse.Namespace) -> None:
    """The operator's view of the work queue: the backlog, dead-lettered items, replay."""
    db = open_database(settings)
    try:
        if args.action == "list":
            with db.read() as session:
                found = queue.entries(session, dead=args.dead)
            print(render_work_items(found, dead=args.dead))
            return
        with db.write() as session:
            replayed = queue.replay(session, args.item)
        if not replayed:
            raise StartupError(f"work item {args.item} is not dead-lettered")
        print(f"work item {args.item} is queued again")
    finally:
        db.dispose()


def render_work_items(found: list[queue.QueueEntry], *, dead: bool) -> str:
    """A table an operator reads at a glance (reasons were scrubbed when stored)."""
    if not found:
        return "no dead-lettered work items" if dead else "no unfinished work items"
    lines = [f"{'ID':>6}  {'KIND':<10}  {'NODE':<36}  {'STATE':<8}  {'FAILURES':>8}  REASON"]
    for item in found:
        lines.append(
            f"{item.id:>6}  {item.kind:<10}  {item.node_uuid or '-':<36}  {item.state:<8}  "
            f"{item.failures:>8}  {item.reason or ''}"
        )
    return "\n".join(lines)


class HostOperator(Caller):
    """Whoever runs ``metalforge`` on a service host: with the database's credentials in
    hand, they may do anything the API would let a system admin do."""

    def may(self, rule: str, target: Target) -> bool:
        return True


def cmd_rollout(settings: Settings, args: argparse.Namespace) -> None:
    """Rollouts from a service host: the same service functions as ``/v1/rollouts``."""
    db = open_database(settings)
    svc = Services(
        settings=settings,
        db=db,
        drivers=build_registry(settings),
        directory=ConductorDirectory(db, settings.conductor.heartbeat_timeout),
    )
    try:
        if args.action == "list":
            with db.read() as session:
                found = list(session.scalars(rollouts.listing(args.state).order_by(Rollout.id)))
                rows = rollouts.rows_of(session, [r.id for r in found])
            print(render_rollouts(found, rows))
            return
        if args.action == "create":
            text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
            body = checked(RolloutCreate, json.loads(text), "rollout")
            created = rollouts.create_rollout(svc, body, HostOperator(), None, "metalforge-cli")
            ident = created.uuid
        elif args.action in ("pause", "resume", "abort"):
            ident = getattr(rollouts, args.action)(svc, args.rollout).uuid
        else:
            ident = args.rollout
        with db.read() as session:
            row = rollouts.find_rollout(session, ident)
            nodes = rollouts.rows_of(session, [row.id])[row.id]
            print(render_rollout(row, nodes, rollouts.node_names(session, nodes)))
    except RequestError as exc:
        raise StartupError(exc.message) from exc
    except (OSError, ValueError) as exc:
        raise StartupError(f"cannot read the rollout: {exc}") from exc
    finally:
        db.dispose()


def _counts(nodes: list[RolloutNode]) -> str:
    return " ".join(
        f"{state}={sum(1 for n in nodes if n.state == state)}" for state in rollouts.NODE_STATES
    )


def render_rollouts(found: list[Rollout], rows: dict[int, list[RolloutNode]]) -> str:
    if not found:
        return "no rollouts"
    lines = [f"{'UUID':<36}  {'NAME':<20}  {'STATE':<8}  NODES"]
    for row in found:
        lines.append(
            f"{row.uuid:<36}  {row.name or '-':<20}  {row.state:<8}  {_counts(rows[row.id])}"
        )
    return "\n".join(lines)


def render_rollout(row: Rollout, nodes: list[RolloutNode], names: dict[int, str | None]) -> str:
    """The rollout and each node's part, as an operator follows it."""
    lines = [
        f"rollout {row.uuid}" + (f" ({row.name})" if row.name else ""),
        f"state: {row.state}" + (f" - {row.paused_reason}" if row.paused_reason else ""),
        f"action: {json.dumps(row.action, sort_keys=True)}",
        f"canary {row.canary}, batch {row.batch}, max_failures {row.max_failures}",
        f"nodes: {_counts(nodes)}",
    ]
    if row.last_error:
        lines.append(f"error: {row.last_error}")
    lines.append(f"{'NODE':<36}  {'NAME':<16}  {'WAVE':>4}  {'STATE':<9}  {'OUTCOME':<15}  ERROR")
    for node in nodes:
        lines.append(
            f"{node.node_uuid:<36}  {names.get(node.node_id) or '-':<16}  {node.wave:>4}  "
            f"{node.state:<9}  {node.outcome or '-':<15}  {node.error or ''}".rstrip()
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="metalforge", description=__doc__)
    parser.add_argument("--config", type=Path, help="TOML configuration file")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("all-in-one", help="API and conductor in one process (the default setup)")
    sub.add_parser("api", help="the HTTP API only")
    sub.add_parser("conductor", help="a conductor only")
    db_parser = sub.add_parser("db", help="database schema management")
    db_parser.add_argument("action", choices=["upgrade"])
    work_parser = sub.add_parser("work", help="the work queue: dead-lettered items")
    work_sub = work_parser.add_subparsers(dest="action", required=True)
    listing = work_sub.add_parser("list", help="list work items")
    listing.add_argument(
        "--dead", action="store_true", help="the dead-lettered items (default: unfinished ones)"
    )
    replaying = work_sub.add_parser("replay", help="queue a dead-lettered item again")
    replaying.add_argument("item", type=int, help="the work item's id")
    rollout_parser = sub.add_parser("rollout", help="rollouts over many nodes (docs/rollouts.md)")
    rollout_sub = rollout_parser.add_subparsers(dest="action", required=True)
    creating = rollout_sub.add_parser("create", help="create one from a JSON body")
    creating.add_argument("file", help="the body, as POST /v1/rollouts takes it (- for stdin)")
    rollout_list = rollout_sub.add_parser("list", help="list rollouts")
    rollout_list.add_argument("--state", help="only those in this state")
    for action, text in (
        ("show", "a rollout and each node's part"),
        ("pause", "start no node until resumed"),
        ("resume", "carry on (after the canary: start the waves)"),
        ("abort", "stop for good; nodes under way finish"),
    ):
        rollout_sub.add_parser(action, help=text).add_argument("rollout", help="UUID or name")
    filter_parser = sub.add_parser(
        "pxe-filter", help="this host's PXE filter (beside the inspection DHCP service)"
    )
    filter_parser.add_argument(
        "action",
        nargs="?",
        default="run",
        choices=["run", "status", "block"],
        help="run the filter (default), show every filter host's status, or make this "
        "host answer nobody (after its service was killed)",
    )
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
    except (FileNotFoundError, ValueError) as exc:
        raise StartupError(str(exc)) from exc
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    commands: dict[str, Callable[[Settings], None]] = {
        "all-in-one": cmd_all_in_one,
        "api": cmd_api,
        "conductor": cmd_conductor,
        "db": cmd_db_upgrade,
        "work": lambda chosen: cmd_work(chosen, args),
        "rollout": lambda chosen: cmd_rollout(chosen, args),
        "pxe-filter": lambda chosen: cmd_pxe_filter(chosen, args),
    }
    commands[args.command](settings)


if __name__ == "__main__":
    main()
