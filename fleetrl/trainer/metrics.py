"""What the trainer logs per step: its records (`fleetrl.observe.records`) built from a
trained batch, so the loop only says when to log, and the report reads the same fields."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from fleetrl.observe.records import SyncRecord, TrainRecord
from fleetrl.store.trajectories import GroupRecord
from fleetrl.store.weights import PublishResult
from fleetrl.trainer.step import StepStats


@dataclass
class StepTiming:
    """Where one step's wall time went, in seconds."""

    wait_s: float  # waiting for enough groups
    publish_s: float  # publishing the new version
    wall_s: float  # the whole step, from the end of the previous one


@dataclass
class RunCounters:
    """The trainer's running totals as of this step."""

    version: int  # the version this step published
    dropped_samples: int  # samples dropped as too stale since the run began
    skipped_groups: int  # groups without reward variance since the run began


@dataclass
class Ledger:
    """Which groups one step accounted for, by id ("region/seq")."""

    incarnation: int  # the trainer's start count
    trained: list[str]  # batch groups with signal
    skipped: list[str]  # groups without reward variance (in the batch or kept out of it)
    dropped: list[str]  # dropped as too stale since the previous step
    pending: list[str]  # read, not trained yet


def group_id(record: GroupRecord) -> str:
    """A group's id in the ledger: its place in the trajectory channel."""
    return f"{record.region}/{record.seq}"


def ledger(
    incarnation: int,
    trained: list[GroupRecord],
    skipped: list[GroupRecord],
    dropped: list[GroupRecord],
    pending: list[GroupRecord],
) -> Ledger:
    """The ledger of one step, by group id."""
    return Ledger(
        incarnation,
        trained=[group_id(r) for r in trained],
        skipped=[group_id(r) for r in skipped],
        dropped=[group_id(r) for r in dropped],
        pending=[group_id(r) for r in pending],
    )


def histogram(values: list[int]) -> list[int]:
    """Counts of 0, 1, 2, … in `values`."""
    counts = [0] * (max(values, default=0) + 1)
    for v in values:
        counts[v] += 1
    return counts


def train_record(
    consumed: list[GroupRecord],
    ages: list[int],
    stats: StepStats | None,
    counters: RunCounters,
    timing: StepTiming,
    output_scale: float,
    books: Ledger,
) -> TrainRecord:
    """The "train" record of one step: what `train_step` measured (None when no group had
    signal: no optimizer step ran), the rewards and staleness (`ages`: per group) of the
    groups the step consumed (its batch and the groups dynamic sampling skipped, so the
    reward curve is not flattered by the filter, nor by guided groups' expert episodes),
    the loop's timing and the step's ledger."""
    trajectories = [t for record in consumed for t in record.trajectories]
    guided = [t for t in trajectories if any(s.guided for s in t.segments)]
    sampled = [t for t in trajectories if not any(s.guided for s in t.segments)]
    rewards = [t.reward for t in sampled]
    tokens = sum(sum(s.loss_mask) for t in trajectories for s in t.segments)
    sample_ages = [age for age, r in zip(ages, consumed, strict=True) for _ in r.trajectories]
    return TrainRecord(
        **(asdict(stats) if stats else {}),
        version=counters.version,
        reward=sum(rewards) / len(rewards),
        pass_rate=sum(r >= 1.0 for r in rewards) / len(rewards),
        staleness_hist=histogram(sample_ages),
        staleness_mean=sum(ages) / len(ages),
        dropped_samples=counters.dropped_samples,
        skipped_groups=counters.skipped_groups,
        wait_s=timing.wait_s,
        forward_backward_s=stats.step_s if stats else 0.0,
        publish_s=timing.publish_s,
        samples_per_s=len(trajectories) / timing.wall_s,
        tokens_per_s=tokens / timing.wall_s,
        trainer_idle_frac=timing.wait_s / timing.wall_s,
        output_scale=output_scale,
        tool_errors_mean=sum(t.tool_errors for t in sampled) / len(rewards),
        feedback_age_s=_feedback_age(consumed),
        guided_samples=len(guided),
        guided_recoveries=sum(t.failed_edits > 0 for t in guided),
        incarnation=books.incarnation,
        group_ids=books.trained,
        skipped_group_ids=books.skipped,
        dropped_group_ids=books.dropped,
        pending_group_ids=books.pending,
    )


def sync_record(published: PublishResult, batch: list[GroupRecord]) -> SyncRecord:
    """The "sync" record of one published version, with the mean weight-swap pause and
    fetch time the regions reported alongside the batch's groups."""
    swaps = [s for r in batch for s in r.report.swaps]
    return SyncRecord(
        sync_bytes=published.shipped_bytes,
        full_bytes=published.nbytes,
        unchanged_frac=published.unchanged_frac,
        sync_pause_ms=1000 * sum(s.pause_s for s in swaps) / len(swaps) if swaps else None,
        sync_fetch_ms=1000 * sum(s.fetch_s for s in swaps) / len(swaps) if swaps else None,
    )


def _feedback_age(consumed: list[GroupRecord]) -> float | None:
    """Mean seconds since the consumed groups were handed in (those that say when)."""
    now = time.time()
    ages = [now - r.report.handed_in for r in consumed if r.report.handed_in > 0]
    return sum(ages) / len(ages) if ages else None
