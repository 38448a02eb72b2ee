"""The group rule: failed episodes are counted by reason; a group needs 2 completed samples."""

from fleetrl.rollout.worker import MIN_GROUP, failure_reason, settle_group
from fleetrl.types import Trajectory


def sample(reward: float) -> Trajectory:
    return Trajectory("t", [], reward, "finish", turns=1, tool_calls=1, tool_errors=0, duration_s=1)


def test_a_group_without_failures_is_whole():
    outcomes = [sample(1.0), sample(0.0), sample(1.0)]
    result = settle_group(outcomes)
    assert result.trajectories == outcomes
    assert result.failures == {} and not result.dropped


def test_a_group_keeps_its_completed_episodes_when_two_remain():
    outcomes = [sample(1.0), RuntimeError("engine step failed"), sample(0.0), OSError()]
    result = settle_group(outcomes)
    assert result.trajectories == [outcomes[0], outcomes[2]]
    assert result.failures == {"RuntimeError: engine step failed": 1, "OSError": 1}
    assert not result.dropped


def test_a_group_with_fewer_than_two_completed_episodes_is_dropped_but_counted():
    assert MIN_GROUP == 2
    outcomes = [sample(1.0), TimeoutError("verify"), TimeoutError("verify")]
    result = settle_group(outcomes)
    assert result.dropped and result.trajectories == []
    assert result.failures == {"TimeoutError: verify": 2}
    everything_failed = settle_group([ValueError("x"), ValueError("x")])
    assert everything_failed.dropped and everything_failed.failures == {"ValueError: x": 2}


def test_failure_reasons_are_short_and_group_alike_errors():
    long = RuntimeError("sandbox did not start: " + "x" * 200 + "\nsecond line")
    reason = failure_reason(long)
    assert reason.startswith("RuntimeError: sandbox did not start: ")
    assert len(reason) == len("RuntimeError: ") + 80 and "second line" not in reason
    assert failure_reason(KeyError()) == "KeyError"
    assert failure_reason(ValueError("  \n ")) == "ValueError"
