"""A hostile campaign against the all-in-one service: every persona, every route family.

Starts ``metalforge all-in-one`` (``http_basic``, SQLite) on a fresh state
directory, seeds nodes of three projects, then sends ``--requests`` requests
from ``--threads`` clients: each one a persona (the ten of the tests, no
credentials, a wrong password), an operation of the service's own OpenAPI
document or an agent's call, path parameters that exist or do not, hostile
bodies (wrong types, deep nesting, huge numbers, NUL characters, long text,
invalid JSON, form bodies), hostile headers (odd microversions, a foreign
``Origin``). Meanwhile one project's nodes go round manage, provide, deploy
and undeploy. Afterwards it waits for the service to come to rest and
repairs and deletes every node through the API.

It prints the counts by status and the figures ``docs/security.md`` keeps,
and exits non-zero on any 5xx, any node still reserved or any unfinished
work item once at rest, or a node the API cannot delete. Bounded in count
and time, loopback only.
"""

from __future__ import annotations

import argparse
import base64
import collections
import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import bcrypt
import requests
from bench_measures import free_port

PERSONAS: dict[str, tuple[list[str], str | None]] = {
    "alice": (["admin"], None),
    "bob": (["reader"], None),
    "dave": (["member"], None),
    "erin": (["admin"], "p-owner"),
    "carol": (["member"], "p-owner"),
    "frank": (["reader"], "p-owner"),
    "grace": (["admin"], "p-lessee"),
    "heidi": (["member"], "p-lessee"),
    "ivan": (["admin"], "p-other"),
    "judy": ([], None),
}
VERSIONS = ("latest", "1.1", "1.50", "1.99", "1.100", "9.99", "x", "")
QUERIES = (
    "", "?limit=0", "?limit=-1", "?fields=uuid,nope", "?addresses=52:54:00:00:00:01",
    "?marker=nope", "?detail=true&sort_key=x", "?node=" + "x" * 500,
)  # fmt: skip
HOSTILE_TEXT = ("", "\x00", "a" * 70_000, "../../etc/passwd", "${jndi}", "\ud800", "🙂" * 50)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def write_config(state: Path, port: int, inspector_port: int) -> Path:
    htpasswd = state / "htpasswd"
    htpasswd.write_text(
        "".join(
            f"{name}:{bcrypt.hashpw(f'{name}-pw'.encode(), bcrypt.gensalt(4)).decode()}\n"
            for name in PERSONAS
        )
    )
    users = "\n".join(
        f"[api.users.{name}]\nroles = {json.dumps(roles)}\n"
        + (f'project_id = "{project}"\n' if project else "")
        for name, (roles, project) in PERSONAS.items()
    )
    config = state / "metalforge.toml"
    config.write_text(
        f'state_dir = "{state}"\n'
        f'[database]\nurl = "sqlite:///{state}/metalforge.sqlite"\n'
        f'[api]\nport = {port}\nauth_strategy = "http_basic"\n'
        f'http_basic_auth_user_file = "{htpasswd}"\nhttp_basic_auth_cache_seconds = 600\n'
        f"[inspector]\nport = {inspector_port}\n"
        f'[conductor]\nhostname = "campaign"\nenabled_hardware_types = ["fake-hardware"]\n'
        f"{users}\n"
    )
    return config


def headers_of(name: str | None, rng: random.Random) -> dict[str, str]:
    version = "latest" if rng.random() < 0.7 else rng.choice(VERSIONS)
    headers = {"X-OpenStack-Ironic-API-Version": version}
    if name == "wrong":
        headers["Authorization"] = _basic("mallory", "guess")  # no such user: throttled
    elif name is not None:
        headers["Authorization"] = _basic(name, f"{name}-pw")
    if rng.random() < 0.05:
        headers["Origin"] = "https://evil.example"
    if rng.random() < 0.05:
        del headers["X-OpenStack-Ironic-API-Version"]
    return headers


def _nested(rng: random.Random) -> Any:
    nested: Any = 1
    for _ in range(rng.choice((10, 30, 200))):
        nested = [nested]
    return nested


