"""Metal3's baremetal-operator (BMO) as metalforge's client, for replaying its calls.

BMO talks to Ironic through gophercloud: it negotiates the microversion from
the root document (it needs 1.89 or later and picks 1.110, 1.109, 1.95, 1.93
or 1.89), sends both version headers on every call, builds JSON patches of
``add`` operations (``remove`` only for a key that is there; never a null
value) and decodes each answer into Go structs, where a field of the wrong
JSON type fails the whole call. ``Bmo`` does the same with the test client,
so a replayed call fails where BMO's would. The calls and their order are
read from BMO's ``pkg/provisioner/ironic`` (registration, inspection,
provisioning, power, deprovisioning, deletion).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.testclient import TestClient

_CHOICES = ((1, 110), (1, 109), (1, 95), (1, 93), (1, 89))
"""The microversions BMO asks for, by what the server offers."""

NODE_FIELDS: dict[str, tuple[type, ...]] = {
    "uuid": (str,),
    "name": (str, type(None)),
    "power_state": (str, type(None)),
    "target_power_state": (str, type(None)),
    "provision_state": (str,),
    "target_provision_state": (str, type(None)),
    "maintenance": (bool,),
    "maintenance_reason": (str, type(None)),
    "fault": (str, type(None)),
    "last_error": (str, type(None)),
    "reservation": (str, type(None)),
    "driver": (str,),
    "driver_info": (dict,),
    "properties": (dict,),
    "instance_info": (dict,),
    "instance_uuid": (str, type(None)),
    "deploy_interface": (str, type(None)),
    "inspect_interface": (str, type(None)),
    "raid_interface": (str, type(None)),
    "boot_interface": (str, type(None)),
    "automated_clean": (bool, type(None)),
    "network_data": (dict,),
    "disable_power_off": (bool,),
    "retired": (bool,),
    "boot_mode": (str, type(None)),
    "secure_boot": (bool, type(None)),
    "inspection_started_at": (str, type(None)),
    "inspection_finished_at": (str, type(None)),
    "clean_step": (dict,),
    "deploy_step": (dict,),
}
"""The node fields BMO reads (gophercloud's ``nodes.Node``) and the JSON types they
decode from."""


def decoded_node(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` checked as gophercloud decodes a node: every field BMO reads is there
    with a JSON type its struct takes."""
    for name, kinds in NODE_FIELDS.items():
        assert name in body, f"the node has no {name}"
        assert isinstance(body[name], kinds), f"{name} is {body[name]!r}, not {kinds}"
    return dict(body)


class Bmo:
    """The calls BMO makes, with its headers and its way of building patches."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.version = self._negotiate()
        self.headers = {
            "X-OpenStack-Ironic-API-Version": f"{self.version[0]}.{self.version[1]}",
            "OpenStack-API-Version": f"baremetal {self.version[0]}.{self.version[1]}",
        }
        drivers = self.get("/v1/drivers")
        assert drivers.status_code == 200, drivers.text
        assert drivers.json()["drivers"], "BMO waits while no driver is loaded"

    def _negotiate(self) -> tuple[int, int]:
        """What gophercloud reads from ``GET /v1/`` (sent without version headers)."""
        root = self.client.get("/v1/")
        assert root.status_code == 200, root.text
        found = root.json()["version"]
        newest = tuple(int(part) for part in found["version"].split("."))
        assert newest >= (1, 89), "BMO refuses an Ironic older than 1.89"
        return next(choice for choice in _CHOICES if newest >= choice)

    def get(self, path: str) -> Any:
        return self.client.get(path, headers=getattr(self, "headers", {}))

    def post(self, path: str, body: Any) -> Any:
        return self.client.post(path, json=body, headers=self.headers)

    def put(self, path: str, body: Any) -> Any:
        return self.client.put(path, json=body, headers=self.headers)

    def delete(self, path: str, body: Any = None) -> Any:
        return self.client.request("DELETE", path, json=body, headers=self.headers)

    def node(self, ident: str) -> dict[str, Any]:
        answer = self.get(f"/v1/nodes/{ident}")
        assert answer.status_code == 200, answer.text
        return decoded_node(answer.json())

    def update(self, node: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
        """BMO's ``tryUpdateNode``: an ``add`` for each path whose value differs, a
        ``remove`` for a None on a key that is there, nothing for the rest."""
        ops: list[dict[str, Any]] = []
        for path, value in wanted.items():
            current = _at(node, path)
            if value is None:
                if current is not _MISSING:
                    ops.append({"op": "remove", "path": path})
            elif current != value:
                ops.append({"op": "add", "path": path, "value": value})
        if not ops:
            return dict(node)
        answer = self.client.patch(f"/v1/nodes/{node['uuid']}", json=ops, headers=self.headers)
        assert answer.status_code == 200, answer.text
        return decoded_node(answer.json())

    def provision(self, ident: str, target: str, **extra: Any) -> None:
        answer = self.put(f"/v1/nodes/{ident}/states/provision", {"target": target, **extra})
        assert answer.status_code == 202, answer.text

    def power(self, ident: str, target: str, **extra: Any) -> None:
        answer = self.put(f"/v1/nodes/{ident}/states/power", {"target": target, **extra})
        assert answer.status_code == 202, answer.text


_MISSING = object()


def _at(node: Mapping[str, Any], path: str) -> Any:
    """The value at a JSON-pointer ``path`` of the node (``_MISSING`` if absent)."""
    value: Any = node
    for key in path.strip("/").split("/"):
        if not isinstance(value, Mapping) or key not in value:
            return _MISSING
        value = value[key]
    return value
