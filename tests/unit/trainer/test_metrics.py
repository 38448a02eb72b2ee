"""The train record of a step: its reward curve is the policy's own, not the expert's."""

from fleetrl.store.trajectories import GroupRecord, RegionReport
from fleetrl.trainer.metrics import Ledger, RunCounters, StepTiming, train_record
from fleetrl.types import Segment, Trajectory


def episode(
    reward: float, guided: bool = False, tool_errors: int = 0, failed_edits: int = 0
) -> Trajectory:
    segment = Segment([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.5], [-1, 0, 0], guided=guided)
    return Trajectory(
        "t", [segment], reward, "finish", 2, 2, tool_errors, 1.0, failed_edits=failed_edits
    )


def test_a_guided_groups_expert_episode_is_counted_apart_from_the_reward():
    failed = [episode(0.0, tool_errors=2), episode(0.0), episode(1.0, guided=True)]
    solved = [episode(1.0), episode(0.0)]
    recovered = [episode(0.0, failed_edits=1), episode(1.0, guided=True, failed_edits=1)]
    batch = [failed, solved, recovered]
    groups = [GroupRecord("r", i, g, RegionReport("r", 0)) for i, g in enumerate(batch)]
    record = train_record(
        groups,
        [0, 0, 0],
        {},
        RunCounters(version=1, dropped_samples=0, skipped_groups=0),
        StepTiming(wait_s=0.0, publish_s=0.0, wall_s=1.0),
        1.0,
        Ledger(1, ["r/0", "r/1", "r/2"], [], [], []),
    )
    assert record.reward == 0.2 and record.pass_rate == 0.2  # 1 of the 5 sampled episodes
    assert record.guided_samples == 2 and record.guided_recoveries == 1
    assert record.tool_errors_mean == 0.4
    assert record.samples_per_s == 7.0  # every trajectory the step consumed
