"""The PXE filter with real parts: dnsmasq, nftables and a DHCP client in network namespaces.

A client asks for a lease with busybox's udhcpc exactly as a booting
machine's firmware would; whether it gets one is what the filter is for.
Root only (CI is root; elsewhere these skip, saying why).
"""

from __future__ import annotations

import subprocess
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from metalforge import inspection_states as ins
from metalforge.config import Settings
from metalforge.db.engine import Database
from metalforge.db.models import Introspection, Node, Port
from metalforge.pxe_filter.service import BLOCKING, PASSING, host_statuses
from metalforge.pxe_filter.setup import build_filter_host
from metalforge_lab.postgres import PostgresCluster
from tests.support.api import LATEST, create_node, provision, wait_for_state, wait_until
from tests.support.dhcp_network import DhcpNetwork, require_namespaces
from tests.support.fleet import pg_database, write_config
from tests.support.processes import ProcessGroup
from tests.support.stack import start_stack, test_settings

INSPECTED = "52:54:00:aa:00:01"
OTHER = "52:54:00:aa:00:02"
UNKNOWN = "52:54:00:aa:00:03"


@pytest.fixture
def network(tmp_path: Path) -> Iterator[DhcpNetwork]:
    require_namespaces()
    built = DhcpNetwork(tmp_path)
    try:
        yield built
    finally:
        built.close()


def _dnsmasq_settings(tmp_path: Path, **pxe_filter: object) -> Settings:
    """The in-process stack's settings, on SQLite, with the dnsmasq filter."""
    settings = test_settings(f"sqlite:///{tmp_path}/metalforge.sqlite")
    chosen = settings.pxe_filter.model_copy(update={"driver": "dnsmasq", **pxe_filter})
    return settings.model_copy(update={"pxe_filter": chosen})


def _file(network: DhcpNetwork, mac: str) -> str:
    try:
        return (network.servers[0].hostsdir / mac).read_text()
    except FileNotFoundError:
        return ""


def test_dnsmasq_answers_only_the_node_being_inspected(
    network: DhcpNetwork, tmp_path: Path
) -> None:
    server = network.add_server(1)
    for number, mac in enumerate((INSPECTED, OTHER, UNKNOWN), start=1):
        network.add_client(number, mac)
    settings = _dnsmasq_settings(tmp_path, dnsmasq_hostsdir=server.hostsdir)
    stack = start_stack(settings)
    filter_host = build_filter_host(settings, stack.db)
    assert filter_host is not None
    try:
        client = stack.client
        inspected = create_node(client, driver_info={"fake_step_delay": 600})
        other = create_node(client)
        for node, mac in ((inspected, INSPECTED), (other, OTHER)):
            created = client.post(
                "/v1/ports", json={"node_uuid": node["uuid"], "address": mac}, headers=LATEST
            )
            assert created.status_code == 201, created.text
            assert provision(client, node["uuid"], "manage").status_code == 202
            wait_for_state(client, node["uuid"], "manageable")
        filter_host.start()
        wait_until("the first sync", lambda: _file(network, OTHER) == f"{OTHER},ignore\n")
        network.start_dnsmasq(server)  # after the first sync, as the docs say
        assert network.lease(INSPECTED) is None
        assert network.lease(OTHER) is None
        assert network.lease(UNKNOWN) is None  # discovery is off

        assert provision(client, inspected["uuid"], "inspect").status_code == 202
        wait_until("the node to be allowed", lambda: _file(network, INSPECTED) == f"{INSPECTED}\n")
        assert network.lease(INSPECTED, attempts=3) == server.address
        assert network.lease(OTHER) is None

        assert provision(client, inspected["uuid"], "abort").status_code == 202
        wait_until("the node to be denied", lambda: _file(network, INSPECTED).endswith(",ignore\n"))
        assert network.lease(INSPECTED) is None
    finally:
        filter_host.stop()
        stack.stop()


def _bulk_nodes(db: Database, macs: list[str], *, inspecting: str | None = None) -> None:
    """A node per MAC in one transaction; ``inspecting``'s node is booting the ramdisk."""
    with db.write() as session:
        nodes = [
            Node(uuid=str(uuidlib.uuid4()), driver="fake-hardware", provision_state="manageable")
            for _ in macs
        ]
        session.add_all(nodes)
        session.flush()
        session.add_all(
            Port(uuid=str(uuidlib.uuid4()), address=mac, node_id=node.id)
            for node, mac in zip(nodes, macs, strict=True)
        )
        for node, mac in zip(nodes, macs, strict=True):
            if mac == inspecting:
                session.add(Introspection(node_uuid=node.uuid, state=ins.WAITING, generation=1))


def test_five_thousand_denied_macs_and_dnsmasq_still_answers_the_allowed_one(
    network: DhcpNetwork, tmp_path: Path
) -> None:
    server = network.add_server(1)
    network.add_client(1, INSPECTED)
    network.add_client(2, OTHER)
    settings = _dnsmasq_settings(tmp_path, dnsmasq_hostsdir=server.hostsdir)
    db = Database(settings.database.url)
    db.upgrade()
    denied = [f"52:54:01:{i >> 8 & 255:02x}:{i & 255:02x}:00" for i in range(4999)] + [OTHER]
    _bulk_nodes(db, [INSPECTED, *denied], inspecting=INSPECTED)
    filter_host = build_filter_host(settings, db)
    assert filter_host is not None
    try:
        filter_host.start()
        wait_until("the first sync", lambda: _file(network, INSPECTED) == f"{INSPECTED}\n")
        lines = [p for p in server.hostsdir.iterdir() if not p.name.startswith(".")]
        assert len(lines) == 5002  # 5,001 MACs and the unknown file (dotted: the driver's)
        network.start_dnsmasq(server)
        assert network.lease(INSPECTED, attempts=5) == server.address
        assert network.lease(OTHER) is None
    finally:
        filter_host.stop()
        db.dispose()


