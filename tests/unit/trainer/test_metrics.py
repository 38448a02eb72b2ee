"""The records of a step: the train record's reward curve is the policy's own, not the
expert's, and its step figures are `train_step`'s `StepStats`; the sync record's swap
figures are the regions' typed `VersionApplied` records."""

from dataclasses import asdict, fields

import pytest

from fleetrl.store.region_metrics import VersionApplied
from fleetrl.store.trajectories import GroupRecord, RegionReport, decode_record, encode_record
from fleetrl.store.weights import PublishResult
from fleetrl.trainer.metrics import Ledger, RunCounters, StepTiming, sync_record, train_record
from fleetrl.trainer.step import StepStats
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
        None,
        RunCounters(version=1, dropped_samples=0, skipped_groups=0),
        StepTiming(wait_s=0.0, publish_s=0.0, wall_s=1.0),
        1.0,
        Ledger(1, ["r/0", "r/1", "r/2"], [], [], []),
    )
    assert record.reward == 0.2 and record.pass_rate == 0.2  # 1 of the 5 sampled episodes
    assert record.guided_samples == 2 and record.guided_recoveries == 1
    assert record.tool_errors_mean == 0.4
    assert record.samples_per_s == 7.0  # every trajectory the step consumed


def one_step(groups: list[GroupRecord], stats: StepStats | None):
    return train_record(
        groups,
        [0] * len(groups),
        stats,
        RunCounters(version=1, dropped_samples=0, skipped_groups=0),
        StepTiming(wait_s=0.0, publish_s=0.0, wall_s=1.0),
        1.0,
        Ledger(1, [f"r/{r.seq}" for r in groups], [], [], []),
    )


def test_the_train_record_takes_the_steps_stats_by_name():
    groups = [GroupRecord("r", 0, [episode(1.0), episode(0.0)], RegionReport("r", 0))]
    stats = StepStats(**{f.name: float(i + 1) for i, f in enumerate(fields(StepStats))})
    record = one_step(groups, stats)
    assert {k: v for k, v in asdict(record).items() if k in asdict(stats)} == asdict(stats)
    assert record.forward_backward_s == stats.step_s
    # No group with signal: no optimizer step, and the step's keys stay out of the line.
    silent = one_step(groups, None)
    assert all(getattr(silent, f.name) is None for f in fields(StepStats))
    assert silent.forward_backward_s == 0.0


def swap(version: int, pause_s: float, fetch_s: float) -> VersionApplied:
    return VersionApplied(
        version=version, time=0.0, pause_s=pause_s, fetch_s=fetch_s, bytes=1, route="r"
    )


def test_the_sync_record_means_the_swaps_the_regions_reported():
    published = PublishResult(
        version=3, base=2, full=False, delta_bytes=900, full_bytes=0, manifest_bytes=100,
        elements=1000, nbytes=4000, changed=250, hash_s=0.0, encode_s=0.0, publish_s=0.0,
    )  # fmt: skip
    reports = [
        RegionReport("a", 2, swaps=[swap(1, 0.001, 0.1), swap(2, 0.003, 0.3)]),
        RegionReport("b", 2, swaps=[swap(2, 0.002, 0.2)]),
        RegionReport("a", 2),
    ]
    # The reports as the trainer reads them: back from the channel's JSON, typed.
    batch = [
        decode_record(encode_record(GroupRecord(r.region, i, [episode(1.0)], r)))
        for i, r in enumerate(reports)
    ]
    record = sync_record(published, batch)
    assert record.sync_pause_ms == pytest.approx(2.0) and record.sync_fetch_ms == pytest.approx(200)
    assert (record.sync_bytes, record.full_bytes, record.unchanged_frac) == (1000, 4000, 0.75)
    no_swaps = sync_record(published, batch[2:])
    assert no_swaps.sync_pause_ms is None and no_swaps.sync_fetch_ms is None
