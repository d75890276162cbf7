"""Typed settings, read once at the entry point and passed down.

Sources, highest priority first: keyword arguments (tests), ``METALFORGE_*``
environment variables (``METALFORGE_API__PORT=6390`` reaches ``api.port``),
then a TOML file. Nothing here is read at import time: ``load_settings`` is
called by the command line and the result travels as an argument, so two
services with different settings can live in one test process.
"""

from __future__ import annotations

import re
import socket
from ipaddress import IPv4Address, IPv4Network, IPv6Network
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeInt,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


def _check_lease_outlasts_rounds(section: str, lease: float, interval: float) -> None:
    """A leader renews its lease once per election round: a lease shorter than two
    rounds would be lost between two renewals."""
    if lease <= 2 * interval:
        raise ValueError(
            f"{section}.leader_lease must exceed two election intervals, or a leader "
            "loses its role between two renewals"
        )


class UserSettings(BaseModel):
    """What an ``http_basic`` user may do: roles, and the project it belongs to."""

    model_config = ConfigDict(extra="forbid")

    roles: list[str] = Field(default_factory=list)
    """``admin``, ``member`` or ``reader`` (Ironic's personas); other names are passed on."""
    project_id: str | None = Field(default=None, min_length=1, pattern=r"^[^\x00-\x1f]+$")
    """The project the user acts for; none: the user acts for the whole system."""


