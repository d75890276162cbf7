"""A step flow reads only its own progress: nothing another flow left is taken as its."""

from __future__ import annotations

from metalforge import states
from metalforge.conductor import stepflow
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.reservations import acquire
from metalforge.conductor.step_plans import Step
from metalforge.config import ConductorSettings
from metalforge.db import flow_progress
from metalforge.db.engine import Database
from metalforge.db.flow_progress import NO_FLOW, FlowProgress
from metalforge.db.models import Conductor, Node, utcnow
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.hardware import DriverRegistry

STEP = {"interface": "deploy", "step": "write_image", "priority": 80, "args": {}}
ERASE = Step(interface="deploy", step="erase_devices", priority=10)


def _stack(db_url: str, progress: FlowProgress) -> tuple[ConductorContext, int]:
    db = Database(db_url)
    db.upgrade()
    with db.write() as session:
        session.add(Conductor(hostname="c1", drivers=["fake-hardware"], heartbeat_at=utcnow()))
        node = Node(
            uuid="00000000-0000-0000-0000-000000000001",
            driver="fake-hardware",
            provision_state=states.CLEANING,
            target_provision_state=states.AVAILABLE,
            epoch=0,
        )
        session.add(node)
        session.flush()
        flow_progress.write(session.connection(), node.id, progress)
        node_id = node.id
    ctx = ConductorContext(
        hostname="c1",
        db=db,
        drivers=DriverRegistry(HARDWARE_TYPES.values()),
        settings=ConductorSettings(hostname="c1"),
    )
    return ctx, node_id


def test_another_flows_leftovers_are_not_read_as_this_ones(db_url: str) -> None:
    stale = FlowProgress(flow="deploy", requested=(STEP,), ramdisk_prepared=True, step_index=4)
    ctx, node_id = _stack(db_url, stale)
    with acquire(ctx, node_id, "clean") as task:
        assert stepflow.take_requested(task, stepflow.CLEAN) == []
        assert not stepflow.has_plan(task, stepflow.CLEAN)
        stepflow.claim(task, stepflow.CLEAN)
        assert task.progress == FlowProgress(flow="clean")
        stepflow.store_plan(task, stepflow.CLEAN, [ERASE])
        task.save()
    with ctx.db.read() as session:
        stored = flow_progress.load(session.connection(), node_id)
    assert stored == FlowProgress(flow="clean", plan=(ERASE.to_record(),), step_index=0)
    assert stored.ironic_keys() == {"clean_steps": [ERASE.to_record()], "clean_step_index": 0}
    ctx.db.dispose()


def test_what_cleaning_noted_before_it_planned_is_kept(db_url: str) -> None:
    """Automated cleaning boots the ramdisk (no flow's record yet), then plans."""
    booting = FlowProgress(ramdisk_prepared=True)
    ctx, node_id = _stack(db_url, booting)
    with acquire(ctx, node_id, "clean") as task:
        stepflow.store_plan(task, stepflow.CLEAN, [])
        assert task.progress == FlowProgress(flow="clean", plan=(), ramdisk_prepared=True)
        stepflow.clear_plan(task, stepflow.CLEAN)
        assert task.progress == NO_FLOW
    ctx.db.dispose()
