"""The train record of a step: its reward curve is the policy's own, not the expert's."""

from fleetrl.store.trajectories import GroupRecord, RegionReport
from fleetrl.trainer.metrics import Ledger, RunCounters, StepTiming, train_record
from fleetrl.types import Segment, Trajectory


def episode(reward: float, guided: bool = False, tool_errors: int = 0) -> Trajectory:
    segment = Segment([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.5], [-1, 0, 0], guided=guided)
    return Trajectory("t", [segment], reward, "finish", 2, 2, tool_errors, 1.0)


def test_a_guided_groups_expert_episode_is_counted_apart_from_the_reward():
    failed = [episode(0.0, tool_errors=2), episode(0.0), episode(1.0, guided=True)]
    solved = [episode(1.0), episode(0.0)]
    groups = [GroupRecord("r", i, g, RegionReport("r", 0)) for i, g in enumerate([failed, solved])]
    record = train_record(
        groups,
        [0, 0],
        {},
        RunCounters(version=1, dropped_samples=0, skipped_groups=0),
        StepTiming(wait_s=0.0, publish_s=0.0, wall_s=1.0),
        1.0,
        Ledger(1, ["r/0", "r/1"], [], [], []),
    )
    assert record.reward == 0.25 and record.pass_rate == 0.25  # 1 of the 4 sampled episodes
    assert record.guided_samples == 1 and record.tool_errors_mean == 0.5
    assert record.samples_per_s == 5.0  # every trajectory the step consumed
