"""A throwaway PostgreSQL cluster on loopback, started and stopped by the tests.

PostgreSQL refuses to run as root, so as root the cluster runs as the
``postgres`` system user in a fresh directory it owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from metalforge_lab.ports import free_port


def _bindir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


FAST_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
}
"""The tests' cluster: nothing it holds must survive a crash of the machine, so it
skips the flushes that make PostgreSQL durable."""


class PostgresCluster:
    """``start()`` a cluster, hand out databases, ``stop()`` it."""

    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL server binaries not found (run 'make test')")
        self.bindir = bindir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="metalforge-pg-"))
        self.data = self.dir / "data"
        self._user: str | None = None
        if os.geteuid() == 0:
            self._user = "postgres"
            entry = pwd.getpwnam("postgres")
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)

    def _run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        cmd = list(args)
        if self._user:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        return subprocess.run(cmd, check=True, capture_output=True)

    def start(self, settings: Mapping[str, str] | None = None) -> None:
        """Start the cluster with ``FAST_SETTINGS``, each overridden by ``settings``."""
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        chosen = {**FAST_SETTINGS, **(settings or {})}
        options = f"-h 127.0.0.1 -p {self.port} -k {self.dir} " + " ".join(
            f"-c {name}={value}" for name, value in chosen.items()
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.dir / "log"),
            "-w",
            "start",
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("PostgreSQL did not start")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname={database}", autocommit=True
        ) as conn:
            conn.execute(sql)

    def query(self, sql: str, database: str = "postgres") -> list[tuple[object, ...]]:
        """The rows of one statement (the bench reads PostgreSQL's own statistics)."""
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname={database}", autocommit=True
        ) as conn:
            return list(conn.execute(sql).fetchall())

    @property
    def postmaster_pid(self) -> int:
        """The server's main process (its first line of ``postmaster.pid``)."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
