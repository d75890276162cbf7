"""The introspection state machine: every (state, event) pair."""

from __future__ import annotations

import itertools

import pytest

from metalforge import inspection_states as ins

EXPECTED = {
    (None, ins.START): ins.STARTING,
    (ins.STARTING, ins.START): ins.STARTING,
    (ins.STARTING, ins.WAIT): ins.WAITING,
    (ins.STARTING, ins.FAIL): ins.ERROR,
    (ins.STARTING, ins.ABORT): ins.ERROR,
    (ins.STARTING, ins.TIMEOUT): ins.ERROR,
    (ins.WAITING, ins.WAIT): ins.WAITING,
    (ins.WAITING, ins.TIMEOUT): ins.ERROR,
    (ins.WAITING, ins.ABORT): ins.ERROR,
    (ins.WAITING, ins.CONTINUE): ins.PROCESSING,
    (ins.WAITING, ins.FAIL): ins.ERROR,
    (ins.PROCESSING, ins.CONTINUE): ins.ERROR,
    (ins.PROCESSING, ins.FINISH): ins.FINISHED,
    (ins.PROCESSING, ins.FAIL): ins.ERROR,
    (ins.FINISHED, ins.START): ins.STARTING,
    (ins.FINISHED, ins.ABORT): ins.ERROR,
    (ins.FINISHED, ins.REAPPLY): ins.REAPPLYING,
    (ins.ERROR, ins.START): ins.STARTING,
    (ins.ERROR, ins.ABORT): ins.ERROR,
    (ins.ERROR, ins.REAPPLY): ins.REAPPLYING,
    (ins.REAPPLYING, ins.FINISH): ins.FINISHED,
    (ins.REAPPLYING, ins.FAIL): ins.ERROR,
    (None, ins.ENROLL): ins.ENROLLING,
    (ins.ENROLLING, ins.CONTINUE): ins.PROCESSING,
    (ins.ENROLLING, ins.FAIL): ins.ERROR,
}
"""Written out independently of the module's table, so a change to either is caught."""

PAIRS = list(itertools.product((None, *ins.STATES), ins.EVENTS))


@pytest.mark.parametrize(("source", "event"), PAIRS, ids=[f"{s}-{e}" for s, e in PAIRS])
def test_every_pair(source: str | None, event: str) -> None:
    step = ins.advance(source, event)
    if (source, event) in EXPECTED:
        assert not step.refused
        assert step.target == EXPECTED[(source, event)]
        assert ins.allowed(source, event)
    elif event == ins.TIMEOUT:
        # A timeout the record moved past is stale: nothing changes.
        assert step.target is None
        assert not step.refused
    else:
        # Out of place: consumed, and the record goes to error with the reason.
        assert step.refused
        assert step.target == ins.ERROR
        assert ("report" if event == ins.CONTINUE else event) in step.reason()
        assert not ins.allowed(source, event)


def test_the_table_is_exactly_the_expected_one() -> None:
    assert {(s, e): t for s, e, t in ins.transitions()} == EXPECTED


def test_a_report_delivered_again_is_never_processed_twice() -> None:
    first = ins.advance(ins.WAITING, ins.CONTINUE)
    assert first.target == ins.PROCESSING
    again = ins.advance(first.target, ins.CONTINUE)
    assert again.target == ins.ERROR
    assert "not processed twice" in again.reason()
    after = ins.advance(ins.FINISHED, ins.CONTINUE)
    assert after.refused
    assert after.target == ins.ERROR


def test_finished_and_error_accept_a_new_start() -> None:
    assert ins.advance(ins.FINISHED, ins.START).target == ins.STARTING
    assert ins.advance(ins.ERROR, ins.START).target == ins.STARTING


def test_unknown_events_and_states_are_programming_errors() -> None:
    with pytest.raises(ValueError, match="unknown introspection event"):
        ins.advance(ins.WAITING, "explode")
    with pytest.raises(ValueError, match="unknown introspection state"):
        ins.advance("sleeping", ins.START)


def test_finished_and_error_are_not_active() -> None:
    assert ins.FINISHED not in ins.ACTIVE
    assert ins.ERROR not in ins.ACTIVE


def test_after_refuses_what_the_table_does_not_allow() -> None:
    assert ins.after(ins.STARTING, ins.WAIT) == ins.WAITING
    with pytest.raises(ValueError, match="not allowed"):
        ins.after(ins.FINISHED, ins.WAIT)
    with pytest.raises(ValueError, match="timeout is not allowed"):
        ins.after(ins.FINISHED, ins.TIMEOUT)  # stale is not a move either
