"""The agents' endpoint: the same application, reachable from the provisioning network.

Ramdisk agents run on machines the operator does not trust yet, on a network
of their own. Ironic serves them from its full API; metalforge can instead
listen on a second address (``api.agent_host``) where only the agent's calls
are answered, so the provisioning network never reaches the operator API,
and the operator API can stay on loopback with ``noauth``.
"""

from __future__ import annotations

import ipaddress
import socket

from starlette.types import ASGIApp, Receive, Scope, Send

from metalforge.api.errors import routing_error_body, send_json_error

_EXACT = frozenset(
    {"/", "/v1", "/v1/", "/v1/lookup", "/v1/heartbeat", "/v1/continue_inspection", "/boot.ipxe"}
)
_PREFIXES = ("/v1/heartbeat/", "/boot/")


def is_agent_path(path: str) -> bool:
    """The paths ironic-python-agent calls (version discovery, lookup, heartbeat and
    the inspection report), and those a network-booting machine fetches its iPXE
    scripts and deploy images from."""
    return path in _EXACT or path.startswith(_PREFIXES)


def is_ramdisk_action(path: str) -> bool:
    """The agents' paths that act on a node (lookup, heartbeat, an inspection report);
    version discovery aside, which every client reads."""
    return is_agent_path(path) and path not in ("/", "/v1", "/v1/")


def _canonical(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def operator_addresses(host: str, port: int) -> frozenset[tuple[str, int]]:
    """Every (address, port) the operator API's socket may report as its own."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        infos = []
    found = {(_canonical(str(info[4][0])), port) for info in infos}
    found.add((_canonical(host), port))
    return frozenset(found)


class AgentEndpointFilter:
    """Only the operator API's own socket serves everything; any other, only the agent's paths.

    Fails closed: a request is let through to the whole API only when the
    socket it arrived on is the operator API's (``api.host``/``api.port``).
    Comparing with the agents' address instead would open the whole API to
    the provisioning network whenever the configured name and the socket's
    address differ (a host name, an IPv6 address written another way).
    """

    def __init__(
        self,
        app: ASGIApp,
        operator: frozenset[tuple[str, int]],
        *,
        operator_serves_ramdisk: bool = True,
    ) -> None:
        self.app = app
        self.operator = operator
        self.operator_serves_ramdisk = operator_serves_ramdisk

    def _on_operator_socket(self, scope: Scope) -> bool:
        server = scope.get("server")
        if not server or server[1] is None:
            return False
        return (_canonical(str(server[0])), int(server[1])) in self.operator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = False
        if scope["type"] == "http":
            path = scope["path"]
            if self._on_operator_socket(scope):
                # api.enable_ramdisk_endpoints = false: agents reach only their own address.
                refused = not self.operator_serves_ramdisk and is_ramdisk_action(path)
            else:
                refused = not is_agent_path(path)
        if refused:
            body = routing_error_body(404, "The resource could not be found.")
            await send_json_error(send, 404, body)
            return
        await self.app(scope, receive, send)