def hostile_value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value a client should not send: of the wrong type, too deep, too big, odd."""
    makers: list[Callable[[], Any]] = [
        lambda: rng.choice((2**70, -(2**64), 1e308, 0, -1)),
        lambda: rng.choice(HOSTILE_TEXT),
        lambda: rng.choice((None, True, False)),
        lambda: rng.choice(("fake-hardware", "node-0", "52:54:00:00:00:01", "CUSTOM_X")),
        lambda: _nested(rng),
    ]
    if depth < 3:
        key = rng.choice(("name", "driver", "uuid", "x", ""))
        makers.append(lambda: {key: hostile_value(rng, depth + 1)})
        makers.append(lambda: [hostile_value(rng, depth + 1) for _ in range(rng.randrange(3))])
    return rng.choice(makers)()


def hostile_body(rng: random.Random) -> tuple[bytes | None, str | None]:
    """A request body and its content type."""
    pick = rng.randrange(10)
    if pick == 0:
        return None, None
    if pick == 1:
        return b"{not json", "application/json"
    if pick == 2:
        return b"target=deleted", "application/x-www-form-urlencoded"
    if pick == 3:
        op = rng.choice(("add", "replace", "remove", "test", "move"))
        where = rng.choice(("/extra/a", "/driver_info/x", "/name", "/", "/provision_state"))
        patch = [{"op": op, "path": where, "value": hostile_value(rng)}]
        return json.dumps(patch).encode(), "application/json"
    keys = ("target", "name", "driver", "traits", "resource_class", "x")
    body = {rng.choice(keys): hostile_value(rng) for _ in range(rng.randrange(1, 4))}
    return json.dumps(body, allow_nan=True).encode(), "application/json"


class Campaign:
    def __init__(self, url: str, inspector_url: str, seed: int) -> None:
        self.url = url
        self.inspector_url = inspector_url
        self.seed = seed
        self.counts: collections.Counter[int] = collections.Counter()
        self.server_errors: list[str] = []
        self.lock = threading.Lock()
        self.nodes: list[str] = []
        self.operations: list[tuple[str, str]] = []

    def admin(self) -> dict[str, str]:
        return {
            "Authorization": _basic("alice", "alice-pw"),
            "X-OpenStack-Ironic-API-Version": "latest",
        }

    def seed_world(self) -> None:
        session = requests.Session()
        schema = session.get(f"{self.url}/openapi.json", headers=self.admin(), timeout=60).json()
        for path, item in schema["paths"].items():
            if path.endswith("/events"):
                continue  # a stream, open for minutes: not a request to count
            for method in item:
                if method in ("get", "post", "put", "patch", "delete"):
                    self.operations.append((method.upper(), path))
        for number in range(24):
            owner = ("p-owner", "p-owner", "p-other")[number % 3]
            body: dict[str, Any] = {
                "driver": "fake-hardware",
                "name": f"node-{number}",
                "owner": owner,
            }
            if owner == "p-owner" and number % 2:
                body["lessee"] = "p-lessee"
            made = session.post(f"{self.url}/v1/nodes", json=body, headers=self.admin(), timeout=60)
            made.raise_for_status()
            uuid = made.json()["uuid"]
            self.nodes.append(uuid)
            port = {
                "address": f"52:54:00:00:{number // 256:02x}:{number % 256:02x}",
                "node_uuid": uuid,
            }
            session.post(f"{self.url}/v1/ports", json=port, headers=self.admin(), timeout=60)

    def one(self, session: requests.Session, rng: random.Random) -> None:
        persona = rng.choice([*PERSONAS, None, "wrong"])
        headers = headers_of(persona, rng)
        base = self.url
        if rng.random() < 0.08:
            method, path = rng.choice(
                [("GET", "/v1/lookup"), ("POST", "/v1/heartbeat/{node_ident}"),
                 ("POST", "/v1/continue_inspection"), ("POST", "/v1/continue"),
                 ("POST", "/v1/introspection/{node_ident}"), ("GET", "/v1/introspection")]
            )  # fmt: skip
            if path in ("/v1/continue", "/v1/introspection/{node_ident}", "/v1/introspection"):
                base = self.inspector_url
        else:
            method, path = rng.choice(self.operations)
        for name in ("{node_ident}", "{node_id}", "{port_id}", "{ident}"):
            if name in path:
                ident = rng.choice([*self.nodes[:6], "node-1", "nope", "a" * 300, "%00", "..", ""])
                path = path.replace(name, ident)
        while "{" in path:
            start, end = path.index("{"), path.index("}")
            path = path[:start] + rng.choice(("x", "1", "node-2", "CUSTOM_X")) + path[end + 1 :]
        query = rng.choice(QUERIES)
        body, content_type = (
            hostile_body(rng) if method in ("POST", "PUT", "PATCH") else (None, None)
        )
        if content_type:
            headers["Content-Type"] = content_type
        try:
            answer = session.request(
                method, base + path + query, data=body, headers=headers, timeout=120
            )
            status = answer.status_code
        except requests.RequestException as exc:
            status = 0
            answer = None
            detail = f"{method} {path}: {type(exc).__name__}"
        with self.lock:
            self.counts[status] += 1
            if status >= 500 or status == 0:
                text = answer.text[:200] if answer is not None else detail
                if len(self.server_errors) < 50:
                    self.server_errors.append(f"{status} {method} {path}{query[:40]} {text}")

    def client(self, number: int, count: int) -> None:
        rng = random.Random(self.seed * 1000 + number)
        session = requests.Session()
        for _ in range(count):
            self.one(session, rng)


def lifecycle(url: str, stop: threading.Event, moved: list[int]) -> None:
    """One project's own node keeps going round its life while the campaign runs."""
    headers = {
        "Authorization": _basic("ivan", "ivan-pw"),
        "X-OpenStack-Ironic-API-Version": "latest",
    }
    session = requests.Session()
    admin = {
        "Authorization": _basic("alice", "alice-pw"),
        "X-OpenStack-Ironic-API-Version": "latest",
    }
    body = {"driver": "fake-hardware", "owner": "p-other"}
    made = session.post(f"{url}/v1/nodes", json=body, headers=admin, timeout=60)
    uuid = made.json()["uuid"]
    steps = (("manage", "manageable"), ("provide", "available"), ("active", "active"),
             ("deleted", "available"), ("manage", "manageable"))  # fmt: skip
    while not stop.is_set():
        for target, state in steps:
            if stop.is_set():
                return
            session.put(f"{url}/v1/nodes/{uuid}/states/provision", json={"target": target},
                        headers=headers, timeout=60)  # fmt: skip
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not stop.is_set():
                node = session.get(f"{url}/v1/nodes/{uuid}", headers=headers, timeout=60).json()
                if node.get("provision_state") == state:
                    moved.append(1)
                    break
                time.sleep(0.2)
            else:
                if not stop.is_set():
                    raise RuntimeError(f"the other project's node did not reach {state}: {node}")


