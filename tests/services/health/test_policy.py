"""The health policy table and ``decide``: buckets, strikes, windows, intermittent faults."""

from __future__ import annotations

import pytest

from services.health import POLICY, Action, Observation, decide, signal_of_xid
from services.health.policy import (
    CHECK_FAILED,
    DAY_S,
    HOUR_S,
    MISSED_HEARTBEATS,
    OFF_BUS,
    XID_APPLICATION,
    XID_NEEDS_RESET,
    XID_UNKNOWN,
    xid,
)

NOW = 1_000_000.0


def action_of(observations: list[Observation]) -> Action | None:
    decision = decide(observations, NOW)
    return None if decision is None else decision.action


def seen(signal: str, *ago_s: float, gpu: int | None = 0) -> list[Observation]:
    return [Observation(signal, NOW - ago, gpu) for ago in ago_s]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        *((code, Action.NOTIFY_TENANT) for code in sorted(XID_APPLICATION)),
        *((code, Action.DRAIN_NOW) for code in sorted(XID_NEEDS_RESET)),
        (48, Action.DRAIN_NOW),
        (63, Action.NOTIFY_TENANT),
        (64, Action.RMA),
        (74, Action.DRAIN_AFTER_JOB),
        (79, Action.REPAIR),
        (92, Action.NOTIFY_TENANT),
        (154, Action.DRAIN_NOW),
        (999, Action.NOTIFY_TENANT),
    ],
)
def test_one_xid_is_acted_on_by_its_bucket(code: int, expected: Action) -> None:
    assert action_of(seen(signal_of_xid(code), 60)) is expected


def test_strikes_count_only_within_the_window() -> None:
    assert action_of(seen(xid(48), 60, 3 * DAY_S)) is Action.RMA
    assert action_of(seen(xid(48), 60, 8 * DAY_S)) is Action.DRAIN_NOW
    # The old strike alone is past every window of XID 48.
    assert decide(seen(xid(48), 8 * DAY_S), NOW) is None


def test_an_intermittent_fault_is_not_treated_as_healthy() -> None:
    """Failed, passed (no strike), failed again: two strikes in the window, not a reset count."""
    assert action_of(seen(CHECK_FAILED, 2 * HOUR_S)) is Action.DRAIN_AFTER_JOB
    assert action_of(seen(CHECK_FAILED, 2 * HOUR_S, 3 * DAY_S)) is Action.QUARANTINE


def test_strikes_are_counted_per_gpu() -> None:
    spread = [o for gpu in range(3) for o in seen(xid(31), 60, gpu=gpu)]
    assert action_of(spread) is Action.NOTIFY_TENANT
    one_gpu = decide(seen(xid(31), 60, 2 * HOUR_S, 5 * HOUR_S, gpu=4), NOW)
    assert one_gpu is not None
    assert (one_gpu.action, one_gpu.gpu) == (Action.DRAIN_AFTER_JOB, 4)


def test_the_fault_is_when_the_strikes_first_sufficed_for_a_removal() -> None:
    """A GPU off the bus 10 minutes ago, and the node missing beats since (its agent down): the
    decision is the XID's, and so is its time, not the later strike of another signal. XID 48
    an hour and a half ago (drain now) and again a minute ago (RMA): the fault is the first,
    when the node could no longer run work, though the evidence is the second's rule."""
    strikes = [*seen(xid(79), 600, gpu=2), *seen(MISSED_HEARTBEATS, 60, gpu=None)]
    decision = decide(strikes, NOW)
    assert decision is not None
    assert (decision.action, decision.gpu, decision.at_s) == (Action.REPAIR, 2, NOW - 600)
    twice = decide(seen(xid(48), 5400, 60), NOW)
    assert twice is not None
    assert (twice.action, twice.at_s) == (Action.RMA, NOW - 5400)
    # A decision that takes nothing from the tenant is timed when its own rule's strikes sufficed.
    third = decide(seen(xid(31), 60, 2 * HOUR_S, 5 * HOUR_S, gpu=4), NOW)
    assert third is not None
    assert (third.action, third.at_s) == (Action.DRAIN_AFTER_JOB, NOW - 60)


def test_a_job_faulting_on_every_retry_is_one_strike_not_three() -> None:
    """Page faults minutes apart on one GPU are a job retrying into its own bug: they count
    once an hour, so three in ten minutes only tell the tenant; three hours apart drain."""
    retries = seen(xid(31), 60, 300, 600, gpu=2)
    assert action_of(retries) is Action.NOTIFY_TENANT
    # Spacing counts from the last strike counted: at 0, 50 and 70 minutes only 0 and 70 count.
    assert action_of(seen(xid(31), 60, 50 * 60 + 60, 70 * 60 + 60, gpu=2)) is Action.NOTIFY_TENANT
    assert action_of(seen(xid(31), 60, 61 * 60 + 60, 122 * 60 + 60, gpu=2)) is Action.DRAIN_AFTER_JOB


def test_unnamed_xid_codes_recurring_go_to_an_operator() -> None:
    assert signal_of_xid(999) == XID_UNKNOWN == signal_of_xid(12345)
    assert action_of(seen(XID_UNKNOWN, 60, HOUR_S, 10 * HOUR_S)) is Action.QUARANTINE


def test_the_most_severe_action_wins_and_says_why() -> None:
    observations = [*seen(xid(13), 60), *seen(OFF_BUS, 120, gpu=5), *seen(xid(63), 30)]
    decision = decide(observations, NOW)
    assert decision is not None
    assert (decision.action, decision.gpu, decision.strikes) == (Action.REPAIR, 5, 1)
    assert decision.evidence == (
        "REPAIR: off_bus on GPU 5, 1 in 1 h (rule: 1 in 1 h; a GPU missing from the node: a power cycle)"
    )


def test_nothing_seen_or_seen_later_decides_nothing() -> None:
    assert decide([], NOW) is None
    assert decide([Observation(xid(48), NOW + 1, 0)], NOW) is None


def test_each_signal_escalates_with_its_strikes() -> None:
    """One rule per (signal, strikes), and more strikes never call for a milder action."""
    by_signal: dict[str, list[tuple[int, Action]]] = {}
    for rule in POLICY:
        assert (rule.strikes >= 1, rule.window_s > 0, bool(rule.why)) == (True, True, True), rule
        by_signal.setdefault(rule.signal, []).append((rule.strikes, rule.action))
    for signal, rules in by_signal.items():
        strikes = [s for s, _ in rules]
        assert len(set(strikes)) == len(strikes), signal
        actions = [a for _, a in sorted(rules)]
        assert actions == sorted(actions), signal
