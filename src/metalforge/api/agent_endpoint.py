"""The agents' endpoint: the same application, reachable from the provisioning network.

Ramdisk agents run on machines the operator does not trust yet, on a network
of their own. Ironic serves them from its full API; metalforge can instead
listen on a second address (``api.agent_host``) where only the agent's calls
are answered, so the provisioning network never reaches the operator API,
and the operator API can stay on loopback with ``noauth``.
"""

from __future__ import annotations

from typing import Any

from metalforge.api.errors import routing_error_body

Scope = dict[str, Any]
ASGIApp = Any

_EXACT = frozenset({"/", "/v1", "/v1/", "/v1/lookup"})
_PREFIXES = ("/v1/heartbeat/",)


def is_agent_path(path: str) -> bool:
    """The paths ironic-python-agent calls: version discovery, lookup, heartbeat."""
    return path in _EXACT or path.startswith(_PREFIXES)


class AgentEndpointFilter:
    """Answers 404 to anything but the agent's paths when it arrives on the agents' socket."""

    def __init__(self, app: ASGIApp, agent_host: str, agent_port: int) -> None:
        self.app = app
        self.agent_port = agent_port
        # A wildcard address is told apart by its port alone.
        self.agent_host = None if agent_host in ("0.0.0.0", "::", "") else agent_host

    def _on_agent_socket(self, scope: Scope) -> bool:
        server = scope.get("server")
        if not server or server[1] is None or int(server[1]) != self.agent_port:
            return False
        return self.agent_host is None or server[0] == self.agent_host

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and self._on_agent_socket(scope)
            and not is_agent_path(scope["path"])
        ):
            body = routing_error_body(404, "The resource could not be found.")
            await send(
                {
                    "type": "http.response.start",
                    "status": 404,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
