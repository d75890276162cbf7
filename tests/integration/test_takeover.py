"""A conductor dies mid-deploy: another one finishes the work, from where it was.

Two ``metalforge api`` and three ``metalforge conductor`` processes share one
PostgreSQL database, as in production. The conductor that holds a deploying
node's reservation is SIGKILLed, so none of its cleanup runs: its
reservation, its claimed work items and its last heartbeat stay as they were.
The surviving conductors must notice it is dead (``heartbeat_timeout``),
take its nodes and work items over well before any lease would expire, and
resume each deploy at the step that was interrupted, never re-running one
that had finished.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from metalforge.db import queue
from metalforge.db.engine import Database
from metalforge.db.models import WorkItem
from metalforge.db.notify import Listener, Notifier
from metalforge_lab.postgres import PostgresCluster
from tests.support import fleet
from tests.support.processes import ProcessGroup, ServiceProcess, http

CONDUCTORS = ["conductor-a", "conductor-b", "conductor-c"]
STEP_DELAY = 1.5
"""Seconds each fake step takes: a synchronous step holds the reservation this long."""
HEARTBEAT_TIMEOUT = 3.0
LEASE_SECONDS = 120.0
"""Far longer than the test: a dead conductor's items must not wait for their lease."""
DEPLOY_STEPS = [
    "deploy.deploy",
    "deploy.write_image",
    "deploy.prepare_instance_boot",
    "deploy.tear_down_agent",
    "deploy.boot_instance",
]
OTHER_NODES = 5


@pytest.fixture
def pg_url(postgres: PostgresCluster) -> str:
    return fleet.pg_database(postgres, "takeover")


def _create_node(api: str, name: str) -> str:
    node = http(
        "POST",
        f"{api}/v1/nodes",
        {
            "name": name,
            "driver": "fake-hardware",
            "driver_info": {"fake_step_delay": STEP_DELAY},
            # Cleaning would run the same slow steps; it is not what is tested here.
            "automated_clean": False,
            "instance_info": {"image_source": "http://images.example/ubuntu.qcow2"},
        },
        expect=(201,),
    )
    return str(node["uuid"])


def _wait_all(api: str, uuids: list[str], state: str, timeout: float) -> list[dict[str, Any]]:
    """Until every node rests in ``state`` (no target) with no reservation."""
    deadline = time.monotonic() + timeout
    nodes: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        nodes = [fleet.node(api, u) for u in uuids]
        if all(
            n["provision_state"] == state
            and n["target_provision_state"] is None
            and n["reservation"] is None
            for n in nodes
        ):
            return nodes
        if any(n["provision_state"].endswith("failed") for n in nodes):
            break
        time.sleep(0.2)
    summary = [(n["name"], n["provision_state"], n["reservation"], n["last_error"]) for n in nodes]
    raise AssertionError(f"not every node reached {state}: {summary}")


