"""Shared fixtures: databases (SQLite and PostgreSQL), an in-process stack, a live server."""

from __future__ import annotations

import itertools
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metalforge.config import BmcGuardSettings
from metalforge.db.engine import Database
from metalforge.drivers.bmc_guard import GUARD
from metalforge_lab.postgres import PostgresCluster
from tests.support.migrated import prepare
from tests.support.stack import LiveServer, Stack, start_stack, test_settings

IN_CI = bool(os.environ.get("CI"))
_counter = itertools.count()


@pytest.fixture(autouse=True)
def _fresh_bmc_guard() -> None:
    """Each test starts with the default guard and every BMC's breaker closed: one test's
    dead address (a closed port another may reuse), or the settings of a stack it started,
    must not make another's calls fail fast."""
    GUARD.configure(BmcGuardSettings())


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    try:
        cluster = PostgresCluster()
    except RuntimeError as exc:
        if IN_CI:
            raise
        pytest.skip(f"PostgreSQL is not installed here: {exc}")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database URL, once for each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/metalforge.sqlite"
    cluster: PostgresCluster = request.getfixturevalue("postgres")
    name = f"mf_{os.getpid()}_{next(_counter)}"
    cluster.execute(f"CREATE DATABASE {name}")
    return cluster.url(name)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/metalforge.sqlite"


@pytest.fixture
def stack(db_url: str) -> Iterator[Stack]:
    """API and a running conductor on each database engine."""
    running = start_stack(test_settings(db_url))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A fresh database at the newest schema on each engine (row locks, the epoch compare
    and notifications differ between them)."""
    prepare(db_url)
    database = Database(db_url)
    database.upgrade()
    yield database
    database.dispose()


@pytest.fixture
def sqlite_db(sqlite_url: str) -> Iterator[Database]:
    """A fresh SQLite database at the newest schema, for tests below the API."""
    prepare(sqlite_url)
    database = Database(sqlite_url)
    database.upgrade()
    yield database
    database.dispose()


@pytest.fixture
def sqlite_stack(sqlite_url: str) -> Iterator[Stack]:
    """API and a running conductor on SQLite only (for API-shape tests)."""
    running = start_stack(test_settings(sqlite_url))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def live_server(sqlite_url: str) -> Iterator[LiveServer]:
    running = start_stack(test_settings(sqlite_url))
    server = LiveServer(running)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        running.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with a slow test run first, the longest of them (``slow(longest=True)``)
    before the others; the order within each group is kept.

    Parallel workers take whole modules in collection order: a module of
    long multi-process tests taken last would leave the other workers idle
    while it runs on. Taken first, the many short modules fill in around it.

    Slow tests run without coverage's tracer (``no_cover``): their work is mostly
    in service processes and virtual machines it does not follow, and tracing
    their in-process part would cost the suite more CPU than it tells.
    """
    slow_modules: set[Path] = set()
    longest_modules: set[Path] = set()
    for item in items:
        marker = item.get_closest_marker("slow")
        if marker is not None:
            item.add_marker(pytest.mark.no_cover)
            slow_modules.add(item.path)
            if marker.kwargs.get("longest"):
                longest_modules.add(item.path)
    items.sort(key=lambda item: (item.path not in longest_modules, item.path not in slow_modules))


CPU_REPORT = os.environ.get("METALFORGE_TEST_CPU_REPORT")
"""A file to append a line per test to: its CPU seconds (this process and the children it
reaped), its wall seconds, when it started (Unix time), the worker that ran it and its id,
tab-separated: what to make cheaper, and how the workers' modules lined up in time."""


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """With ``METALFORGE_TEST_CPU_REPORT`` set, record what each test cost in CPU.

    Wall times on a shared two-core machine say little about which tests to
    make cheaper; CPU seconds add up across workers.
    """
    if not CPU_REPORT:
        yield
        return
    before, started = _cpu_seconds(), time.time()
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(CPU_REPORT, "a", encoding="utf-8") as report:
        report.write(
            f"{_cpu_seconds() - before:.3f}\t{time.time() - started:.3f}\t{started:.1f}"
            f"\t{worker}\t{item.nodeid}\n"
        )
