"""Online advantages (`Baselines`): each session against its task's running mean reward,
an unseen task against the mean over all tasks, the very first batch against its own
mean; a session's reward joins the baselines only after its own advantage is taken."""

import pytest

from fleetrl.trainer.advantages import Baselines


def test_the_first_batch_is_compared_with_its_own_mean() -> None:
    baselines = Baselines()
    advantages = baselines.advantages([("a", 1.0), ("b", 0.0), ("c", 0.5)], decay=0.5)
    assert advantages == pytest.approx([0.5, -0.5, 0.0])
    assert set(baselines.tasks) == {"a", "b", "c"} and baselines.overall is not None


def test_a_seen_task_against_its_running_mean_an_unseen_one_against_the_overall() -> None:
    baselines = Baselines(tasks={"a": 0.2}, overall=0.6)
    advantages = baselines.advantages([("a", 1.0), ("new", 1.0)], decay=0.5)
    assert advantages == pytest.approx([1.0 - 0.2, 1.0 - 0.6])


def test_the_update_rule_is_d_times_b_plus_one_minus_d_times_r() -> None:
    d = 0.8
    baselines = Baselines(tasks={"a": 0.5}, overall=0.25)
    baselines.advantages([("a", 1.0)], decay=d)
    assert baselines.tasks["a"] == pytest.approx(d * 0.5 + (1 - d) * 1.0)
    assert baselines.overall == pytest.approx(d * 0.25 + (1 - d) * 1.0)
    # An unseen task starts from the overall mean as it stands, then takes its reward in.
    baselines.advantages([("b", 0.0)], decay=d)
    overall_before = d * 0.25 + (1 - d) * 1.0
    assert baselines.tasks["b"] == pytest.approx(d * overall_before)
    assert baselines.overall == pytest.approx(d * overall_before)
    # Rewards of one batch are taken in one after the other, in order.
    baselines = Baselines(tasks={"a": 0.0}, overall=0.0)
    baselines.advantages([("a", 1.0), ("a", 1.0)], decay=0.5)
    assert baselines.tasks["a"] == pytest.approx(0.75) and baselines.overall == pytest.approx(0.75)


def test_a_session_is_never_its_own_baseline() -> None:
    # Two sessions of one task in a batch: both against the baseline before the batch, not
    # one against the other (nor against themselves).
    baselines = Baselines(tasks={"a": 0.0}, overall=0.0)
    assert baselines.advantages([("a", 1.0), ("a", 1.0)], decay=0.5) == [1.0, 1.0]
    # An unseen task twice in a batch: both against the overall mean before the batch.
    baselines = Baselines(tasks={}, overall=0.5)
    assert baselines.advantages([("x", 1.0), ("x", 0.0)], decay=0.9) == pytest.approx([0.5, -0.5])
    # The first batch's rewards are taken in after its advantages: a's baseline is its own
    # reward only from the next batch on (b starts from the overall mean, 0, then).
    baselines = Baselines()
    assert baselines.advantages([("a", 0.0), ("b", 1.0)], decay=0.5) == [-0.5, 0.5]
    assert baselines.tasks == {"a": 0.0, "b": 0.5} and baselines.overall == 0.5
    assert baselines.advantages([("a", 1.0)], decay=0.5) == [1.0]


def test_no_rewards_change_nothing() -> None:
    baselines = Baselines(tasks={"a": 0.3}, overall=0.4)
    assert baselines.advantages([], decay=0.5) == []
    assert baselines == Baselines(tasks={"a": 0.3}, overall=0.4)