def _leader(db: Database) -> str | None:
    passing = [s.hostname for s in host_statuses(db) if s.mode == PASSING]
    return passing[0] if len(passing) == 1 else None


@pytest.mark.postgres
def test_two_hosts_with_nftables_only_the_leader_answers_and_another_takes_over(
    network: DhcpNetwork, tmp_path: Path, postgres: PostgresCluster
) -> None:
    servers = [network.add_server(1), network.add_server(2)]
    network.add_client(1, INSPECTED)
    network.add_client(2, OTHER)
    url = pg_database(postgres, "pxe")
    db = Database(url)
    db.upgrade()
    _bulk_nodes(db, [INSPECTED, OTHER], inspecting=INSPECTED)
    configs = {}
    for number, server in enumerate(servers, start=1):
        configs[server.address] = write_config(
            tmp_path / f"filter-{number}.toml",
            url,
            sections={
                "pxe_filter": {
                    "driver": "iptables",
                    "hostname": f"filter-{number}",
                    "interface": "eth0",
                    "nft_command": server.nft,
                    "election_interval": 0.5,
                    "leader_lease": 2.0,
                    "sync_period": 5.0,
                }
            },
        )
    for server in servers:
        network.start_dnsmasq(server)
    groups = [ProcessGroup(tmp_path, configs[s.address]) for s in servers]
    try:
        hosts = {
            s.address: group.spawn(f"filter-{n}", "pxe-filter", {})
            for n, (s, group) in enumerate(zip(servers, groups, strict=True), start=1)
        }
        leader = wait_until("a leader", lambda: _leader(db), timeout=30)
        leading_server = servers[int(leader.rsplit("-", 1)[1]) - 1]
        standby = next(s for s in servers if s is not leading_server)
        standby_name = f"filter-{servers.index(standby) + 1}"
        # A leader can be chosen before the other host's process has started
        # (dnsmasq answers everyone until a filter blocks it): wait for its block.
        wait_until(
            "the standby to block",
            lambda: {s.hostname: s.mode for s in host_statuses(db)}.get(standby_name) == BLOCKING,
            timeout=30,
        )
        assert network.lease(INSPECTED, attempts=3) == leading_server.address
        assert network.lease(OTHER) is None

        # The leader's process dies (SIGKILL: nothing of its own runs). Its host's timed
        # entries expire in the kernel; the other host takes over when the lease runs out.
        hosts[leading_server.address].kill()
        wait_until(
            "the standby to lead",
            lambda: {s.hostname: s.mode for s in host_statuses(db)}[standby_name] == PASSING,
            timeout=30,
        )
        # Its entries ended a round before its lease: never two hosts answering.
        assert "elements" not in _nft_set(leading_server.nft, "allow")
        wait_until(
            "the standby host to answer",
            lambda: network.lease(INSPECTED) == standby.address,
            timeout=30,
        )
        assert network.lease(OTHER) is None

        # SIGTERM leaves the host blocking: with no filter host left, nobody answers.
        hosts[standby.address].stop()
        assert "elements" not in _nft_set(standby.nft, "allow")
        assert network.lease(INSPECTED, attempts=2) is None
    finally:
        for group in groups:
            group.stop_all()
        db.dispose()
    logs = "\n".join(group.logs() for group in groups)
    assert "Traceback" not in logs, logs


def _nft_set(nft: list[str], name: str) -> str:
    return subprocess.run(
        [*nft, "list", "set", "inet", "metalforge_pxe", name],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout


def test_a_running_dnsmasq_forgets_an_earlier_runs_lines_when_the_filter_starts(
    network: DhcpNetwork, tmp_path: Path
) -> None:
    """dnsmasq keeps a deleted file's line; given its pid file, the filter sends it SIGHUP."""
    server = network.add_server(1)
    network.add_client(1, UNKNOWN)
    (server.hostsdir / UNKNOWN).write_text(f"{UNKNOWN}\n")  # an earlier run allowed it
    network.start_dnsmasq(server)
    pid_file = network.workdir / "dnsmasq-1" / "pid"
    wait_until("dnsmasq to start", pid_file.is_file)
    assert network.lease(UNKNOWN, attempts=3) == server.address
    settings = _dnsmasq_settings(
        tmp_path, dnsmasq_hostsdir=server.hostsdir, dnsmasq_pid_file=pid_file
    )
    db = Database(settings.database.url)
    db.upgrade()
    filter_host = build_filter_host(settings, db)
    assert filter_host is not None
    try:
        filter_host.start()
        wait_until("the first sync", lambda: any(s.synced_at for s in host_statuses(db)))
        assert not (server.hostsdir / UNKNOWN).exists()
        assert network.lease(UNKNOWN) is None
    finally:
        filter_host.stop()
        db.dispose()
