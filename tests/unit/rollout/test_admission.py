"""The admission gate's formula, case by case."""

from __future__ import annotations

from fleetrl.rollout.admission import may_admit

GATE = {"batch": 16, "group_size": 8, "max_groups": 8}


def admitted_groups(held: int, submitted: int, dropped: int, max_staleness: int) -> int:
    """How many groups the gate lets start in a row from these counters."""
    in_flight = 0
    while may_admit(held, submitted, dropped, in_flight, max_staleness=max_staleness, **GATE):
        in_flight += 1
    return in_flight


def test_synchronous_gate_admits_exactly_one_batch_per_version():
    # O = 0: at version 0 one batch (2 groups), nothing more until version 1.
    assert admitted_groups(held=0, submitted=0, dropped=0, max_staleness=0) == 2
    assert admitted_groups(held=0, submitted=16, dropped=0, max_staleness=0) == 0
    assert admitted_groups(held=1, submitted=16, dropped=0, max_staleness=0) == 2


def test_staleness_bound_adds_one_batch_per_version_of_slack():
    assert admitted_groups(held=0, submitted=0, dropped=0, max_staleness=1) == 4
    assert admitted_groups(held=0, submitted=0, dropped=0, max_staleness=2) == 6
    # Samples already handed in use up the budget.
    assert admitted_groups(held=0, submitted=24, dropped=0, max_staleness=1) == 1


def test_dropped_samples_are_given_back():
    assert admitted_groups(held=0, submitted=32, dropped=0, max_staleness=1) == 0
    assert admitted_groups(held=0, submitted=32, dropped=16, max_staleness=1) == 2


def test_concurrency_cap_holds_whatever_the_budget():
    assert admitted_groups(held=100, submitted=0, dropped=0, max_staleness=1) == GATE["max_groups"]


def test_a_partial_group_of_budget_is_not_enough():
    # 15 samples of budget left with groups of 8: one group, not two.
    assert may_admit(0, 17, 0, 0, max_staleness=1, **GATE)
    assert not may_admit(0, 17, 0, 1, max_staleness=1, **GATE)