def at_rest(db: Path, limit: float) -> tuple[int, int]:
    """Wait until no node is reserved and no work item is unfinished; what is left."""
    deadline = time.monotonic() + limit
    while True:
        with sqlite3.connect(db) as conn:
            reserved = conn.execute(
                "SELECT count(*) FROM nodes WHERE reservation IS NOT NULL"
            ).fetchone()[0]
            pending = conn.execute(
                "SELECT count(*) FROM work_items WHERE state IN ('pending', 'claimed') "
                "AND (not_before IS NULL OR not_before <= datetime('now', '+1 hour'))"
            ).fetchone()[0]
        if (reserved == 0 and pending == 0) or time.monotonic() > deadline:
            return reserved, pending
        time.sleep(1)


def delete_all(url: str) -> int:
    """Repair and delete every node through the API; how many could not be deleted."""
    headers = {
        "Authorization": _basic("alice", "alice-pw"),
        "X-OpenStack-Ironic-API-Version": "latest",
    }
    session = requests.Session()
    failed = 0
    nodes = session.get(
        f"{url}/v1/nodes?fields=uuid&limit=1000", headers=headers, timeout=60
    ).json()["nodes"]
    for node in nodes:
        uuid = node["uuid"]
        session.put(
            f"{url}/v1/nodes/{uuid}/maintenance",
            json={"reason": "campaign"},
            headers=headers,
            timeout=60,
        )
        session.patch(f"{url}/v1/nodes/{uuid}", headers=headers, timeout=60,
                      json=[{"op": "replace", "path": "/protected", "value": False}])  # fmt: skip
        for _attempt in range(30):
            answer = session.delete(f"{url}/v1/nodes/{uuid}", headers=headers, timeout=60)
            if answer.status_code in (204, 404):
                break
            time.sleep(1)
        else:
            print(f"node {uuid} could not be deleted: {answer.status_code} {answer.text[:200]}")
            failed += 1
    return failed


def start(config: Path, state: Path, port: int) -> subprocess.Popen[bytes]:
    log = (state / "service.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "metalforge.cli", "--config", str(config), "all-in-one"],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=state,
        env={**os.environ, "METALFORGE_LOG_LEVEL": "WARNING"},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the service did not start; see {state / 'service.log'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seed", type=int, default=47)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="metalforge-campaign-") as tmp:
        state = Path(tmp)
        port, inspector_port = free_port(), free_port()
        proc = start(write_config(state, port, inspector_port), state, port)
        url, inspector_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{inspector_port}"
        try:
            campaign = Campaign(url, inspector_url, args.seed)
            campaign.seed_world()
            stop, moved = threading.Event(), list[int]()
            mover = threading.Thread(target=lifecycle, args=(url, stop, moved), daemon=True)
            mover.start()
            began = time.monotonic()
            per_thread = args.requests // args.threads
            with ThreadPoolExecutor(args.threads) as pool:
                list(pool.map(lambda n: campaign.client(n, per_thread), range(args.threads)))
            took = time.monotonic() - began
            stop.set()
            mover.join(150)
            reserved, pending = at_rest(state / "metalforge.sqlite", 300)
            undeletable = delete_all(url)
        finally:
            proc.terminate()
            proc.wait(60)
        sent = sum(campaign.counts.values())
        server = sum(n for status, n in campaign.counts.items() if status >= 500 or status == 0)
        print(f"requests: {sent} in {took:.0f} s ({sent / took:.0f}/s), {args.threads} clients")
        print("by status: " + ", ".join(f"{s}: {n}" for s, n in sorted(campaign.counts.items())))
        print(f"5xx or no answer: {server}")
        print(f"the other project's node moved {len(moved)} times meanwhile")
        print(f"at rest: {reserved} nodes reserved, {pending} work items unfinished")
        print(f"nodes the API could not delete: {undeletable}")
        for line in campaign.server_errors[:20]:
            print("  " + line)
        return 1 if server or reserved or pending or undeletable else 0


if __name__ == "__main__":
    sys.exit(main())
