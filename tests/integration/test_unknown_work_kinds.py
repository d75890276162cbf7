"""During a rolling upgrade an older conductor meets work of a kind it does not know.

A newer API queues an item of a kind added in its release while only an
older conductor runs (here: a conductor that does not know the kind). The
older conductor leaves it alone, dead-letters nothing and goes on with the
work it knows; once a conductor that knows the kind runs, that one does it.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from metalforge.conductor import dispatch
from metalforge.db import queue
from metalforge.db.models import WorkItem
from tests.support.api import make_available, provision, wait_for_state, wait_until
from tests.support.stack import Stack

NEWER_KIND = "vmedia_attach"
"""A kind this release added: the older conductor is this one without it."""


def test_an_older_conductor_leaves_a_newer_kind_for_a_newer_conductor(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = stack.client
    older = tuple(kind for kind in dispatch.KNOWN_KINDS if kind != NEWER_KIND)
    monkeypatch.setattr(dispatch, "KNOWN_KINDS", older)
    node = make_available(client)
    other = make_available(client)
    body = {"device_type": "cdrom", "image_url": "http://images.example.com/x.iso"}
    attach = client.post(
        f"/v1/nodes/{node['uuid']}/vmedia",
        json={**body, "image_download_source": "http"},
        headers={"X-OpenStack-Ironic-API-Version": "latest"},
    )
    assert attach.status_code == 204, attach.text
    # The older conductor goes on with the work it knows ...
    assert provision(client, other["uuid"], "active").status_code == 202
    wait_for_state(client, other["uuid"], "active")
    # ... and has neither run nor buried the newer kind.
    with stack.db.read() as session:
        item = session.scalars(select(WorkItem).where(WorkItem.kind == NEWER_KIND)).one()
        assert (item.state, item.attempts, item.failures) == (queue.PENDING, 0, 0)
    # A newer conductor (this one, knowing every kind again) does it.
    monkeypatch.setattr(dispatch, "KNOWN_KINDS", (*older, NEWER_KIND))
    stack.conductor.ctx.waker.notify()

    def attached() -> bool:
        answer = client.get(
            f"/v1/nodes/{node['uuid']}/vmedia", headers={"X-OpenStack-Ironic-API-Version": "latest"}
        )
        return any(d["inserted"] for d in answer.json())

    wait_until("the newer conductor attached the image", attached)
    with stack.db.read() as session:
        item = session.scalars(select(WorkItem).where(WorkItem.kind == NEWER_KIND)).one()
        assert (item.state, item.failures) == (queue.DONE, 0)