def _wait_for_holder(api: str, uuid: str, timeout: float) -> str:
    """The conductor holding the node while a synchronous step runs after finished ones.

    Waiting for two finished steps (``deploy.deploy`` and the asynchronous
    ``write_image``) means the kill interrupts a later step, so the history can
    show that the finished ones were not run again.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = fleet.node(api, uuid)
        if node["provision_state"] == "deploying" and node["reservation"]:
            finished = fleet.step_counts(fleet.history(api, uuid), "deploy", "finished")
            if sum(finished.values()) >= 2:
                holder = fleet.node(api, uuid)["reservation"]
                if holder:
                    return str(holder)
        time.sleep(0.1)
    raise AssertionError(f"node {uuid} was never seen reserved mid-deploy: {fleet.node(api, uuid)}")


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_killed_conductor_is_taken_over(pg_url: str, tmp_path: Path) -> None:  # noqa: PLR0915 - one linear kill-and-takeover scenario
    config = fleet.write_config(
        tmp_path / "metalforge.toml",
        pg_url,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        lease_seconds=LEASE_SECONDS,
    )
    with ProcessGroup(tmp_path, config) as group:
        group.run("db", "upgrade")
        conductors: dict[str, ServiceProcess] = {
            host: group.start_conductor(host) for host in CONDUCTORS
        }
        api_a = group.start_api("api-a")
        api_b = group.start_api("api-b")
        api_a.wait_http()
        api_b.wait_http()
        assert api_a.url is not None
        assert api_b.url is not None
        a, b = api_a.url, api_b.url
        group.wait_for_conductors(a, CONDUCTORS)

        # Enroll through one API and bring every node to available.
        main = _create_node(a, "main")
        others = [_create_node(a, f"other-{i}") for i in range(OTHER_NODES)]
        every = [main, *others]
        for uuid in every:
            fleet.provision(a, uuid, "manage")
        _wait_all(a, every, "manageable", timeout=15)
        for uuid in every:
            fleet.provision(a, uuid, "provide")
        _wait_all(a, every, "available", timeout=15)

        # Deploy through the other API, all at once, and kill whoever holds ``main``.
        started = time.monotonic()
        for uuid in every:
            fleet.provision(b, uuid, "active")
        holder = _wait_for_holder(b, main, timeout=20)
        engine = create_engine(pg_url)
        try:
            conductors[holder].kill()
            killed_at = time.monotonic()
            after_kill = fleet.node(b, main)
            # The kill must land while the node is held: otherwise nothing is tested.
            assert after_kill["reservation"] == holder, after_kill
            stranded = [u for u in every if fleet.node(b, u)["reservation"] == holder]
            with engine.connect() as connection:
                claimed = connection.execute(
                    select(WorkItem.id).where(
                        WorkItem.state == "claimed", WorkItem.lease_owner == holder
                    )
                ).all()
            assert claimed, "the dead conductor should have left a claimed work item"

            nodes = _wait_all(b, every, "active", timeout=40)
            took = time.monotonic() - killed_at
            print(
                f"killed {holder} holding {len(stranded)} node(s) and {len(claimed)} item(s); "
                f"every node active {took:.1f}s later, {time.monotonic() - started:.1f}s "
                "after the deploy requests"
            )
            # The wait above is far shorter than the lease: the dead conductor's items
            # were reclaimed once it was known dead, not when their lease ran out.
            for node in nodes:
                assert node["last_error"] is None, node
                assert node["reservation"] is None, node

            with engine.connect() as connection:
                leftovers = connection.execute(
                    select(WorkItem.id, WorkItem.kind, WorkItem.state, WorkItem.lease_owner).where(
                        WorkItem.state.in_(["pending", "claimed"])
                    )
                ).all()
                dead_items = connection.execute(
                    select(WorkItem.id).where(
                        WorkItem.state == "claimed", WorkItem.lease_owner == holder
                    )
                ).all()
        finally:
            engine.dispose()
        assert leftovers == [], f"work left unfinished: {leftovers}"
        assert dead_items == [], "the dead conductor still holds work items"

        alive = {c["hostname"]: c["alive"] for c in http("GET", f"{a}/v1/conductors")["conductors"]}
        assert alive == {host: host != holder for host in CONDUCTORS}

        for uuid in every:
            events = fleet.history(a, uuid)
            finished = fleet.step_counts(events, "deploy", "finished")
            started_steps = fleet.step_counts(events, "deploy", "started")
            # Each step finished exactly once: none was re-run after it completed.
            assert finished == Counter(DEPLOY_STEPS), (uuid, finished)
            rerun = [name for name, count in started_steps.items() if count > 1]
            assert len(rerun) <= 1, (uuid, started_steps)
            assert all(started_steps[name] == 2 for name in rerun), (uuid, started_steps)
            if uuid in stranded:
                takeovers = [
                    e for e in events if e["event_type"] == "takeover" and holder in e["event"]
                ]
                assert takeovers, f"no takeover from {holder} in the history of {uuid}: {events}"
                assert all(e["conductor"] != holder for e in takeovers), takeovers

        for host in CONDUCTORS:
            if host != holder:
                # The split roles wake each other with LISTEN/NOTIFY on PostgreSQL.
                assert "listening for work on channel" in conductors[host].log_text()

        main_events = fleet.history(a, main)
        print("\n".join(f"{e['conductor']}: {e['event']}" for e in main_events))
        kill_index = next(
            i
            for i, e in enumerate(main_events)
            if e["event_type"] == "takeover" and holder in e["event"]
        )
        before, after = main_events[:kill_index], main_events[kill_index:]
        resumed_by = {e["conductor"] for e in after if e["conductor"]}
        assert resumed_by, main_events
        assert holder not in resumed_by, main_events
        done_before = set(fleet.step_counts(before, "deploy", "finished"))
        assert {"deploy.deploy", "deploy.write_image"} <= done_before, before
        # The new owner started where the dead one was: no finished step ran again, and
        # only the step shown running when the conductor died was started twice.
        assert not done_before & set(fleet.step_counts(after, "deploy", "started")), main_events
        current = after_kill["deploy_step"]
        interrupted = f"{current['interface']}.{current['step']}"
        twice = fleet.step_counts(main_events, "deploy", "started") - Counter(DEPLOY_STEPS)
        assert set(twice) <= {interrupted}, (interrupted, main_events)


@pytest.mark.postgres
def test_notify_wakes_a_listener(postgres: PostgresCluster, pg_url: str) -> None:
    """An API process's NOTIFY reaches a conductor's listener on another connection."""
    db = Database(pg_url, pool_size=1)
    woken = threading.Event()
    listener = Listener(pg_url, woken.set, check_interval=0.1)
    listener.start()
    try:
        assert listener.listening.wait(10), "the listener never connected"
        woken.clear()  # it wakes once on connecting, for work queued before
        Notifier(db)()
        assert woken.wait(5), "NOTIFY did not reach the listener"
    finally:
        listener.stop()
        db.dispose()


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    """The listener thread must end when it is stopped (a conductor must be able to exit)."""
    before = {t.name for t in threading.enumerate()}
    yield
    leaked = {t.name for t in threading.enumerate()} - before
    assert "notify-listener" not in leaked


def test_dead_owners_items_are_reclaimed_before_their_lease(tmp_path: Path) -> None:
    """``claim`` takes a dead conductor's items at once, never a live one's or its own."""
    db = Database(f"sqlite:///{tmp_path}/queue.sqlite")
    db.upgrade()
    lease = dt.timedelta(hours=1)
    grace = dt.timedelta(seconds=0)
    try:
        with db.write() as session:
            queue.enqueue(session, "provision", None, dedupe_key="provision:1")
        with db.write() as session:
            assert queue.claim(
                session,
                "doomed",
                limit=5,
                lease=lease,
                live_owners=["doomed"],
                affinity_grace=grace,
            )
        with db.write() as session:
            # The owner is alive: its lease holds.
            assert not queue.claim(
                session,
                "other",
                limit=5,
                lease=lease,
                live_owners=["doomed", "other"],
                affinity_grace=grace,
            )
            # A conductor whose own heartbeat is late must not run its own items twice.
            assert not queue.claim(
                session, "doomed", limit=5, lease=lease, live_owners=["other"], affinity_grace=grace
            )
        with db.write() as session:
            taken = queue.claim(
                session, "other", limit=5, lease=lease, live_owners=["other"], affinity_grace=grace
            )
        assert [item.attempts for item in taken] == [2]
        with db.read() as session:
            owner = session.scalar(select(WorkItem.lease_owner))
        assert owner == "other"
    finally:
        db.dispose()
