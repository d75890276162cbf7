"""A deploy plan naming the agent's own steps is completed once, after the agent booted.

The node is a ``custom-agent`` one whose deployment has just finished its
boot step (``deploy.deploy``): the agent's reported steps are cached, the
stored plan is provisional. ``stepflow.run`` completes it before going on,
or fails the deployment naming why it cannot.
"""

from __future__ import annotations

from typing import Any

from metalforge import states
from metalforge.conductor import stepflow
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.reservations import acquire
from metalforge.conductor.step_plans import Step
from metalforge.config import ConductorSettings
from metalforge.db import flow_progress
from metalforge.db.engine import Database
from metalforge.db.flow_progress import FlowProgress
from metalforge.db.models import Conductor, Node, NodeHistory, utcnow
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.hardware import DriverRegistry

BOOT = Step("deploy", "deploy", 100, asynchronous=True)
PROVISIONAL = (
    BOOT,
    Step("deploy", "prepare_instance_boot", 60),
    Step("deploy", "tear_down_agent", 40),
    Step("deploy", "boot_instance", 20),
)
REQUESTED = {"interface": "deploy", "step": "install_coreos", "args": {}, "priority": 80}


def _agent_step(step: str, priority: int = 0, **extra: Any) -> dict[str, Any]:
    return {"interface": "deploy", "step": step, "priority": priority, "argsinfo": {}, **extra}


def _stack(
    db_url: str, cached: list[dict[str, Any]], requested: tuple[dict[str, Any], ...]
) -> tuple[ConductorContext, int]:
    db = Database(db_url)
    db.upgrade()
    with db.write() as session:
        session.add(Conductor(hostname="c1", drivers=["fake-hardware"], heartbeat_at=utcnow()))
        node = Node(
            uuid="00000000-0000-0000-0000-000000000001",
            driver="fake-hardware",
            deploy_interface="custom-agent",
            provision_state=states.DEPLOYING,
            target_provision_state=states.ACTIVE,
            driver_internal_info={"agent_cached_deploy_steps": cached},
            epoch=0,
        )
        session.add(node)
        session.flush()
        progress = FlowProgress(
            flow="deploy",
            plan=tuple(s.to_record() for s in PROVISIONAL),
            step_index=1,  # deploy.deploy has run
            requested=requested,
            completes_after="deploy.deploy",
        )
        flow_progress.write(session.connection(), node.id, progress)
        node_id = node.id
    ctx = ConductorContext(
        hostname="c1",
        db=db,
        drivers=DriverRegistry(HARDWARE_TYPES.values()),
        settings=ConductorSettings(hostname="c1"),
    )
    return ctx, node_id


def _run(ctx: ConductorContext, node_id: int) -> tuple[Node, FlowProgress, list[str]]:
    try:
        with acquire(ctx, node_id, "deploy") as task:
            stepflow.run(task, stepflow.DEPLOY)
        return _read(ctx, node_id)
    finally:
        ctx.db.dispose()


def _read(ctx: ConductorContext, node_id: int) -> tuple[Node, FlowProgress, list[str]]:
    with ctx.db.read() as session:
        node = session.get_one(Node, node_id)
        progress = flow_progress.load(session.connection(), node_id)
        events = [
            h.event
            for h in session.query(NodeHistory).filter_by(node_id=node_id).order_by(NodeHistory.id)
        ]
    return node, progress, events


def test_the_requested_agent_step_runs_next_and_the_plan_is_final(db_url: str) -> None:
    ctx, node_id = _stack(db_url, [_agent_step("install_coreos")], (REQUESTED,))
    node, _progress, events = _run(ctx, node_id)
    completed = [e for e in events if "plan completed" in e]
    assert completed == [
        "deploy plan completed with the ramdisk agent's steps: deploy.install_coreos(80); "
        "5 steps in all"
    ]
    # The agent's step is started next (no agent answers here: the flow fails on it,
    # which shows it was the step the completed plan ran after the boot step).
    assert node.provision_state == states.DEPLOY_FAILED
    assert (node.last_error or "").startswith("deploy step deploy.install_coreos failed")
    assert any("deploy.install_coreos started (priority 80, step 2 of 5)" in e for e in events)


def test_a_step_the_agent_does_not_offer_fails_naming_what_it_offers(db_url: str) -> None:
    ctx, node_id = _stack(db_url, [_agent_step("install_rhcos")], (REQUESTED,))
    node, _progress, events = _run(ctx, node_id)
    assert node.provision_state == states.DEPLOY_FAILED
    assert node.last_error == (
        "Deploy refused once the ramdisk agent reported: deploy_steps: the node does not "
        "support the deploy step deploy.install_coreos; the ramdisk agent offers: "
        "deploy.install_rhcos"
    )
    assert not any("started" in e for e in events), "no step ran"


def test_an_agent_step_enabled_above_the_boot_step_fails_instead_of_shifting_the_plan(
    db_url: str,
) -> None:
    cached = [_agent_step("install_coreos"), _agent_step("early", 120)]
    ctx, node_id = _stack(db_url, cached, (REQUESTED,))
    node, _progress, _events = _run(ctx, node_id)
    assert node.provision_state == states.DEPLOY_FAILED
    assert "deploy.early (priority 120) would run where deploy.deploy (priority 100) " in (
        node.last_error or ""
    )
    assert 'deploy_step_priority_override "deploy.early:0"' in (node.last_error or "")


def test_an_agent_step_asking_for_a_reboot_is_refused(db_url: str) -> None:
    cached = [_agent_step("install_coreos", reboot_requested=True)]
    ctx, node_id = _stack(db_url, cached, (REQUESTED,))
    node, _progress, _events = _run(ctx, node_id)
    assert node.provision_state == states.DEPLOY_FAILED
    assert "deploy.install_coreos asks for a reboot after it" in (node.last_error or "")


def test_without_the_agents_report_the_deployment_fails_naming_the_boot_step(
    db_url: str,
) -> None:
    ctx, node_id = _stack(db_url, [], (REQUESTED,))
    with ctx.db.write() as session:
        session.get_one(Node, node_id).driver_internal_info = {}
    node, _progress, _events = _run(ctx, node_id)
    assert node.provision_state == states.DEPLOY_FAILED
    assert (node.last_error or "").startswith(
        "Deploy cannot go on after deploy.deploy: the ramdisk agent has not reported its "
        "deploy steps yet"
    )