class ApiSettings(BaseModel):
    """The HTTP API."""

    model_config = ConfigDict(extra="forbid")  # a mistyped key is an error, not ignored

    host: str = "127.0.0.1"
    """Address to listen on. noauth is refused on anything but loopback."""
    port: int = 6385
    """TCP port; 6385 is Ironic's, so clients need no extra configuration."""
    public_endpoint: str | None = None
    """Base URL put in links and ``next``; default: the request's own host."""
    max_limit: int = 1000
    """Largest page a list returns (and the default page size), as Ironic's [api]max_limit."""
    auth_strategy: Literal["noauth", "http_basic", "keystone"] = "noauth"
    """How callers prove who they are (see docs/security.md).

    ``noauth``: every caller is an administrator; allowed on loopback
    addresses only. ``http_basic``: users and bcrypt hashes in an htpasswd
    file (``http_basic_auth_user_file``), roles and project from ``users``.
    ``keystone``: tokens validated by keystonemiddleware against Keystone
    (the ``keystone_authtoken`` settings), roles and project from the token.
    """
    http_basic_auth_user_file: Path = Path("/etc/metalforge/htpasswd")
    """Apache htpasswd file with bcrypt entries (``htpasswd -B``), read for ``http_basic``.

    Re-read when it changes, so users can be added or removed without a restart.
    """
    http_basic_auth_cache_seconds: float = 60.0
    """How long a verified user and password are remembered (0: verify every request).

    A bcrypt check costs a quarter of a second of CPU by design; a client
    polling a deployment would otherwise spend it on every poll. Only a
    keyed hash of a correct password is kept, never the password.
    """
    login_failures: int = Field(default=5, ge=1, le=1000)
    """Failed ``http_basic`` logins one client address may make as one user within
    ``login_throttle_seconds``; past it that address's attempts as that user are refused
    with 429 and ``Retry-After``, unchecked, until the period has passed."""
    login_throttle_seconds: float = Field(default=60.0, gt=0, le=86400)
    users: dict[str, UserSettings] = Field(default_factory=dict)
    """Roles and project of each ``http_basic`` user (``[api.users.alice]``)."""
    policy_file: Path | None = None
    """A policy file in Ironic's YAML format overriding the default rules; none: the defaults."""
    tls_cert_file: Path | None = None
    """PEM certificate (chain) to serve HTTPS on the API and the agents' endpoint."""
    tls_key_file: Path | None = None
    """PEM private key of ``tls_cert_file``."""
    allow_delete_available: bool = True
    """Whether an ``available`` node may be deleted (Ironic's default: yes)."""
    lock_wait_seconds: float = 3.0
    """How long a request waits for a node a conductor has locked before answering 409."""
    call_hold_seconds: float = Field(default=120.0, gt=0)
    """The longest a synchronous BMC call (setting the boot device) holds a node's
    reservation: past it, requests take the hold as one a dead API process left."""
    outbound_workers: int = Field(default=16, ge=1, le=256)
    """Threads that run the requests answered by calling a BMC (the boot device, indicators,
    listing virtual media, synchronous vendor methods): a pool of their own, so a BMC
    that is slow to answer never holds a thread that answers other requests."""
    outbound_per_caller: int = Field(default=4, ge=1, le=256)
    """Such requests one project (or, for the deployment's own users, one user) may have
    in flight at once; beyond it they are refused with 503 at once. A call cut off or
    given up by its client counts until its BMC call ends (``bmc_guard.call_deadline``)."""
    outbound_queue: int = Field(default=64, ge=0, le=10_000)
    """Such requests that may wait for a free thread, all callers together; beyond it 503."""
    max_request_body_size: int = Field(default=1024 * 1024, ge=1024)
    """Largest operator request body accepted, in bytes (413 beyond).

    A config drive given as a dictionary is a few kilobytes; a prebuilt ISO
    image is better given as a URL. Raise it for large inline config drives."""
    max_provision_request_body_size: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Largest body of a provision request, in bytes (413 beyond): it may carry an inline
    config drive (Ironic's ``[api]max_json_body_size_provision``)."""
    max_json_depth: int = Field(default=25, ge=8, le=1000)
    """Deepest nesting of objects and lists in a request body, and in a document a patch
    leaves (400 beyond; Ironic's ``[api]max_json_body_depth``)."""
    max_agent_request_body_size: int = Field(default=64 * 1024, ge=1024)
    """Largest body the agents' lookup and heartbeat accept, in bytes (413 beyond)."""
    max_inspection_report_size: int = Field(default=16 * 1024 * 1024, ge=64 * 1024)
    """Largest inspection report accepted from a ramdisk, in bytes (413 beyond): an
    inventory is a few kilobytes, the logs it carries (compressed) up to a few MiB."""
    header_timeout: float = Field(default=10.0, gt=0, le=300)
    """Seconds a client has to send a request's head, from its connection or the first
    byte of the request (not restarted by each byte); the connection is closed after."""
    body_timeout: float = Field(default=30.0, gt=0, le=600)
    """Seconds each part of a request body may take to arrive (408 after)."""
    max_connections: int = Field(default=1000, ge=10)
    """Connections and requests one API process serves at once (503 beyond)."""
    metrics_host: str = "127.0.0.1"
    """Address of the unauthenticated metrics port, when ``metrics_port`` is set."""
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Serve ``/metrics`` without credentials on this port too (for a Prometheus that
    cannot log in, e.g. under Keystone). Off by default; bind a management address."""
    event_stream_lifetime: float = Field(default=900.0, ge=1.0)
    """Seconds an event stream lasts before the server ends it; the client reconnects
    (resuming with ``Last-Event-ID``), so a revoked credential stops working soon."""
    max_event_streams: int = Field(default=200, ge=1)
    """Event streams one API process serves at once (503 beyond: each is a connection)."""
    max_event_streams_per_caller: int = Field(default=20, ge=1)
    """Event streams one project (or system user) may hold on one API process (503
    beyond), so one caller cannot take every stream."""
    agent_host: str | None = None
    """Address of the ramdisk agents' endpoint (the provisioning network side), or none.

    It serves only what ironic-python-agent calls (version discovery,
    ``/v1/lookup``, ``/v1/heartbeat``), which the agent token protects, so it
    may listen on a non-loopback address while the full API stays on ``host``.
    """
    agent_port: int = 6385
    """TCP port of the agents' endpoint."""
    enable_ramdisk_endpoints: bool = True
    """Whether the operator address also serves the ramdisk's lookup, heartbeat and
    inspection report (Ironic's setting of the same name). Turn it off with
    ``agent_host`` set, so agents reach only the provisioning address."""

    @model_validator(mode="after")
    def _check_tls_pair(self) -> ApiSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("api.tls_cert_file and api.tls_key_file must be given together")
        return self


class InspectorSettings(BaseModel):
    """The ironic-inspector API (python-ironic-inspector-client's ``introspection`` commands)."""

    model_config = ConfigDict(extra="forbid")  # a mistyped key is an error, not ignored

    enabled: bool = True
    """Serve it (from the API processes, beside the Ironic API)."""
    host: str = "127.0.0.1"
    """Address to listen on; the same authentication as the API (noauth: loopback only)."""
    port: int = 5050
    """TCP port; 5050 is ironic-inspector's."""


class PxeFilterSettings(BaseModel):
    """Which machines the inspection DHCP/PXE service may answer (``metalforge pxe-filter``)."""

    model_config = ConfigDict(extra="forbid")  # a mistyped key is an error, not ignored

    driver: Literal["noop", "dnsmasq", "iptables", "nftables"] = "noop"
    """``dnsmasq``: one file per MAC in dnsmasq's ``dhcp-hostsdir``; ``iptables`` (the
    same as ``nftables``): firewall sets on the DHCP port of ``interface``, through
    ``nft``; ``noop``: no filtering (nothing runs)."""
    hostname: str = Field(default_factory=socket.gethostname, min_length=1, max_length=200)
    """This filter host's name in the election and in the status table; unique per host."""
    sync_period: float = Field(default=15.0, ge=0, le=30)
    """Seconds between full resyncs that repair anything a wake-up missed; 0 disables
    them (changes then arrive only by notification, which a separate filter process
    gets on PostgreSQL only)."""
    election_interval: float = Field(default=1.0, gt=0)
    """Seconds between election rounds of the filter hosts (and refreshes of the
    leader's timed firewall entries)."""
    leader_lease: float = Field(default=5.0, gt=0)
    """Seconds the leader keeps the role without renewing it: a dead leader's host is
    replaced this long after its last round at the latest."""
    dnsmasq_hostsdir: Path = Path("/var/lib/metalforge/dhcp-hostsdir")
    """The directory dnsmasq reads with ``--dhcp-hostsdir`` (``dnsmasq`` driver); every
    file in it is the filter's and is removed at start."""
    dnsmasq_pid_file: Path | None = None
    """dnsmasq's pid file: the filter sends it SIGHUP after purging the directory at
    start, so it forgets an earlier run's lines; unset: start dnsmasq after the filter."""
    interface: str = Field(default="br-pxe", min_length=1, max_length=15, pattern=r"^[^\s\"]+$")
    """The provisioning interface the inspection DHCP service listens on (firewall
    drivers)."""
    nft_command: list[str] = Field(default_factory=lambda: ["nft"], min_length=1)
    """How to run ``nft`` (``["sudo", "nft"]``, or ``["ip", "netns", "exec", NS, "nft"]``
    for a DHCP service in a network namespace)."""
    table: str = Field(default="metalforge_pxe", pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
    """The nftables table (family ``inet``) the firewall drivers own."""

    @model_validator(mode="after")
    def _check_lease(self) -> PxeFilterSettings:
        _check_lease_outlasts_rounds("pxe_filter", self.leader_lease, self.election_interval)
        return self


class DhcpSettings(BaseModel):
    """The provisioning network's DHCP and TFTP service: a dnsmasq metalforge configures
    and runs beside this host's PXE filter, answering only the machines the filter lets
    through and chainloading them into iPXE and metalforge's scripts (docs/booting.md)."""

    model_config = ConfigDict(extra="forbid")  # a mistyped key is an error, not ignored

    enabled: bool = False
    """Run the service (the all-in-one and ``metalforge pxe-filter``); it needs a PXE
    filter driver, which decides whom it answers."""
    interface: str = Field(default="br-pxe", min_length=1, max_length=15, pattern=r"^[^\s\"]+$")
    """The provisioning interface dnsmasq listens on (it must have an IPv4 address in
    the range's subnet)."""
    mode: Literal["dhcp", "proxy"] = "dhcp"
    """``dhcp``: dnsmasq hands out addresses from ``range_start``-``range_end``;
    ``proxy``: another server gives addresses on ``proxy_subnet`` and dnsmasq only
    tells booting machines what to boot (proxy DHCP)."""
    range_start: IPv4Address | None = None
    range_end: IPv4Address | None = None
    """The addresses handed out (``dhcp`` mode), in the interface's subnet; several
    filter hosts on one network need ranges that do not overlap."""
    lease_time: int = Field(default=600, ge=120, le=86_400)
    """Seconds a lease lasts (``dhcp`` mode)."""
    router: IPv4Address | None = None
    """The default gateway given with a lease; unset: none (the provisioning network
    needs no route beyond itself)."""
    dns_servers: list[IPv4Address] = Field(default_factory=list, max_length=3)
    """Name servers given with a lease; unset: none."""
    proxy_subnet: IPv4Network | None = None
    """The subnet another DHCP server gives addresses on (``proxy`` mode)."""
    tftp_root: Path = Path("/usr/lib/ipxe")
    """Where the iPXE binaries for PXE firmware are (Debian's ``ipxe`` package)."""
    bios_boot_file: str = Field(default="undionly.kpxe", pattern=r"^[A-Za-z0-9._\-]{1,64}$")
    """The iPXE binary BIOS PXE firmware loads over TFTP (from ``tftp_root``)."""
    uefi_boot_file: str = Field(default="snponly.efi", pattern=r"^[A-Za-z0-9._\-]{1,64}$")
    """The iPXE binary UEFI PXE firmware (x86-64) loads over TFTP (from ``tftp_root``)."""
    dnsmasq_command: list[str] = Field(default_factory=lambda: ["dnsmasq"], min_length=1)
    """How to run dnsmasq (``["ip", "netns", "exec", NS, "dnsmasq"]`` in a namespace)."""
    run_as: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_\-]{0,31}$")
    """The user dnsmasq drops to once its sockets are open; unset: dnsmasq's own default
    (``nobody``), which must be able to read ``pxe_filter.dnsmasq_hostsdir``."""
    state_dir: Path | None = None
    """Where its configuration, pid file and leases are kept. Unset: ``dhcp`` in
    ``state_dir``."""
    log_dhcp: bool = True
    """Log every DHCP exchange (whom it answered or ignored, what it told them to boot)."""

    @model_validator(mode="after")
    def _check_mode(self) -> DhcpSettings:
        if not self.enabled:
            return self
        if self.mode == "dhcp":
            if self.range_start is None or self.range_end is None:
                raise ValueError("dhcp.mode dhcp needs dhcp.range_start and dhcp.range_end")
            if int(self.range_start) > int(self.range_end):
                raise ValueError("dhcp.range_start must not come after dhcp.range_end")
        elif self.proxy_subnet is None:
            raise ValueError("dhcp.mode proxy needs dhcp.proxy_subnet")
        return self


SAFE_KERNEL_PARAM = re.compile(r"^[A-Za-z0-9_.,:/=@%+~\-\[\]]+$")
"""A kernel parameter iPXE writes as it is: nothing it would expand (``$``), quote or split on."""


class NetbootSettings(BaseModel):
    """Booting the agent's ramdisk from the network: the iPXE scripts and deploy images
    metalforge serves on the agents' endpoint (``ipxe`` boot interface, docs/booting.md)."""

    model_config = ConfigDict(extra="forbid")  # a mistyped key is an error, not ignored

    http_url: str | None = Field(
        default=None,
        # Nothing an iPXE script would expand (``$``) or split on: it is written into them.
        pattern=r"^https?://[A-Za-z0-9.\-\[\]:]+(/[A-Za-z0-9._~\-/%]*[A-Za-z0-9._~\-%])?$",
    )
    """The base URL nodes fetch scripts and images from, and agents call back on (their
    ``ipa-api-url``), without a trailing slash. Unset: the agents' endpoint
    (``api.agent_host``/``agent_port``), else the API's own address."""
    kernel_append: str = Field(default="nofb nomodeset vga=normal", max_length=2000)
    """More kernel parameters for the ramdisk (console, network, debugging), after the
    ones the agent needs."""
    image_cache_dir: Path | None = None
    """Where fetched deploy kernels and ramdisks are kept. Unset: ``boot-images`` in
    ``state_dir``."""
    image_cache_max_size: int = Field(default=20 * 1024**3, ge=64 * 1024**2)
    """Bytes the image cache may hold; past it the least recently used images go, but
    never one a node's boot or virtual drive uses (pinned) nor one used in the last
    ``image_cache_min_age`` seconds. 20 GiB holds a few deploy ramdisks, the boot ISOs
    built from them and the virtual media attached by hand."""
    image_cache_min_age: float = Field(default=600.0, ge=0)
    """Seconds an image is kept after its last use, whatever the size."""
    image_cache_pin_days: float = Field(default=30.0, gt=0)
    """Days a node's pin on the images it uses lasts unless renewed or released (a node
    deleted while it held one holds nothing after)."""
    image_dirs: list[Path] = Field(default_factory=list)
    """Directories a ``deploy_kernel``/``deploy_ramdisk`` given as a file may be in; none
    by default (only http(s) URLs). Anything in them may be served to the provisioning
    network."""
    max_image_size: int = Field(default=4 * 1024**3, ge=1024 * 1024)
    """Bytes a deploy kernel or ramdisk may have; a larger download is refused."""
    image_fetch_timeout: float = Field(default=60.0, gt=0, le=3600)
    """Seconds a deploy image's server may stay silent (connecting, or between bytes)."""
    image_fetch_deadline: float = Field(default=1800.0, gt=0, le=86400)
    """Seconds one image download may take in all; past it the download is cut off. A
    per-read timeout alone lets a server that sends a byte now and then hold the fetching
    worker for ever."""
    image_fetch_min_rate: int = Field(default=65536, ge=0)
    """Bytes a second a download must average once ``image_fetch_grace`` has passed; a
    slower one is given up (0: no minimum). The default fetches a 4 GiB image in under
    18 hours and cuts a trickling server off after the grace."""
    fetch_allowed_networks: list[IPv4Network | IPv6Network] = Field(default_factory=list)
    """Networks image downloads may reach although they are refused by default: the
    loopback and link-local networks (metadata services among them), multicast and
    reserved space, and this host's own addresses (``outbound_http.NEVER_BY_DEFAULT``).
    Every connection is checked against the address it reached, redirects included.
    ``["127.0.0.0/8"]`` lets a host serve its deploy images to itself."""
    oci_plain_http_registries: list[str] = Field(default_factory=list)
    """OCI registries (``host:port`` as an ``oci://`` image reference names them) reached
    over plain HTTP rather than HTTPS: a lab's or an air-gapped site's own registry."""
    image_fetch_grace: float = Field(default=30.0, gt=0, le=3600)
    """Seconds a download may take before ``image_fetch_min_rate`` is checked (a server
    may be slow to start)."""
    ipxe_retry_delay: int = Field(default=5, ge=1, le=300)
    """Seconds a node's iPXE waits before asking again while its images are fetched."""

    @field_validator("kernel_append")
    @classmethod
    def _check_kernel_append(cls, value: str) -> str:
        """Each parameter goes into iPXE scripts as written: nothing iPXE would expand
        (``$``), quote or split on."""
        for param in value.split():
            if not SAFE_KERNEL_PARAM.match(param):
                raise ValueError(f"kernel parameter {param!r} has characters iPXE would interpret")
        return value


class DatabaseSettings(BaseModel):
    """Where the truth lives."""

    model_config = ConfigDict(extra="forbid")  # a mistyped key is an error, not ignored

    url: str = ""
    """SQLAlchemy URL. ``sqlite:///path`` (WAL) or ``postgresql+psycopg://...``;
    empty: ``metalforge.sqlite`` in ``state_dir``."""
    pool_size: int = 20
    """Connections kept per process (PostgreSQL only)."""
    retry_count: int = Field(default=20, ge=1, le=10_000)
    """Attempts in a row that may fail because the database is out of reach (a write
    of a node, a heartbeat, an election round) before the process gives up: a
    conductor then stops rather than act on a picture of the cluster it cannot check."""
    retry_interval: float = Field(default=3.0, gt=0, le=600)
    """Seconds between those attempts (interrupted by a stop). With the defaults an
    outage of about a minute is ridden out."""
    connect_timeout: int = Field(default=10, ge=1, le=600)
    """Seconds one attempt may take to connect (PostgreSQL)."""


class CoordinationSettings(BaseModel):
    """Leader election for the singleton periodic tasks (inspection clean-up, ...)."""

    model_config = ConfigDict(extra="forbid")  # a mistyped key is an error, not ignored

    backend_url: str = Field(default="", repr=False)
    """A tooz URL (``redis://host:6379?timeout=5``) to elect through Redis; empty: leases
    in the service's own database. Another tooz backend with groups and locks needs its
    client library installed beside metalforge (ZooKeeper: kazoo); only Redis is tested."""
    group: str = "metalforge-conductors"
    """The tooz group the conductors join (tooz backends only)."""
    election_interval: float = Field(default=2.0, gt=0)
    """Seconds between election rounds (campaign, renew the lease, run what is due)."""
    leader_lease: float = Field(default=10.0, gt=0)
    """Seconds a leader keeps a role without renewing it: a dead leader's roles are
    taken over this long after its last round at the latest (at once, on the database
    backend, once it is known dead). With tooz, pass the backend's lock timeout in
    the URL as well."""
    retry_count: int = Field(default=15, ge=1, le=10_000)
    """Failed rounds in a row with a tooz backend out of reach after which the conductor
    stops rather than act on a picture of the cluster it cannot check (the database
    backend follows ``database.retry_count``)."""
    retry_interval: float = Field(default=2.0, gt=0, le=600)
    """Seconds between those rounds (interrupted by a stop)."""

    @model_validator(mode="after")
    def _check_lease(self) -> CoordinationSettings:
        _check_lease_outlasts_rounds("coordination", self.leader_lease, self.election_interval)
        return self


class InspectionSettings(BaseModel):
    """Inspection: how long a node may take to report, and what its report changes."""

    model_config = ConfigDict(extra="forbid")  # a mistyped key is an error, not ignored

    timeout: float = Field(default=900.0, gt=0, le=900)
    """Seconds from the start of an inspection to the ramdisk's report (at most 900,
    the bound of the HA inspection design); past it the inspection fails."""
    clean_up_period: float = Field(default=30.0, gt=0)
    """Seconds between sweeps for timed-out inspections, records of deleted nodes and
    expired raw reports."""
    data_expiry: float = Field(default=86400.0, gt=0)
    """Seconds a ramdisk's raw report is kept for reprocessing; the inventory and plugin
    data it produced are kept until the node is deleted."""
    power_off: bool = True
    """Power the node off once its report is processed."""
    power_on_interval: float = Field(default=0.0, ge=0)
    """Seconds between two power-ons into the inspection ramdisk, across every conductor
    (some BMCs and power circuits cannot take a few hundred at once); 0: no limit."""
    add_ports: Literal["all", "active", "pxe", "disabled"] = "pxe"
    """Which reported NICs get a port: ``pxe`` the booting one (all when the ramdisk did
    not say which it booted from), ``active`` those with an IP address, ``all``, or none."""
    keep_ports: Literal["all", "present", "added"] = "all"
    """Which existing ports survive: ``all``; ``present``, those whose MAC was reported;
    ``added``, those ``add_ports`` would have created."""
    update_pxe_enabled: bool = True
    """Set ``pxe_enabled`` on existing ports to whether each is the NIC the node booted from."""
    disk_partitioning_spacing: bool = True
    """Leave a GiB of the root disk for the partition table when setting ``local_gb``."""
    discovery: bool = False
    """Enroll a new node (in ``enroll``) when a machine no node matches reports."""
    discovery_max_per_minute: int = Field(default=60, ge=1)
    """Nodes discovery may enroll in any minute, across the cluster (503 beyond: the
    report needs no credentials)."""
    discovery_driver: str = "fake-hardware"
    """The driver of discovered nodes (``ipmi`` or ``redfish`` record the reported BMC
    address in ``ipmi_address``/``redfish_address``); it must be enabled."""
    built_in_rules: Path | None = None
    """A YAML (or JSON) list of inspection rules applied with the API's on every
    inspection, read at each one (``docs/inspection.md``); the API does not show them."""

    @model_validator(mode="after")
    def _check_ports(self) -> InspectionSettings:
        if self.add_ports == "disabled" and self.keep_ports == "added":
            raise ValueError(
                "inspection.keep_ports = 'added' would delete every port when add_ports "
                "is 'disabled'"
            )
        return self


_MAX_DEADLINE = 7 * 86400.0
"""A work item's deadline is positive and at most a week (``inf`` and ``nan`` are refused)."""


class WorkDeadlines(BaseModel):
    """Seconds a work item of each kind may run before its call is abandoned.

    A deadline ends what a driver call, a BMC or a stored value would
    otherwise stretch without bound: past it the item's node fails with an
    error naming the deadline, the worker is free again, and the call's
    thread is left to end on its own (counted, see ``max_abandoned_calls``).
    Waits that the flows park for (an agent's callback, an asynchronous step)
    are not inside an item and have their own timeouts.
    """

    model_config = ConfigDict(extra="forbid")

    provision: float = Field(default=3600.0, gt=0, le=_MAX_DEADLINE)
    """A flow's steps run by the conductor in one go (cleaning, deploying, servicing...)."""
    abort: float = Field(default=600.0, gt=0, le=_MAX_DEADLINE)
    power: float = Field(default=600.0, gt=0, le=_MAX_DEADLINE)
    """A power request, the BMC's retries included."""
    inspection: float = Field(default=1800.0, gt=0, le=_MAX_DEADLINE)
    """Processing an inspection report or event."""
    node_settings: float = Field(default=600.0, gt=0, le=_MAX_DEADLINE)
    """A console, boot mode or secure boot change."""
    vendor: float = Field(default=600.0, gt=0, le=_MAX_DEADLINE)
    """A vendor passthru call."""
    virtual_media: float = Field(default=2400.0, gt=0, le=_MAX_DEADLINE)
    """Attaching or ejecting virtual media by hand: the image's download (at most
    ``netboot.image_fetch_deadline``) and the BMC's calls."""


class BmcGuardSettings(BaseModel):
    """How metalforge spares each BMC (``drivers.bmc_guard``), the same for every BMC."""

    model_config = ConfigDict(extra="forbid")

    max_concurrent: int = Field(default=1, ge=1, le=32)
    """Calls to one BMC (by address) at once; BMCs serve few sessions, and several nodes
    behind one BMC (a chassis, the Redfish emulator) share its limit."""
    slot_wait: float = Field(default=20.0, gt=0, le=300.0)
    """Seconds a call waits for a free slot before it fails as "BMC busy" (a
    ``BmcUnavailable``, so idempotent actions retry within ``bmc_retry_budget``)."""
    calls_per_minute: int = Field(default=0, ge=0, le=100_000)
    """A budget of calls to one BMC a minute (a bucket that refills steadily, so short
    bursts up to it pass at once); beyond it a call waits for its turn, at most
    ``slot_wait``, then fails as "BMC busy". 0: no budget (only ``max_concurrent``)."""
    failures_to_open: int = Field(default=3, ge=1, le=100)
    """Consecutive calls that cannot reach a BMC after which its circuit breaker opens."""
    cooldown: float = Field(default=60.0, gt=0, le=3600.0)
    """Seconds calls to a BMC whose breaker opened fail at once, before one probe is let
    through."""
    call_deadline: float = Field(default=100.0, gt=0, le=3600.0)
    """Seconds one call to a BMC may take in all (connecting, the request, the answer and
    the client's retries); past it the call's connections are cut and it counts as the
    BMC not answering. A per-read timeout alone lets a BMC that trickles its answer hold
    a worker for ever. Keep it under ``api.call_hold_seconds``, so a call the API makes
    under a node's hold ends before the hold does."""


def _step_priorities(value: object) -> object:
    """``["deploy.erase_devices:0"]`` (the configuration's form) -> ``{"deploy.erase_devices": 0}``.

    Parsed once, when the settings load: everything that plans steps reads
    the mapping, and a malformed entry stops the service before it starts.
    """
    if not isinstance(value, list | tuple):
        return value  # a mapping already, or a type pydantic refuses with its own message
    parsed: dict[str, int] = {}
    for entry in value:
        name, sep, priority = str(entry).rpartition(":")
        if not sep or "." not in name or not priority.isdigit():
            raise ValueError(f"{entry!r} is not of the form interface.step:priority")
        parsed[name] = int(priority)
    return parsed


StepPriorities = Annotated[dict[str, NonNegativeInt], BeforeValidator(_step_priorities)]
"""Step priorities by ``interface.step``, from ``interface.step:priority`` entries."""


class ConductorSettings(BaseModel):
    """The conductor role: claims work, holds node reservations, runs periodic tasks."""

    model_config = ConfigDict(extra="forbid")  # a mistyped key is an error, not ignored

    hostname: str = Field(default_factory=socket.gethostname)
    """Name this conductor registers under; must be unique among live conductors."""
    conductor_group: str = ""
    """Group this conductor serves (nodes with the same ``conductor_group``)."""
    workers: int = 16
    """Threads that run work items in parallel."""
    workers_per_project: int = Field(default=8, ge=1)
    """Workers that may run one project's nodes at once (a node's lessee, else its owner);
    the others stay free for other projects, so one tenant's BMCs and image servers,
    however slow, cannot take every worker. The deployment's own nodes (neither owner nor
    lessee) may use every worker. At or above ``workers`` it is no limit."""
    heartbeat_interval: float = 5.0
    """Seconds between conductor heartbeats in the conductors table."""
    heartbeat_timeout: float = 30.0
    """Seconds without a heartbeat after which a conductor is considered dead."""
    history_max_entries: int = Field(default=300, ge=1)
    """Entries of each node's history kept (Ironic's ``node_history_max_entries``); the
    upkeep drops older ones beyond it."""
    history_minimum_days: float = Field(default=0.0, ge=0.0)
    """Days of every node's history kept whatever ``history_max_entries`` says."""
    history_prune_batch: int = Field(default=1000, ge=1, le=100_000)
    """History entries the upkeep drops at most a minute (one short delete each round)."""
    event_retention: float = Field(default=3600.0, ge=60.0)
    """Seconds node events are kept for clients of ``GET /v1/events`` that reconnect
    with ``Last-Event-ID`` (a client gone longer is told to re-read everything); one
    conductor prunes older ones every minute."""
    shutdown_timeout: float = Field(default=30.0, gt=0)
    """Seconds a stopping conductor (SIGTERM) gives its running items to reach a safe
    point before it goes offline anyway; what is left is taken over by the others."""
    lease_seconds: float = 60.0
    """How long a claimed work item stays claimed before another conductor may retry it."""
    work_item_max_failures: int = Field(default=5, ge=1)
    """Failed attempts (the worker died holding the item, or an unexpected error outside
    any step) after which a work item is dead-lettered and its node's flow failed."""
    work_deadlines: WorkDeadlines = Field(default_factory=WorkDeadlines)
    bmc_retry_budget: float = Field(default=60.0, ge=0, le=600.0)
    """Seconds an idempotent BMC action (a power change, booting a flow's ramdisk) keeps
    trying a BMC that does not answer before its flow fails; a BMC that answers "no"
    (refused credentials, an unsupported request) fails it at once. The item's work
    deadline still bounds it: a retry never outlives its item."""
    bmc_retry_interval: float = Field(default=2.0, gt=0, le=60.0)
    """Seconds before the first retry of a BMC that did not answer; doubled each time."""
    bmc_guard: BmcGuardSettings = Field(default_factory=BmcGuardSettings)
    """Per-BMC call limit and circuit breaker (``drivers.bmc_guard``)."""
    max_abandoned_calls: int = Field(default=64, ge=1)
    """Abandoned calls (past their item's deadline) still running after which this
    conductor claims no more work until some end: their threads stay bounded."""
    poll_interval: float = 1.0
    """Seconds between queue polls when no wake-up arrives (LISTEN/NOTIFY or in-process)."""
    affinity_grace: float = 3.0
    """Seconds a work item waits for the conductor the hash ring chose before any may take it."""
    async_poll_interval: float = 1.0
    """Seconds between checks of a node waiting on an asynchronous step."""
    takeover_interval: float = 10.0
    """Seconds between checks for nodes and work left by dead conductors; 0 disables."""
    allocation_takeover_interval: float = 60.0
    """Seconds between adoptions of allocations whose conductor died; 0 disables."""
    sync_power_interval: float = 60.0
    """Seconds between power-state syncs of idle nodes; 0 disables."""
    force_power_state_during_sync: bool = False
    """On drift, set the hardware back to the recorded power state.

    Off by default: the hardware's state is then recorded (and the drift
    written to the node's history), so a node switched on by hand is not
    switched off behind the operator's back. Ironic's option of the same name.
    """
    sync_power_read_deadline: float = Field(default=30.0, gt=0, le=600)
    """Seconds one node's power read may take during a sync, in all; a BMC that has not
    answered by then is cut off and its read fails this round (the BMC guard's breaker
    counts it), so a silent BMC holds a sync worker no longer than this."""
    sync_power_workers: int = 8
    """Power reads at once during a sync: hides BMC latency without flooding the BMC network."""
    enabled_hardware_types: list[str] = Field(
        default_factory=lambda: ["fake-hardware", "ipmi", "redfish", "idrac", "manual-management"]
    )
    """Hardware types this conductor can drive (default: every shipped one)."""
    automated_clean: bool = True
    """Run automated cleaning on provide and after undeploy (node ``automated_clean`` overrides)."""
    deploy_callback_timeout: float = 1800.0
    """Seconds a node may wait in ``wait call-back`` before the deploy fails."""
    clean_callback_timeout: float = 1800.0
    """Seconds a node may wait in ``clean wait`` before the clean fails."""
    rescue_callback_timeout: float = Field(default=1800.0, gt=0)
    """Seconds a node may wait in ``rescue wait`` for its rescue system before the
    rescue fails."""
    agent_heartbeat_timeout: int = 300
    """Seconds without a heartbeat after which the ramdisk agent is taken for dead.

    Handed to the agent at lookup (it heartbeats every 30-60 % of it), and
    the limit after which a running agent step fails naming the last heartbeat.
    """
    agent_command_timeout: float = 60.0
    """Seconds to wait for the agent's HTTP API to answer one request."""
    agent_power_off_timeout: float = 30.0
    """Seconds the agent's own power-off (end of a deployment) may take before the BMC's."""
    fast_track: bool = False
    """Keep the ramdisk agent running between flows (Ironic's ``fast_track``): an
    inspection or a cleaning that succeeds leaves the node on with its agent, and the
    next cleaning or deployment uses that agent instead of rebooting into a new one.
    A node's ``driver_info/fast_track`` (true or false) overrides this. Needs a
    provisioning network the agent stays reachable on between flows."""
    fast_track_timeout: float = Field(default=300.0, gt=0, le=86400.0)
    """Seconds a kept agent may stay idle (no flow using it) before its node is powered
    off and the agent's session ended."""
    clean_step_priority_override: StepPriorities = Field(default_factory=dict)
    """Clean steps' priorities instead of their defaults, written as ``interface.step:priority``
    entries (``["deploy.erase_devices:0"]``) and held as ``{"deploy.erase_devices": 0}``."""
    deploy_step_priority_override: StepPriorities = Field(default_factory=dict)
    """The same, for deploy steps."""
    default_resource_class: str | None = None
    """Resource class given to nodes created without one."""
    rollout_interval: float = Field(default=2.0, ge=0, le=300.0)
    """Seconds between rounds of the conductor that advances rollouts (one at a time:
    the ``rollouts`` singleton role): how soon a finished node's wave moves on. 0: this
    conductor never advances them (others may)."""
    default_portgroup_mode: str = "active-backup"
    """Bonding mode given to port groups created without one (Ironic's default)."""
    inspection: InspectionSettings = Field(default_factory=InspectionSettings)
    coordination: CoordinationSettings = Field(default_factory=CoordinationSettings)
    netboot: NetbootSettings = Field(default_factory=NetbootSettings)


class Settings(BaseSettings):
    """Everything metalforge can be told."""

    model_config = SettingsConfigDict(
        env_prefix="METALFORGE_", env_nested_delimiter="__", extra="forbid"
    )

    state_dir: Path = Path("var")
    """Directory for local state (the SQLite database, logs)."""
    log_level: str = "INFO"
    """Python logging level for every role."""
    api: ApiSettings = Field(default_factory=ApiSettings)
    keystone_authtoken: dict[str, Any] = Field(default_factory=dict, repr=False)
    """keystonemiddleware ``auth_token`` options for ``api.auth_strategy = "keystone"``.

    The same keys as Ironic's ``[keystone_authtoken]`` section
    (``www_authenticate_uri``, ``auth_type``, ``auth_url``, ``username``,
    ``password``, ``project_name``, ``user_domain_name``, ...). Never logged.
    """
    inspector: InspectorSettings = Field(default_factory=InspectorSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    conductor: ConductorSettings = Field(default_factory=ConductorSettings)
    pxe_filter: PxeFilterSettings = Field(default_factory=PxeFilterSettings)
    dhcp: DhcpSettings = Field(default_factory=DhcpSettings)

    @model_validator(mode="after")
    def _database_in_state_dir(self) -> Settings:
        """With no database URL, the embedded SQLite database lives in ``state_dir``;
        with no image cache directory, the deploy images too."""
        if not self.database.url:
            self.database.url = f"sqlite:///{self.state_dir / 'metalforge.sqlite'}"
        netboot = self.conductor.netboot
        if netboot.image_cache_dir is None:
            netboot.image_cache_dir = self.state_dir / "boot-images"
        api = self.api
        host, port = (api.agent_host, api.agent_port) if api.agent_host else (api.host, api.port)
        if netboot.http_url is None and host not in ("0.0.0.0", "::", ""):
            scheme = "https" if api.tls_cert_file else "http"
            shown = f"[{host}]" if ":" in host else host
            netboot.http_url = f"{scheme}://{shown}:{port}"
        self._check_dhcp()
        return self

    def _check_dhcp(self) -> None:
        """The DHCP service answers only whom the PXE filter lets through, and tells iPXE
        where its script is: it needs a filter and a URL nodes can reach."""
        dhcp = self.dhcp
        if dhcp.state_dir is None:
            dhcp.state_dir = self.state_dir / "dhcp"
        if not dhcp.enabled:
            return
        if self.pxe_filter.driver == "noop":
            raise ValueError(
                "dhcp.enabled needs a pxe_filter.driver (dnsmasq, or nftables on "
                "dhcp.interface): without one it would answer every machine on the network"
            )
        if self.pxe_filter.driver != "dnsmasq" and self.pxe_filter.interface != dhcp.interface:
            raise ValueError(
                f"pxe_filter.interface ({self.pxe_filter.interface}) must be dhcp.interface "
                f"({dhcp.interface}): the firewall filters the DHCP service's interface"
            )
        if self.conductor.netboot.http_url is None:
            raise ValueError(
                "dhcp.enabled needs conductor.netboot.http_url (api.agent_host is a "
                "wildcard): iPXE must be told where its script is"
            )
        if self.pxe_filter.driver == "dnsmasq" and self.pxe_filter.dnsmasq_pid_file is None:
            # The filter sends the dnsmasq it empties the directory of a SIGHUP.
            self.pxe_filter.dnsmasq_pid_file = dhcp.state_dir / "dnsmasq.pid"
        written = {
            "dhcp.state_dir": dhcp.state_dir,
            "dhcp.tftp_root": dhcp.tftp_root,
            "pxe_filter.dnsmasq_hostsdir": self.pxe_filter.dnsmasq_hostsdir,
            "pxe_filter.dnsmasq_pid_file": self.pxe_filter.dnsmasq_pid_file,
        }
        for name, path in written.items():
            # One option per line in dnsmasq's configuration, which has no quoting.
            if path is not None and not str(path).isprintable():
                raise ValueError(f"{name} must not contain control characters")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Read settings from ``config_file`` (TOML), the environment and ``overrides``.

    A missing file given explicitly is an error: a typo in a path must not
    silently start a service on defaults.
    """
    if config_file is None:
        return Settings(**overrides)
    if not config_file.is_file():
        raise FileNotFoundError(f"configuration file {config_file} does not exist")
    bound = type(
        "FileSettings",
        (Settings,),
        {"model_config": SettingsConfigDict(**{**Settings.model_config, "toml_file": config_file})},
    )
    settings: Settings = bound(**overrides)
    return settings
